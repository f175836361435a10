// The batch planner (src/scheduler.hpp) as a pure function: properties over
// seeded random candidate sets, plus step-by-step simulations for starvation
// and aging. No llama.cpp involved.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "sched/scheduler.hpp"
#include "sched/scheduler_helpers.hpp"

using weft::detail::kAgingSteps;
using weft::detail::plan_batch;
using weft::detail::PlanCandidate;
using weft::detail::PlanEntry;
using weft::detail::PlanLimits;

using namespace sched_test;

TEST(Scheduler, RandomProperties) {
  std::vector<PlanEntry> out;
  for (unsigned seed = 1; seed <= 2000; ++seed) {
    std::mt19937 rng(seed);
    const std::uint32_t n = uniform(rng, 0, 9) == 0 ? uniform(rng, 0, 3) : uniform(rng, 0, 300);
    PlanLimits limits;
    limits.budget = uniform(rng, 1, 512);
    limits.free_cells = uniform(rng, 0, 3) == 0 ? uniform(rng, 0, 8) : uniform(rng, 0, 1000);
    limits.max_chunk = uniform(rng, 0, 1) == 0 ? 0 : uniform(rng, 1, 128);
    limits.step = uniform(rng, 0, 1000);
    const std::uint32_t gen_share = uniform(rng, 0, 4);  // vary the generating fraction per case

    // Unique but non-contiguous ids, as a caller might use.
    std::vector<std::uint32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0u);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<PlanCandidate> cands(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      auto &c = cands[i];
      c.index = ids[i] * 3 + 7;
      c.generating = uniform(rng, 0, 3) < gen_share;
      c.queued = c.generating ? (uniform(rng, 0, 3) == 0 ? uniform(rng, 1, 5000) : 1) : maybe_zero(rng, 5000);
      c.room = maybe_zero(rng, 5000);
      c.priority = static_cast<int>(uniform(rng, 0, 6)) - 3;
      c.waiting_since = uniform(rng, 0, static_cast<std::uint32_t>(limits.step));
    }
    const auto original = cands;
    std::map<std::uint32_t, PlanCandidate> cand_of;
    for (const auto &c : original) cand_of[c.index] = c;

    plan_batch(cands, limits, out);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " n " << n << " budget " << limits.budget << " free "
                                      << limits.free_cells << " max_chunk " << limits.max_chunk);

    // The input is only reordered.
    auto sorted_in = original, sorted_now = cands;
    auto idx_less = [](const PlanCandidate &a, const PlanCandidate &b) { return a.index < b.index; };
    std::sort(sorted_in.begin(), sorted_in.end(), idx_less);
    std::sort(sorted_now.begin(), sorted_now.end(), idx_less);
    for (std::size_t i = 0; i < sorted_in.size(); ++i) {
      ASSERT_EQ(sorted_in[i].index, sorted_now[i].index);
      ASSERT_EQ(sorted_in[i].queued, sorted_now[i].queued);
      ASSERT_EQ(sorted_in[i].room, sorted_now[i].room);
    }

    const std::uint32_t limit = std::min(limits.budget, limits.free_cells);
    const std::uint64_t total = total_of(out);
    ASSERT_LE(total, limit);

    std::map<std::uint32_t, std::uint32_t> got;
    for (const auto &e : out) {
      ASSERT_TRUE(cand_of.count(e.index)) << "unknown index " << e.index;
      ASSERT_EQ(got.count(e.index), 0u) << "index " << e.index << " planned twice";
      got[e.index] = e.n_tokens;
      const auto &c = cand_of[e.index];
      ASSERT_GE(e.n_tokens, 1u);
      ASSERT_LE(e.n_tokens, std::min(c.queued, c.room));
      if (c.generating) {
        ASSERT_EQ(e.n_tokens, 1u);
      } else if (limits.max_chunk != 0) {
        ASSERT_LE(e.n_tokens, limits.max_chunk);
      }
    }

    // Turns: a candidate that could take a token is left out only when the
    // batch is full of one-token turns of candidates ranked above it.
    for (const auto &c : original) {
      if (cap_of(c, limits) == 0 || got.count(c.index)) continue;
      ASSERT_EQ(out.size(), limit) << "index " << c.index << " left out of a batch with room for another turn";
      for (const auto &e : out) {
        ASSERT_EQ(e.n_tokens, 1u);
        ASSERT_TRUE(ranks_before(cand_of[e.index], c, limits.step))
            << "index " << e.index << " served before " << c.index << " which ranks above it";
      }
    }

    // Work-conserving: spare room means everyone who could take more got all of it.
    if (total < limit) {
      for (const auto &c : original) {
        const std::uint32_t cap = cap_of(c, limits);
        if (cap == 0) continue;
        ASSERT_TRUE(got.count(c.index)) << "index " << c.index << " left out with room to spare";
        ASSERT_EQ(got[c.index], cap) << "index " << c.index;
      }
    }

    // Fair share: when every candidate can get a turn, each prompt gets at
    // least min(cap, what is left after the generating ones / prompts).
    std::uint64_t eligible = 0, gen_total = 0, takers = 0;
    for (const auto &c : original) {
      if (cap_of(c, limits) == 0) continue;
      ++takers;
      if (c.generating) ++gen_total; else ++eligible;
    }
    const std::uint64_t after_gen = limit - std::min<std::uint64_t>(limit, gen_total);
    if (eligible > 0 && takers <= limit) {
      const std::uint64_t share = after_gen / eligible;
      for (const auto &c : original) {
        if (c.generating || cap_of(c, limits) == 0) continue;
        ASSERT_GE(got[c.index], std::min<std::uint64_t>(cap_of(c, limits), share)) << "index " << c.index;
      }
    }
  }
}

// On a tie in rank (same priority, same wait) generating conversations go
// first, and among those who waited longer the oldest go first.
TEST(Scheduler, GeneratingFirstOnATieOldestFirstOtherwise) {
  std::vector<PlanEntry> out;
  for (unsigned seed = 1; seed <= 500; ++seed) {
    std::mt19937 rng(seed);
    const std::uint32_t n_gen = uniform(rng, 2, 100);
    std::vector<PlanCandidate> cands;
    for (std::uint32_t i = 0; i < n_gen; ++i) {
      cands.push_back({.index = i, .queued = 1, .room = uniform(rng, 1, 100), .priority = 0,
                       .waiting_since = 50, .generating = true});
    }
    for (std::uint32_t i = 0; i < 20; ++i) {
      cands.push_back({.index = 1000 + i, .queued = 100, .room = 100, .priority = 0, .waiting_since = 50});
    }
    std::shuffle(cands.begin(), cands.end(), rng);
    const PlanLimits limits{.budget = uniform(rng, 1, n_gen - 1), .free_cells = 1000, .max_chunk = 0, .step = 51};
    plan_batch(cands, limits, out);
    ASSERT_EQ(out.size(), limits.budget) << "seed " << seed;
    for (const auto &e : out) ASSERT_LT(e.index, 1000u) << "seed " << seed << ": a prompt went before a tie";

    // A prompt that has waited longer than every generating one goes first.
    cands.push_back({.index = 5000, .queued = 100, .room = 100, .priority = 0, .waiting_since = 49});
    plan_batch(cands, limits, out);
    ASSERT_EQ(out.front().index, 5000u) << "seed " << seed;
  }
}

// The case: eight conversations generating, a 256-token prompt
// queued, a budget of 4 tokens a step. Before turns, the prompt got nothing in
// 300 steps. Now everyone is served within ceil(9 / 4) = 3 steps.
TEST(Scheduler, APromptIsNotStarvedByGeneratingConversations) {
  std::vector<PlanCandidate> live, cands;
  std::vector<PlanEntry> out;
  for (std::uint32_t i = 0; i < 8; ++i) {
    live.push_back({.index = i, .queued = 1, .room = 4096, .generating = true});
  }
  live.push_back({.index = 8, .queued = 256, .room = 4096});
  std::vector<std::uint64_t> last(9, 0);
  std::uint64_t prompt_tokens = 0, worst = 0;
  for (std::uint64_t step = 1; step <= 300; ++step) {
    cands = live;
    plan_batch(cands, {.budget = 4, .free_cells = 100000, .max_chunk = 0, .step = step}, out);
    ASSERT_EQ(total_of(out), 4u);
    for (const auto &e : out) {
      auto &c = live[e.index];
      c.waiting_since = step;
      worst = std::max(worst, step - last[e.index]);
      last[e.index] = step;
      if (e.index == 8) {
        prompt_tokens += e.n_tokens;
        c.queued -= e.n_tokens;
      }
    }
  }
  EXPECT_LE(worst, 3u);
  EXPECT_GE(prompt_tokens, 300u / 3) << "the prompt is decoded a token per turn";
}

// Liveness with arrivals and departures: N generating and M prompting
// conversations, random arrivals (waiting from the step they arrive, as
// prompt() sets it), generations that end, prompts that turn into
// generations, any budget 1..64, equal priorities. A candidate that starts
// waiting at step s, when R candidates are alive, is served by step
// s + ceil(R / T): those ranked ahead of it only shrink, T a step.
TEST(Scheduler, EveryCandidateIsServedWithinTheBound) {
  struct Sim {
    PlanCandidate c;
    std::uint64_t bound_step = 0;  // must be served by then
  };
  std::vector<PlanCandidate> cands;
  std::vector<PlanEntry> out;
  for (unsigned seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    const std::uint32_t budget = uniform(rng, 0, 3) == 0 ? 1 : uniform(rng, 1, 64);
    const std::uint32_t max_chunk = uniform(rng, 0, 1) == 0 ? 0 : uniform(rng, 1, 32);
    std::vector<Sim> live;
    std::uint32_t next_id = 0;
    auto arrive = [&](std::uint64_t step, bool generating) {
      live.push_back({.c = {.index = next_id++, .queued = generating ? 1 : uniform(rng, 1, 300), .room = 100000,
                            .waiting_since = step, .generating = generating}});
    };
    const std::uint32_t n0 = uniform(rng, 1, 40);
    for (std::uint32_t i = 0; i < n0; ++i) arrive(0, uniform(rng, 0, 1) == 0);
    auto set_bounds = [&](std::uint64_t step) {
      const auto r = static_cast<std::uint64_t>(live.size());
      for (auto &s : live) {
        if (s.c.waiting_since == step && s.bound_step == 0) s.bound_step = step + (r + budget - 1) / budget;
      }
    };
    set_bounds(0);
    std::uint64_t served = 0;
    for (std::uint64_t step = 1; step <= 400; ++step) {
      cands.clear();
      for (const auto &s : live) cands.push_back(s.c);
      plan_batch(cands, {.budget = budget, .free_cells = 1000000, .max_chunk = max_chunk, .step = step}, out);
      const auto got = by_index(out);
      for (auto it = live.begin(); it != live.end();) {
        auto &s = *it;
        const auto g = got.find(s.c.index);
        if (g == got.end()) {
          ASSERT_LT(step, s.bound_step) << "seed " << seed << " budget " << budget << ": conversation "
                                        << s.c.index << " waiting since " << s.c.waiting_since << " not served";
          ++it;
          continue;
        }
        ++served;
        s.c.waiting_since = step;
        s.bound_step = 0;
        if (!s.c.generating) {
          s.c.queued -= g->second;
          if (s.c.queued == 0) s.c = {.index = s.c.index, .queued = 1, .room = 100000, .waiting_since = step,
                                      .generating = true};  // its reply starts
        } else if (uniform(rng, 0, 19) == 0) {
          it = live.erase(it);  // the reply ended
          continue;
        }
        ++it;
      }
      const std::uint32_t arrivals = uniform(rng, 0, 3) == 0 ? uniform(rng, 1, 3) : 0;
      for (std::uint32_t a = 0; a < arrivals && live.size() < 120; ++a) arrive(step, uniform(rng, 0, 2) == 0);
      set_bounds(step);
    }
    EXPECT_GE(served, 400u) << "seed " << seed << ": someone is served every step";
  }
}

TEST(Scheduler, FairShare) {
  std::vector<PlanEntry> out;
  for (unsigned seed = 1; seed <= 1000; ++seed) {
    std::mt19937 rng(seed);
    const std::uint32_t budget = uniform(rng, 1, 512);
    const std::uint32_t n = uniform(rng, 1, 600);
    std::vector<PlanCandidate> cands;
    for (std::uint32_t i = 0; i < n; ++i) cands.push_back({.index = i, .queued = 100000, .room = 100000});
    plan_batch(cands, {.budget = budget, .free_cells = 100000, .max_chunk = 0, .step = 1}, out);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " n " << n << " budget " << budget);

    ASSERT_EQ(total_of(out), budget);
    if (n > budget) {
      // Not enough for everyone: one token each to `budget` of them.
      ASSERT_EQ(out.size(), budget);
      for (const auto &e : out) ASSERT_EQ(e.n_tokens, 1u);
    } else {
      ASSERT_EQ(out.size(), n);
      for (const auto &e : out) {
        ASSERT_GE(e.n_tokens, budget / n);
        ASSERT_LE(e.n_tokens, budget / n + 1);
      }
    }
  }
}

TEST(Scheduler, HigherPriorityFirstWhenBudgetIsTight) {
  std::vector<PlanEntry> out;
  for (unsigned seed = 1; seed <= 500; ++seed) {
    std::mt19937 rng(seed);
    const std::uint32_t n = uniform(rng, 2, 200);
    const std::uint64_t served = uniform(rng, 0, 100);
    std::vector<PlanCandidate> cands;
    for (std::uint32_t i = 0; i < n; ++i) {
      cands.push_back({.index = i, .queued = uniform(rng, 1, 500), .room = 1000,
                       .priority = static_cast<int>(uniform(rng, 0, 6)) - 3, .waiting_since = served});
    }
    const auto original = cands;
    const PlanLimits limits{.budget = uniform(rng, 1, n - 1), .free_cells = 1000, .max_chunk = 0,
                            .step = served + uniform(rng, 0, 100)};
    plan_batch(cands, limits, out);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " n " << n << " budget " << limits.budget);

    // More candidates than tokens: one each, so who got one is decided by priority alone.
    ASSERT_EQ(out.size(), limits.budget);
    const auto got = by_index(out);
    int lowest_served = 100, highest_left = -100;
    for (const auto &c : original) {
      if (got.count(c.index)) {
        lowest_served = std::min(lowest_served, c.priority);
      } else {
        highest_left = std::max(highest_left, c.priority);
      }
    }
    EXPECT_GE(lowest_served, highest_left);
  }
}

// One huge prompt and short ones arriving at random steps, budget 64. Every
// eligible prompt gets floor(64 / E) tokens per step while E <= 64 prompts are
// eligible (fair share), so a short prompt of length L alive while at most
// E_max prompts were eligible finishes within ceil(L / floor(64 / E_max)) steps,
// counting its arrival step.
TEST(Scheduler, ShortPromptsAreNotStarvedByALongOne) {
  constexpr std::uint32_t kBudget = 64;
  struct Sim {
    PlanCandidate c;
    std::uint64_t arrived = 0;
    std::uint32_t len = 0;
    std::uint32_t max_eligible = 0;
  };
  std::vector<PlanCandidate> cands;
  std::vector<PlanEntry> out;
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::vector<Sim> live;
    live.push_back({.c = {.index = 0, .queued = 100000, .room = 200000}, .len = 100000});
    std::uint32_t next_id = 1, completed = 0, worst_slack = UINT32_MAX;
    std::uint64_t long_served = 0;
    // 1500 steps of at most 64 tokens cannot finish the long prompt.
    for (std::uint64_t step = 1; step <= 1500; ++step) {
      // Bursts of 0-3 arrivals; new conversations start with last_served = 0, as in the executor.
      const std::uint32_t arrivals = uniform(rng, 0, 5) == 0 ? uniform(rng, 1, 3) : 0;
      for (std::uint32_t a = 0; a < arrivals; ++a) {
        const std::uint32_t len = uniform(rng, 5, 50);
        live.push_back({.c = {.index = next_id++, .queued = len, .room = 4096,
                              .priority = static_cast<int>(uniform(rng, 0, 6)) - 3},
                        .arrived = step, .len = len});
      }
      const auto eligible = static_cast<std::uint32_t>(live.size());
      ASSERT_LE(eligible, kBudget) << "the scenario must stay in the fair-share regime";
      cands.clear();
      for (auto &s : live) {
        s.max_eligible = std::max(s.max_eligible, eligible);
        cands.push_back(s.c);
      }
      plan_batch(cands, {.budget = kBudget, .free_cells = 100000, .max_chunk = 0, .step = step}, out);
      ASSERT_EQ(total_of(out), kBudget);
      const auto got = by_index(out);
      for (auto it = live.begin(); it != live.end();) {
        auto &s = *it;
        const auto g = got.find(s.c.index);
        if (g != got.end()) {
          s.c.queued -= g->second;
          s.c.waiting_since = step;
          if (s.c.index == 0) ++long_served;
        }
        if (s.c.queued > 0) {
          ++it;
          continue;
        }
        const std::uint32_t share = kBudget / s.max_eligible;
        const std::uint64_t bound = (s.len + share - 1) / share;
        const std::uint64_t took = step - s.arrived + 1;
        ASSERT_LE(took, bound) << "prompt " << s.c.index << " of " << s.len << " tokens, arrived at step "
                               << s.arrived << ", with up to " << s.max_eligible << " eligible";
        worst_slack = std::min(worst_slack, static_cast<std::uint32_t>(bound - took));
        ++completed;
        it = live.erase(it);
      }
    }
    EXPECT_GT(completed, 200u) << "seed " << seed;
    EXPECT_EQ(long_served, 1500u) << "the long prompt progresses every step too";
    EXPECT_EQ(worst_slack, 0u) << "seed " << seed << ": the bound is tight in some case";
  }
}

// Aging: a priority -3 prompt among many priority 3 ones that keep arriving, with
// more candidates than budget so only b of them are served per step.
//
// Bound: let X be last served at s0. A prompt Y with priority <= 3 and last_served
// > s0 + 55 has effective priority <= 3 + floor((step - s0 - 56) / 8) = X's - 1,
// so it ranks below X. With more eligible prompts than b, each step X is not
// served serves b prompts ranked above it, every one of which then has
// last_served > s0 + 55 and stays below X. From step s0 + 56 on, that pool shrinks
// by b per step and grows by at most r arrivals (new ones have last_served 0), so
// X is served again within 56 + ceil(N / (b - r)) steps, N the most other
// conversations alive at once.
