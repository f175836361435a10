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

double ExecutorCore::group_overhead_locked(double depth) {
  if (!adapters_used) return 0;
  auto &groups = group_scratch;
  groups.clear();
  for (const Conv *c : plan_convs) group_of(groups, c->next_adapters().get());
  if (groups.size() <= 1 && (groups.empty() || same_adapters(groups[0], ctx_adapters.get()))) return 0;
  const bool current = std::any_of(groups.begin(), groups.end(),
                                   [&](const AdapterConfig *g) { return same_adapters(g, ctx_adapters.get()); });
  // An extra call streams the weights again: about a one-token decode.
  const double per_call = cost.predict(1, depth) * cost.margin(1);
  const auto switches = static_cast<double>(groups.size() - (current ? 1 : 0));
  return static_cast<double>(groups.size() - 1) * per_call + switches * cost.switch_seconds();
}

void ExecutorCore::group_segments(bool urgent_first) {
  auto &groups = group_scratch;
  groups.clear();
  // Without a deadline the whole plan runs: the context's current group goes
  // first, saving a switch. With one, groups go in the order of their most
  // urgent conversation (segments are in rank order), so those that waited
  // longest are decoded before the clock runs out, whatever their group:
  // no group starves.
  if (!urgent_first) {
    for (const Segment &s : segments) {
      if (same_adapters(s.adapters.get(), ctx_adapters.get())) {
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
  if (same_adapters(cfg.get(), ctx_adapters.get())) return false;
  if (ctx != nullptr) apply_adapter_config(ctx, *model.impl(), cfg.get(), ctx_adapters.get());
  ctx_adapters = cfg;
  ++stats.adapter_switches;
  return true;
}

}  // namespace weft::detail
