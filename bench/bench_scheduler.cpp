// Cost of planning one batch (weft::detail::plan_batch) for N conversations:
// 16 generating, the rest prompts of random lengths, budget 512. The planner
// reorders its input, so each iteration copies a fixed template into a reused
// working vector; nothing allocates inside the loop.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "sched/scheduler.hpp"

namespace {

using weft::detail::PlanCandidate;
using weft::detail::PlanEntry;
using weft::detail::PlanLimits;

std::vector<PlanCandidate> make_candidates(std::uint32_t n, std::uint64_t step) {
  std::mt19937 rng(1234);
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  std::vector<PlanCandidate> cands(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    auto &c = cands[i];
    c.index = i;
    c.generating = i < 16;
    c.queued = c.generating ? 1 : uniform(1, 2000);
    c.room = uniform(1000, 4096);
    c.priority = static_cast<int>(uniform(0, 6)) - 3;
    c.waiting_since = step - uniform(1, 100);
  }
  // Callers pass conversations in map order, not grouped by kind.
  std::shuffle(cands.begin(), cands.end(), rng);
  return cands;
}

void BM_PlanBatch(benchmark::State &state) {
  const auto n = static_cast<std::uint32_t>(state.range(0));
  const PlanLimits limits{.budget = 512, .free_cells = 100000, .max_chunk = 0, .step = 1000};
  const auto tmpl = make_candidates(n, limits.step);
  std::vector<PlanCandidate> work(tmpl.size());
  std::vector<PlanEntry> out;
  out.reserve(tmpl.size());
  for (auto _ : state) {
    std::copy(tmpl.begin(), tmpl.end(), work.begin());
    weft::detail::plan_batch(work, limits, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // One item per conversation considered; time per iteration is time per plan.
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * n);
  state.counters["entries"] = static_cast<double>(out.size());
}

}  // namespace

BENCHMARK(BM_PlanBatch)->Arg(16)->Arg(256)->Arg(1024);

BENCHMARK_MAIN();
