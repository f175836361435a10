#include "sched/scheduler.hpp"

#include <algorithm>

namespace weft::detail {
namespace {

std::uint64_t effective_priority(const PlanCandidate &c, std::uint64_t step) {
  const std::uint64_t age = step > c.waiting_since ? (step - c.waiting_since) / kAgingSteps : 0;
  // Offset keeps negative priorities ordered below zero without signed math.
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(c.priority) + (1ll << 31)) + age;
}

std::uint32_t cap_of(const PlanCandidate &c, const PlanLimits &limits) {
  std::uint32_t n = std::min(c.queued, c.room);
  if (c.generating) return std::min(n, 1u);
  if (limits.max_chunk != 0) n = std::min(n, limits.max_chunk);
  return n;
}

}  // namespace

void plan_batch(std::span<PlanCandidate> candidates, const PlanLimits &limits, std::vector<PlanEntry> &out) {
  out.clear();
  std::uint32_t remaining = std::min(limits.budget, limits.free_cells);
  if (remaining == 0 || candidates.empty()) return;

  const std::uint64_t step = limits.step;
  std::sort(candidates.begin(), candidates.end(), [step](const PlanCandidate &a, const PlanCandidate &b) {
    const auto pa = effective_priority(a, step), pb = effective_priority(b, step);
    if (pa != pb) return pa > pb;
    if (a.waiting_since != b.waiting_since) return a.waiting_since < b.waiting_since;
    if (a.generating != b.generating) return a.generating;
    return a.index < b.index;
  });

  // 1. Turns: one token each, in rank order.
  std::uint32_t prompts = 0;
  for (const auto &c : candidates) {
    if (remaining == 0) break;
    if (cap_of(c, limits) == 0) continue;
    out.push_back({c.index, 1});
    --remaining;
    prompts += c.generating ? 0u : 1u;
  }
  if (remaining == 0 || prompts == 0) return;

  // 2. Shares for the prompts served. `out` and the candidates with a
  // non-zero cap are in the same order, so one walk pairs them.
  // Spread the division's remainder one token each over the first prompts
  // rather than giving it all to the first: 64 over 33 is 2,...,2,1,1.
  const std::uint32_t share = remaining / prompts;
  std::uint32_t extra = remaining % prompts;
  auto walk = [&](auto &&give) {
    std::size_t k = 0;
    for (auto &e : out) {
      while (candidates[k].index != e.index) ++k;
      const PlanCandidate &c = candidates[k];
      if (!c.generating) give(e, cap_of(c, limits));
    }
  };
  walk([&](PlanEntry &e, std::uint32_t cap) {
    std::uint32_t want = share + (extra > 0 ? 1u : 0u);
    if (extra > 0) --extra;
    const std::uint32_t more = std::min({cap - e.n_tokens, want, remaining});
    e.n_tokens += more;
    remaining -= more;
  });
  // Leftovers (from those that wanted less than a share) in rank order.
  walk([&](PlanEntry &e, std::uint32_t cap) {
    const std::uint32_t more = std::min(cap - e.n_tokens, remaining);
    e.n_tokens += more;
    remaining -= more;
  });
}

}  // namespace weft::detail
