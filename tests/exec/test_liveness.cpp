// Liveness on a real llama.cpp context: under any budget, every runnable
// conversation gets tokens within the documented bound, and no call hangs.
// Regression tests for the defects of issue 12 (starvation, step() from a
// callback, slots that can never free, a waiting prompt that stalled others).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "common.hpp"
#include "exec/test_access.hpp"
#include "reference.hpp"

using weft::Errc;
using weft_test::random_tokens;
using weft_test::throws_weft;

namespace {

using Clock = std::chrono::steady_clock;

struct Tracked {
  weft::Conversation conv;
  weft::Generation gen;
  bool talker = false;        // generates for ever (re-generates when done)
  std::uint32_t waited = 0;   // steps runnable without a token decoded
};

// `n` conversations, each prompted with `prompt_len` tokens and generating
// for good (1000 tokens), appended to convs and gens.
void add_talkers(weft::Executor &ex, std::mt19937 &rng, int n, int prompt_len, std::vector<weft::Conversation> &convs,
                 std::vector<weft::Generation> &gens) {
  for (int i = 0; i < n; ++i) {
    convs.push_back(ex.create());
    convs.back().prompt(random_tokens(rng, ex.model(), prompt_len, true));
    gens.push_back(convs.back().generate({.max_tokens = 1000}));
  }
}

std::uint32_t uniform(std::mt19937 &rng, std::uint32_t lo, std::uint32_t hi) {
  return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
}

}  // namespace

// Seeded random workloads: N talkers generating, prompts arriving at random
// with a short reply each, and every kind of budget — tokens 1..n_batch, a
// wall-clock budget from 1 us (below the one-token floor) up, deadlines with
// small micro-batches. Slots and cells are ample, priorities equal, so the
// scheduler's bound applies: a runnable conversation is served within
// ceil(R / T) steps (R runnable conversations, T the token budget; T is at
// least 1 under a time budget and a deadline always lets the first
// micro-batch through). And a step with runnable work always decodes.
TEST(Liveness, EveryRunnableConversationProgressesWithinTheBound) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    const unsigned kind = seed % 4;  // 0 tokens fixed, 1 tokens random, 2 time, 3 time + deadline
    const std::uint32_t n_ubatch = kind == 3 ? uniform(rng, 1, 8) : 0;
    weft::Executor ex(m, {.n_ctx = 8192, .n_batch = 64, .n_ubatch = n_ubatch, .n_seq_max = 64, .n_threads = 1});
    const std::uint32_t fixed_tokens = kind == 0 ? uniform(rng, 1, 12) : 0;
    const auto time_us = uniform(rng, 1, 3000);
    std::vector<Tracked> live;
    const std::uint32_t talkers = uniform(rng, 1, 10);
    for (std::uint32_t i = 0; i < talkers; ++i) {
      auto c = ex.create();
      c.prompt(random_tokens(rng, m, static_cast<int>(uniform(rng, 1, 20)), true));
      auto g = c.generate({.max_tokens = 400});
      live.push_back({std::move(c), std::move(g), true});
    }
    std::uint32_t max_runnable = 0, min_budget = fixed_tokens != 0 ? fixed_tokens : 64;
    std::uint64_t decoded_total = 0;
    for (int step = 0; step < 150; ++step) {
      if (uniform(rng, 0, 9) == 0 && live.size() < 40) {
        auto c = ex.create();
        c.prompt(random_tokens(rng, m, static_cast<int>(uniform(rng, 1, 120)), true));
        auto g = c.generate({.max_tokens = uniform(rng, 1, 8)});
        live.push_back({std::move(c), std::move(g), false});
      }
      std::vector<std::uint32_t> before;
      std::uint32_t runnable = 0;
      for (auto &t : live) {
        before.push_back(t.conv.n_decoded());
        runnable += t.conv.n_queued() > 0 ? 1u : 0u;
      }
      max_runnable = std::max(max_runnable, runnable);
      weft::StepBudget b;
      if (kind == 0) b.max_tokens = fixed_tokens;
      if (kind == 1) {
        b.max_tokens = uniform(rng, 1, 64);
        min_budget = std::min(min_budget, *b.max_tokens);
      }
      if (kind >= 2) {
        b.max_time = std::chrono::microseconds(time_us);
        min_budget = 1;
      }
      if (kind == 3) b.deadline = Clock::now() + std::max<Clock::duration>(*b.max_time * 3 / 2, std::chrono::milliseconds(5));
      const auto r = ex.step(b);
      decoded_total += r.tokens_decoded;
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " kind " << kind << " step " << step);
      if (runnable > 0) {
        ASSERT_GT(r.tokens_decoded, 0u) << runnable << " runnable, nothing decoded";
        ASSERT_FALSE(r.idle);
      }
      const std::uint32_t bound = (max_runnable + min_budget - 1) / min_budget;
      for (std::size_t i = 0; i < before.size(); ++i) {
        auto &t = live[i];
        if (t.conv.n_decoded() > before[i]) {
          t.waited = 0;
        } else if (t.conv.n_queued() > 0) {
          ++t.waited;
          ASSERT_LE(t.waited, bound) << "conversation " << t.conv.id() << " waited " << t.waited
                                     << " steps; runnable up to " << max_runnable << ", budget >= " << min_budget;
        }
      }
      for (auto &t : live) {
        if (t.talker && t.gen.done()) t.gen = t.conv.generate({.max_tokens = 400});
      }
      std::erase_if(live, [](Tracked &t) { return !t.talker && t.gen.done() && t.conv.n_queued() == 0; });
    }
    EXPECT_GT(decoded_total, 150u) << "seed " << seed;
  }
}

// The first case on the real executor: eight conversations
// generating and a 256-token prompt, step({.max_tokens = 4}) 300 times. It
// used to decode none of the prompt; now all nine take turns, one token each
// at least every ceil(9 / 4) = 3 steps.
TEST(Liveness, APromptProgressesBesideGeneratingConversations) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(3);
  weft::Executor ex(m, {.n_ctx = 8192, .n_batch = 64, .n_seq_max = 16, .n_threads = 1});
  std::vector<weft::Conversation> talkers;
  std::vector<weft::Generation> gens;
  add_talkers(ex, rng, 8, 8, talkers, gens);
  ex.step();  // their 64 prompt tokens: everyone has a sampled token queued
  auto prompt = ex.create();
  prompt.prompt(random_tokens(rng, m, 256, true));
  for (int step = 0; step < 300; ++step) ex.step({.max_tokens = 4});
  EXPECT_GE(prompt.n_decoded(), 100u);
  for (auto &t : talkers) EXPECT_GE(t.n_decoded(), 8u + 100u);
}

// A wall-clock budget below what one token takes: every step decodes one
// token, and the conversations take turns (the npc-model case where eight
// generating ones got nothing while an arriving prompt took every step).
TEST(Liveness, ABudgetBelowTheFloorServesEveryoneInTurn) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(4);
  weft::Executor ex(m, {.n_ctx = 8192, .n_batch = 64, .n_seq_max = 16, .n_threads = 1});
  std::vector<weft::Conversation> convs;
  std::vector<weft::Generation> gens;
  add_talkers(ex, rng, 8, 4, convs, gens);
  convs.push_back(ex.create());
  convs.back().prompt(random_tokens(rng, m, 200, true));
  std::vector<int> last(convs.size(), 0);
  int worst = 0;
  for (int step = 1; step <= 270; ++step) {
    std::vector<std::uint32_t> before;
    for (auto &c : convs) before.push_back(c.n_decoded());
    const auto r = ex.step({.max_time = std::chrono::microseconds(1)});
    ASSERT_EQ(r.tokens_decoded, 1u) << "step " << step;
    for (std::size_t i = 0; i < convs.size(); ++i) {
      if (convs[i].n_decoded() == before[i]) continue;
      worst = std::max(worst, step - last[i]);
      last[i] = step;
    }
  }
  EXPECT_LE(worst, 9) << "nine runnable conversations, one token a step";
  // 270 tokens over nine: the talkers' own 4-token prompts went one a step too.
  for (auto &c : convs) EXPECT_GE(c.n_decoded(), 270u / 9 - 1);
}

// step() from inside on_token (on the stepping thread) used to deadlock on
// the step mutex; it is refused with a typed error and the step goes on.
TEST(Liveness, StepFromACallbackIsRefusedNotAHang) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(5);
  weft::Executor ex(m, {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 4, .n_threads = 1});
  auto c = ex.create();
  c.prompt(random_tokens(rng, m, 8, true));
  int refused = 0, calls = 0;
  auto g = c.generate({.max_tokens = 3, .on_token = [&](weft::Token, std::string_view) {
                         ++calls;
                         if (throws_weft([&] { ex.step(); }, Errc::invalid_argument, "callback")) ++refused;
                       }});
  for (int i = 0; i < 20 && !g.done(); ++i) ex.step();
  EXPECT_TRUE(g.done());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(refused, 3);
  EXPECT_EQ(g.reason(), weft::FinishReason::max_tokens);
}

namespace {
weft::ExecutorParams no_spill(std::uint32_t n_ctx, std::uint32_t n_seq_max) {
  return {.n_ctx = n_ctx, .n_batch = 64, .n_seq_max = n_seq_max, .n_threads = 1,
          .spill = {.ram_bytes = 0, .recompute = false}};
}
}  // namespace

// n_seq_max = 2 with spill off: a fork that could never get a slot used to
// be put in the recompute tier (which was off) and never decoded, and
// step() spun with idle = false. Now fork() and prompt() refuse it.
TEST(Liveness, NoSlotAndNoSpillIsAnErrorNotAnEndlessWait) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(6);
  weft::Executor ex(m, no_spill(1024, 2));
  auto a = ex.create();
  a.prompt(random_tokens(rng, m, 10, true));
  EXPECT_GE(weft_test::run_until_idle(ex), 0);
  auto f1 = a.fork();  // the second slot
  EXPECT_TRUE(throws_weft([&] { (void)a.fork(); }, Errc::out_of_range, "n_seq_max = 2"));
  f1.prompt(random_tokens(rng, m, 5));
  EXPECT_GE(weft_test::run_until_idle(ex), 0);
  EXPECT_EQ(f1.n_decoded(), 15u);

  // Plain conversations: the third to prompt finds both slots held.
  weft::Executor ex2(m, no_spill(1024, 2));
  auto p1 = ex2.create(), p2 = ex2.create(), p3 = ex2.create();
  p1.prompt(random_tokens(rng, m, 5, true));
  p2.prompt(random_tokens(rng, m, 5, true));
  EXPECT_TRUE(throws_weft([&] { p3.prompt(random_tokens(rng, m, 5, true)); }, Errc::out_of_range, "slots"));
  EXPECT_EQ(p3.n_queued(), 0u) << "a refused prompt queues nothing";
  EXPECT_GE(weft_test::run_until_idle(ex2), 0);
  EXPECT_EQ(p1.n_decoded() + p2.n_decoded(), 10u);
  p1.dispose();  // a slot comes free
  p3.prompt(random_tokens(rng, m, 5, true));
  EXPECT_GE(weft_test::run_until_idle(ex2), 0);
  EXPECT_EQ(p3.n_decoded(), 5u);
}

// PressurePolicy::wait with spill off: a prompt bigger than the free cells
// used to take the last of them and wait, stalling every generation until
// it was disposed. It now waits whole; the others go on, and once room
// comes free it runs.
TEST(Liveness, AWaitingPromptDoesNotStallOthers) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(7);
  weft::Executor ex(m, no_spill(512, 4));
  const auto n_ctx = ex.stats().n_ctx;
  auto filler = ex.create();
  filler.prompt(random_tokens(rng, m, static_cast<int>(n_ctx) - 150, true));
  EXPECT_GE(weft_test::run_until_idle(ex), 0);
  std::vector<weft::Conversation> talkers;
  std::vector<weft::Generation> gens;
  for (int i = 0; i < 2; ++i) {
    talkers.push_back(ex.create());
    talkers.back().prompt(random_tokens(rng, m, 8, true));
    gens.push_back(talkers.back().generate({.max_tokens = 40}));
  }
  ex.step();  // the talkers' prompts: 134 cells stay free
  auto big = ex.create();
  const auto x = random_tokens(rng, m, 140, true);  // fits the context, not the free cells
  big.prompt(x);
  int steps = 0;
  while (!(gens[0].done() && gens[1].done()) && steps < 200) {
    const auto r = ex.step();
    ++steps;
    if (!gens[0].done() || !gens[1].done()) {
      ASSERT_GT(r.tokens_decoded, 0u) << "step " << steps << ": the generations stalled";
    }
  }
  EXPECT_EQ(gens[0].reason(), weft::FinishReason::max_tokens);
  EXPECT_EQ(gens[1].reason(), weft::FinishReason::max_tokens);
  EXPECT_EQ(big.n_decoded(), 0u) << "it waited whole";
  weft::StepResult r;
  for (int i = 0; i < 5 && !r.idle; ++i) r = ex.step();  // the last sampled tokens
  EXPECT_EQ(r.blocked, 1u);
  EXPECT_TRUE(r.idle) << "nothing can change until the caller frees room";
  filler.dispose();
  EXPECT_GE(weft_test::run_until_idle(ex), 0);
  EXPECT_EQ(big.tokens(), x);
  EXPECT_EQ(big.n_queued(), 0u);
}

// More conversations than slots (spilled to RAM): slots are time-sliced, so
// everyone still progresses. A conversation that waits for a slot may park a
// busy one after kAgingSteps (8) steps; it then ranks first, having waited
// longest. Bound: 8 steps for the slot, plus ceil(W / n_seq_max) steps when W
// others wait for slots ahead of it, plus ceil(R / T) for its turn.
TEST(Liveness, ConversationsBeyondTheSlotsTakeTurnsToo) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    const std::uint32_t slots = 2 + seed % 3, n = slots * 3, budget = uniform(rng, 1, 6);
    weft::Executor ex(m, {.n_ctx = 4096, .n_batch = 64, .n_seq_max = slots, .n_threads = 1});
    std::vector<weft::Conversation> convs;
    std::vector<weft::Generation> gens;
    for (std::uint32_t i = 0; i < n; ++i) {
      convs.push_back(ex.create());
      convs.back().prompt(random_tokens(rng, m, 4, true));
      gens.push_back(convs.back().generate({.max_tokens = 1000}));
    }
    const std::uint32_t bound = 8 + (n + slots - 1) / slots + (n + budget - 1) / budget;
    std::vector<std::uint32_t> waited(n, 0);
    std::uint32_t worst = 0;
    for (int step = 0; step < 200; ++step) {
      std::vector<std::uint32_t> before;
      for (auto &c : convs) before.push_back(c.n_decoded());
      ex.step({.max_tokens = budget});
      for (std::uint32_t i = 0; i < n; ++i) {
        waited[i] = convs[i].n_decoded() > before[i] ? 0 : waited[i] + 1;
        worst = std::max(worst, waited[i]);
      }
    }
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " slots " << slots << " budget " << budget);
    EXPECT_LE(worst, bound);
    EXPECT_GT(ex.stats().parks, 0u) << "the slots were time-sliced";
  }
}

// Generations that together outgrow the cache: cells are time-sliced like
// slots. Before, each waited for a cell the others held, all at once, for
// ever (found running `weft serve` with three long replies in a small
// context). Each finishes, and its logits are those of a fresh decode.
TEST(Liveness, GenerationsThatOutgrowTheCellsTakeTurns) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(7);
  weft::Executor ex(m, {.n_ctx = 256, .n_batch = 64, .n_seq_max = 4, .n_threads = 1});
  const std::uint32_t n_ctx = ex.stats().n_ctx, n = 3, prompt = 16, out = 120;
  ASSERT_GT(n * (prompt + out), n_ctx) << "together they do not fit";
  std::vector<weft::Conversation> convs;
  std::vector<weft::Generation> gens;
  for (std::uint32_t i = 0; i < n; ++i) {
    convs.push_back(ex.create());
    convs.back().prompt(random_tokens(rng, m, static_cast<int>(prompt), true));
    gens.push_back(convs.back().generate({.max_tokens = out, .sampler = weft::SamplerParams{.temperature = 0}}));
  }
  std::uint32_t idle_steps = 0;
  for (int step = 0; step < 20000 && idle_steps < 50; ++step) {
    const auto r = ex.step();
    idle_steps = r.tokens_decoded == 0 && r.tokens_sampled == 0 ? idle_steps + 1 : 0;
    if (std::all_of(gens.begin(), gens.end(), [](auto &g) { return g.done(); })) break;
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    ASSERT_TRUE(gens[i].done()) << "generation " << i << " stalled at " << gens[i].n_tokens() << " tokens";
    const auto reason = gens[i].reason();
    EXPECT_TRUE(reason == weft::FinishReason::max_tokens || reason == weft::FinishReason::end_of_generation)
        << weft::finish_reason_name(reason);
  }
  EXPECT_GT(ex.stats().parks, 0u) << "the cells were time-sliced";
  for (auto &c : convs) {
    c.prompt(random_tokens(rng, m, 1));
    while (!ex.step().idle) {
    }
    ASSERT_TRUE(c.has_logits());
    EXPECT_LT(weft_test::nmse(c.logits(), weft_test::reference_logits(m, c.tokens())), weft_test::logits_tolerance(m));
  }
}

// With flash attention a time budget is fitted at the mean position of the
// tokens it plans. An arriving 256-token prompt must not price the
// generating conversations' tokens as if all its tokens came along (on
// `small`, 60 ms frames: the estimate read 127 while the steps ran at 37,
// one token was priced at 6x what it took, and eight NPCs got a token every
// eighth frame). The cost model is planted with a steep depth term, so the
// plan's depth decides how many tokens fit.
TEST(Liveness, ATimeBudgetIsFittedAtThePlannedTokensDepth) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    weft::Executor ex(m, {.n_ctx = 4096, .n_batch = 512, .n_seq_max = 8, .n_threads = 1,
                          .flash_attn = weft::FlashAttention::enabled});
    std::vector<weft::Conversation> talkers;
    std::vector<weft::Generation> gens;
    const int depth = static_cast<int>(uniform(rng, 24, 40));
    add_talkers(ex, rng, 4, depth, talkers, gens);
    ex.step();  // their prompts: each has a sampled token queued at `depth`
    auto arrival = ex.create();
    arrival.prompt(random_tokens(rng, m, 256, true));

    // seconds = 1 ms + n * (5 ms + 300 ms * depth / 1024), every small size
    // seen at two depths, so the line and the table agree.
    auto &cost = weft::detail::TestAccess::core(ex).cost;
    cost = weft::detail::CostModel();
    for (int k = 0; k < 40; ++k) {
      for (std::uint32_t n = 1; n <= 16; ++n) {
        for (double d : {30.0, 130.0}) cost.observe(n, d, 1e-3 + n * (5e-3 + 0.3 * d / 1024));
      }
    }
    // At the talkers' depth 100 ms fits 6 tokens (1 + 13.8 n ms, times the
    // margin); at the mean position of everything queued (~125) only 2.
    const std::uint32_t at_talkers = cost.tokens_within(0.1, depth + 1.0, 512);
    ASSERT_GE(at_talkers, 5u);
    ASSERT_LE(cost.tokens_within(0.1, 125.0, 512), 2u);
    const auto r = ex.step({.max_time = std::chrono::milliseconds(100)});
    // Every talker's token and the arrival's turn; never more than fits.
    EXPECT_GE(r.tokens_decoded, 5u);
    EXPECT_LE(r.tokens_decoded, at_talkers + 2u);
    for (auto &t : talkers) EXPECT_EQ(t.n_decoded(), static_cast<std::uint32_t>(depth) + 1u);
    EXPECT_GE(arrival.n_decoded(), 1u);
  }
}
