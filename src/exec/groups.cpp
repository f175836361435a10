// Adapter groups: a step's plan decodes each adapter setting in llama_decode
// calls of its own (llama.cpp applies adapters to a whole context), so the
// plan is ordered by group, each group's cost is budgeted, and the context
// is switched between groups.
#include <algorithm>

#include "core/internal.hpp"
#include "core/model_impl.hpp"
#include "exec/executor_core.hpp"

namespace weft::detail {
namespace {

// Index of cfg's group in `groups`, adding it when new.
std::size_t group_of(std::vector<const AdapterConfig *> &groups, const AdapterConfig *cfg) {
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (same_adapters(groups[i], cfg)) return i;
  }
  groups.push_back(cfg);
  return groups.size() - 1;
}

}  // namespace

double ExecutorCore::group_overhead_locked(double depth, const std::vector<PlanEntry> *in_plan) {
  if (!adapter_state.used) return 0;
  auto &groups = scratch.planning.groups;
  groups.clear();
  if (in_plan != nullptr) {
    for (const PlanEntry &e : *in_plan) group_of(groups, scratch.planning.convs[e.index]->next_adapters().get());
  } else {
    for (const Conv *c : scratch.planning.convs) group_of(groups, c->next_adapters().get());
  }
  if (groups.size() <= 1 && (groups.empty() || same_adapters(groups[0], adapter_state.current.get()))) return 0;
  const bool current = std::any_of(groups.begin(), groups.end(),
                                   [&](const AdapterConfig *g) { return same_adapters(g, adapter_state.current.get()); });
  // An extra call streams the weights again: about a one-token decode.
  const double per_call = cost.predict(1, depth) * cost.margin(1);
  const auto switches = static_cast<double>(groups.size() - (current ? 1 : 0));
  return static_cast<double>(groups.size() - 1) * per_call + switches * cost.switch_seconds();
}

void ExecutorCore::replan_for_groups_locked(double left, double depth, std::uint32_t &token_budget,
                                            std::uint64_t wanted) {
  // The budget was cut for every candidate's group, and plan_batch spreads
  // its tokens over groups by rank: under a tight budget that is one token a
  // step. Instead take the groups in the order of their most urgent
  // candidate (plan_batch left `candidates` in rank order) and plan for as
  // many of them as serve the most tokens: groups left out rise in rank and
  // lead the next step, so every group still takes its turn.
  if (kv->cells_free() < std::min<std::uint64_t>(token_budget, wanted)) return;  // the pressure path decides
  auto &order = scratch.planning.groups;
  order.clear();
  auto &member = scratch.planning.group_index;
  member.assign(scratch.planning.convs.size(), 0);
  for (const PlanCandidate &c : scratch.planning.candidates)
    member[c.index] = group_of(order, scratch.planning.convs[c.index]->next_adapters().get());
  const std::size_t n_groups = order.size();
  if (n_groups < 2) return;
  const double per_call = cost.predict(1, depth) * cost.margin(1);
  std::size_t best_k = 0;
  std::uint32_t best_tokens = 0, best_served = 0;
  std::uint64_t cap_sum = 0;
  bool has_current = false;
  for (std::size_t k = 1; k <= n_groups; ++k) {
    for (const PlanCandidate &c : scratch.planning.candidates) {
      if (member[c.index] != k - 1) continue;
      std::uint32_t cap = c.generating ? 1u : std::min(c.queued, c.room);
      if (!c.generating && params.max_prompt_chunk != 0) cap = std::min(cap, params.max_prompt_chunk);
      cap_sum += cap;
    }
    has_current = has_current || same_adapters(order[k - 1], adapter_state.current.get());
    const double overhead = static_cast<double>(k - 1) * per_call +
                            static_cast<double>(k - (has_current ? 1 : 0)) * cost.switch_seconds();
    const std::uint32_t tokens = cost.tokens_within(left - overhead, depth, params.n_batch);
    const auto served = static_cast<std::uint32_t>(std::min<std::uint64_t>(tokens, cap_sum));
    if (served >= best_served) {  // ties: more groups
      best_k = k;
      best_tokens = tokens;
      best_served = served;
    }
  }
  if (best_k == n_groups && best_tokens <= token_budget) return;  // the plan made stands
  auto &kept = scratch.planning.group_candidates;
  kept.clear();
  for (const PlanCandidate &c : scratch.planning.candidates) {
    if (member[c.index] < best_k) kept.push_back(c);
  }
  token_budget = std::min(best_tokens, params.n_batch);
  plan_batch(kept, {token_budget, kv->cells_free(), params.max_prompt_chunk, stats.steps}, scratch.planning.entries);
}

void ExecutorCore::group_segments(std::vector<Segment> &segments, bool urgent_first) {
  auto &groups = scratch.planning.groups;
  groups.clear();
  // Without a deadline the whole plan runs: the context's current group goes
  // first, saving a switch. With one, groups go in the order of their most
  // urgent conversation (segments are in rank order), so those that waited
  // longest are decoded before the clock runs out, whatever their group:
  // no group starves.
  if (!urgent_first) {
    for (const Segment &s : segments) {
      if (same_adapters(s.adapters.get(), adapter_state.current.get())) {
        groups.push_back(s.adapters.get());
        break;
      }
    }
  }
  for (const Segment &s : segments) group_of(groups, s.adapters.get());
  if (groups.size() <= 1) return;
  std::stable_sort(segments.begin(), segments.end(), [&](const Segment &a, const Segment &b) {
    return group_of(groups, a.adapters.get()) < group_of(groups, b.adapters.get());
  });
}

bool ExecutorCore::use_adapters(const AdapterConfigPtr &cfg) {
  if (same_adapters(cfg.get(), adapter_state.current.get())) return false;
  if (ctx != nullptr) apply_adapter_config(ctx, *model.impl(), cfg.get(), adapter_state.current.get());
  adapter_state.current = cfg;
  ++stats.adapter_switches;
  return true;
}

}  // namespace weft::detail
