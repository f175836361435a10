// Helpers shared by the scheduler's tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "sched/scheduler.hpp"

namespace sched_test {

using weft::detail::kAgingSteps;
using weft::detail::PlanCandidate;
using weft::detail::PlanEntry;
using weft::detail::PlanLimits;

inline std::uint32_t uniform(std::mt19937 &rng, std::uint32_t lo, std::uint32_t hi) {
  return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
}

// What a candidate may take at most: one token when generating, else its prompt cap.
inline std::uint32_t cap_of(const PlanCandidate &c, const PlanLimits &l) {
  std::uint32_t n = std::min(c.queued, c.room);
  if (c.generating) return std::min(n, 1u);
  if (l.max_chunk != 0) n = std::min(n, l.max_chunk);
  return n;
}

inline std::uint64_t total_of(const std::vector<PlanEntry> &out) {
  std::uint64_t t = 0;
  for (const auto &e : out) t += e.n_tokens;
  return t;
}

// Tokens planned per index; the planner reorders its input, so look up by index.
inline std::map<std::uint32_t, std::uint32_t> by_index(const std::vector<PlanEntry> &out) {
  std::map<std::uint32_t, std::uint32_t> m;
  for (const auto &e : out) m[e.index] += e.n_tokens;
  return m;
}

// The planner's ranking: effective priority (one level per kAgingSteps
// waited), then longest waiting, then generating before prompts, then index.
inline bool ranks_before(const PlanCandidate &a, const PlanCandidate &b, std::uint64_t step) {
  auto eff = [step](const PlanCandidate &c) {
    return static_cast<std::int64_t>(c.priority) +
           static_cast<std::int64_t>(step > c.waiting_since ? (step - c.waiting_since) / kAgingSteps : 0);
  };
  if (eff(a) != eff(b)) return eff(a) > eff(b);
  if (a.waiting_since != b.waiting_since) return a.waiting_since < b.waiting_since;
  if (a.generating != b.generating) return a.generating;
  return a.index < b.index;
}

// Zero is rare in a uniform 0..5000, so force it sometimes to reach the edge cases.
inline std::uint32_t maybe_zero(std::mt19937 &rng, std::uint32_t hi) {
  return uniform(rng, 0, 9) == 0 ? 0 : uniform(rng, 0, hi);
}

}  // namespace sched_test
