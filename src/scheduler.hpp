// Batch planning: which conversations get how many tokens in one step.
//
// A pure function over a snapshot of candidates, so it can be unit-tested
// without llama.cpp and measured on its own. Policy:
//   1. Generating conversations (one sampled token waiting) come first, one
//      token each, least recently served first.
//   2. The rest of the budget goes to prompt chunks, ordered by priority plus
//      age (steps since last served / kAgingSteps), so a long prompt cannot
//      hold back a waiting one forever. Each gets a fair share first
//      (remaining / candidates, at least 1), then leftovers in order.
//   3. Nobody exceeds its own `room` (context or KV limits) or max_chunk, and
//      the total never exceeds the budget or the free KV cells.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace weft::detail {

inline constexpr std::uint64_t kAgingSteps = 8;

struct PlanCandidate {
  std::uint32_t index = 0;        // caller's id for the conversation
  std::uint32_t queued = 0;       // tokens waiting
  std::uint32_t room = 0;         // most tokens it may take now
  int priority = 0;
  std::uint64_t last_served = 0;  // step it last got tokens
  bool generating = false;        // its single queued token is a sampled one
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

// Fills `out` (cleared first) with entries of n_tokens >= 1, generating ones
// first. Reorders `candidates`. Allocates nothing once `out` has capacity.
void plan_batch(std::span<PlanCandidate> candidates, const PlanLimits &limits, std::vector<PlanEntry> &out);

}  // namespace weft::detail
