// Batch planning: which conversations get how many tokens in one step.
//
// A pure function over a snapshot of candidates, so it can be unit-tested
// without llama.cpp and measured on its own. Policy:
//   1. Turns. Candidates are ranked by effective priority (priority plus one
//      level per kAgingSteps steps waited), then by how long they have waited
//      (`waiting_since`, oldest first), generating ones before prompts on a
//      tie. Walking that ranking, each gets one token until the budget runs
//      out — so when the budget holds fewer tokens than there are runnable
//      conversations, they take turns: whoever is served goes to the back.
//   2. Shares. What is left goes to the prompts served in (1): each first gets
//      a fair share (remaining / prompts), then leftovers in rank order. A
//      generating conversation takes exactly one token (its sampled one).
//   3. Nobody exceeds its own `room` (context or KV limits) or max_chunk, and
//      the total never exceeds the budget or the free KV cells.
//
// Liveness bound (tested in tests/test_scheduler.cpp): with equal priorities
// and a token budget T >= 1 a step, a candidate is served within ceil(R / T)
// steps of starting to wait, R the candidates ranked at or above it when it
// started; a conversation Δ priority levels below the others waits at most
// Δ * kAgingSteps steps more.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace weft::detail {

inline constexpr std::uint64_t kAgingSteps = 8;

struct PlanCandidate {
  std::uint32_t index = 0;         // caller's id for the conversation
  std::uint32_t queued = 0;        // tokens waiting
  std::uint32_t room = 0;          // most tokens it may take now
  int priority = 0;
  std::uint64_t waiting_since = 0;  // step it was last served, or got input after being idle
  bool generating = false;         // its single queued token is a sampled one
};

struct PlanEntry {
  std::uint32_t index = 0;
  std::uint32_t n_tokens = 0;
};

struct PlanLimits {
  std::uint32_t budget = 0;      // tokens in this batch
  std::uint32_t free_cells = 0;  // KV cells available
  std::uint32_t max_chunk = 0;   // per-conversation prompt cap; 0 = none
  std::uint64_t step = 0;        // current step number (for aging)
};

// Fills `out` (cleared first) with entries of n_tokens >= 1 in rank order.
// Reorders `candidates` (ranked). Allocates nothing once `out` has capacity.
void plan_batch(std::span<PlanCandidate> candidates, const PlanLimits &limits, std::vector<PlanEntry> &out);

}  // namespace weft::detail
