// The planner under load: aging lifts low priorities, and a reserved plan
// allocates nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "sched/scheduler.hpp"
#include "sched/scheduler_helpers.hpp"

using weft::detail::plan_batch;
using namespace sched_test;

TEST(Scheduler, AgingServesLowPriorityUnderLoad) {
  constexpr std::uint32_t kBudget = 8, kMaxArrivals = 1, kOld = 56;
  static_assert(kOld == 7 * kAgingSteps, "the bound below assumes 8 steps per priority level");
  std::vector<PlanCandidate> cands;
  std::vector<PlanEntry> out;
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::vector<PlanCandidate> live;
    live.push_back({.index = 0, .queued = 1000000, .room = 1000000, .priority = -3});
    std::uint32_t next_id = 1;
    for (; next_id <= 40; ++next_id) {
      live.push_back({.index = next_id, .queued = 1000000, .room = 1000000, .priority = 3});
    }
    std::uint64_t last_x = 0, worst_gap = 0, best_gap = UINT64_MAX, x_served = 0;
    std::size_t max_others = 0;
    std::vector<std::uint64_t> gaps;
    for (std::uint64_t step = 1; step <= 3000; ++step) {
      for (std::uint32_t a = 0; a < kMaxArrivals; ++a) {
        if (uniform(rng, 0, 3) == 0) {
          live.push_back({.index = next_id++, .queued = uniform(rng, 5, 20), .room = 4096, .priority = 3});
        }
      }
      max_others = std::max(max_others, live.size() - 1);
      cands.assign(live.begin(), live.end());
      plan_batch(cands, {.budget = kBudget, .free_cells = 100000, .max_chunk = 0, .step = step}, out);
      const auto got = by_index(out);
      for (auto &c : live) {
        const auto g = got.find(c.index);
        if (g == got.end()) continue;
        c.queued -= g->second;
        c.waiting_since = step;
      }
      if (got.count(0)) {
        worst_gap = std::max(worst_gap, step - last_x);
        best_gap = std::min(best_gap, step - last_x);
        last_x = step;
        ++x_served;
      }
      std::erase_if(live, [](const PlanCandidate &c) { return c.queued == 0; });
    }
    const std::uint64_t bound = kOld + (max_others + (kBudget - kMaxArrivals) - 1) / (kBudget - kMaxArrivals);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " worst gap " << worst_gap << " bound " << bound
                                      << " others up to " << max_others);
    EXPECT_LE(worst_gap, bound);
    EXPECT_GT(x_served, 3000u / bound) << "served regularly, not once";
    // The priority still matters: the priority 3 ones are served every few steps,
    // so X must age 6 levels (48 steps) before it can rank with them.
    EXPECT_GE(best_gap, 6 * kAgingSteps);
  }
}

TEST(Scheduler, NoAllocationOnceReserved) {
  std::mt19937 rng(42);
  constexpr std::size_t kMax = 300;
  std::vector<PlanEntry> out;
  out.reserve(kMax);
  const auto capacity = out.capacity();
  const PlanEntry *data = out.data();
  std::vector<PlanCandidate> cands;
  cands.reserve(kMax);
  for (int i = 0; i < 2000; ++i) {
    cands.clear();
    const std::uint32_t n = uniform(rng, 0, kMax);
    for (std::uint32_t k = 0; k < n; ++k) {
      cands.push_back({.index = k, .queued = uniform(rng, 0, 600), .room = uniform(rng, 0, 600),
                       .priority = static_cast<int>(uniform(rng, 0, 6)) - 3, .waiting_since = uniform(rng, 0, 100),
                       .generating = uniform(rng, 0, 3) == 0});
      if (cands.back().generating) cands.back().queued = std::max(cands.back().queued, 1u);
    }
    plan_batch(cands, {.budget = uniform(rng, 1, 512), .free_cells = uniform(rng, 0, 1000),
                       .max_chunk = uniform(rng, 0, 64), .step = 100},
               out);
    ASSERT_EQ(out.capacity(), capacity) << "call " << i;
    ASSERT_EQ(out.data(), data) << "call " << i;
  }
}
