#include "scheduler.hpp"

#include <algorithm>

namespace weft::detail {
namespace {

std::uint64_t effective_priority(const PlanCandidate &c, std::uint64_t step) {
  const std::uint64_t age = step > c.last_served ? (step - c.last_served) / kAgingSteps : 0;
  // Offset keeps negative priorities ordered below zero without signed math.
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(c.priority) + (1ll << 31)) + age;
}

}  // namespace

void plan_batch(std::span<PlanCandidate> candidates, const PlanLimits &limits, std::vector<PlanEntry> &out) {
  out.clear();
  std::uint32_t remaining = std::min(limits.budget, limits.free_cells);
  if (remaining == 0 || candidates.empty()) return;

  // Generating first, then by effective priority, then oldest served, then index.
  const std::uint64_t step = limits.step;
  std::sort(candidates.begin(), candidates.end(), [step](const PlanCandidate &a, const PlanCandidate &b) {
    if (a.generating != b.generating) return a.generating;
    if (!a.generating) {
      const auto pa = effective_priority(a, step), pb = effective_priority(b, step);
      if (pa != pb) return pa > pb;
    }
    if (a.last_served != b.last_served) return a.last_served < b.last_served;
    return a.index < b.index;
  });

  std::size_t first_prompt = 0;
  for (; first_prompt < candidates.size() && candidates[first_prompt].generating; ++first_prompt) {
    const auto &c = candidates[first_prompt];
    if (remaining == 0) continue;
    if (c.queued == 0 || c.room == 0) continue;
    out.push_back({c.index, 1});
    --remaining;
  }

  const auto prompts = candidates.subspan(first_prompt);
  auto cap = [&](const PlanCandidate &c) {
    std::uint32_t n = std::min(c.queued, c.room);
    if (limits.max_chunk != 0) n = std::min(n, limits.max_chunk);
    return n;
  };
  std::uint32_t eligible = 0;
  for (const auto &c : prompts) eligible += cap(c) > 0 ? 1u : 0u;
  if (eligible == 0 || remaining == 0) return;

  const std::size_t base = out.size();
  // Spread the division's remainder one token each over the first prompts rather
  // than giving it all to the first: 64 over 33 is 2,...,2,1,1, not 32,1,...,1.
  std::uint32_t share = remaining / eligible, extra = remaining % eligible;
  if (share == 0) {
    share = 1;  // fewer tokens than prompts: one each, in order, until they run out
    extra = 0;
  }
  for (const auto &c : prompts) {
    if (remaining == 0) break;
    const std::uint32_t want = cap(c);
    if (want == 0) continue;
    const std::uint32_t n = std::min({want, share + (extra > 0 ? 1u : 0u), remaining});
    if (extra > 0) --extra;
    out.push_back({c.index, n});
    remaining -= n;
  }
  // Leftovers (from those that wanted less than a share) in the same order.
  for (std::size_t i = base, k = 0; i < out.size() && remaining > 0; ++i) {
    while (k < prompts.size() && prompts[k].index != out[i].index) ++k;
    const std::uint32_t more = std::min(cap(prompts[k]) - out[i].n_tokens, remaining);
    out[i].n_tokens += more;
    remaining -= more;
  }
}

}  // namespace weft::detail
