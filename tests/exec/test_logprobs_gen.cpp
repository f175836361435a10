// GenerateParams::logprobs: every entry is the log-softmax of the logits the
// token was sampled from (the conversation's own logits(), read before the
// draw; computed here in long double), its top list the most likely tokens
// in order, with a logit bias and a temperature that do not change them;
// entries line up with the tokens and reach on_logprob before on_token; a
// save mid-generation (state version 9) loads with the entries and goes on
// recording; bad settings are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "common.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"

namespace {

using weft::Token;
using weft_test::random_tokens;
using weft_test::run_until_idle;

weft::ExecutorParams params() { return {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 4, .n_threads = 2}; }

// Float rounding of the one subtraction that makes each value (|logprob|
// is tens at most: an ulp is ~2e-6); the sums are wider than float here.
constexpr double kTol = 1e-5;

struct Expected {
  std::vector<double> logprob;  // per token
  std::vector<Token> order;     // most likely first, ties by lower id
};

Expected log_softmax(const std::vector<float> &l) {
  const float mx = *std::max_element(l.begin(), l.end());
  long double sum = 0;
  for (float v : l) sum += std::exp(static_cast<long double>(v) - mx);
  const long double lse = mx + std::log(sum);
  Expected e;
  for (float v : l) e.logprob.push_back(static_cast<double>(v - lse));
  e.order.resize(l.size());
  std::iota(e.order.begin(), e.order.end(), 0);
  std::stable_sort(e.order.begin(), e.order.end(),
                   [&](Token a, Token b) { return l[static_cast<std::size_t>(a)] > l[static_cast<std::size_t>(b)]; });
  return e;
}

void expect_entry(const weft::TokenLogprob &got, Token token, const std::vector<float> &logits, std::uint32_t top,
                  const std::string &where) {
  const Expected e = log_softmax(logits);
  EXPECT_EQ(got.token, token) << where;
  EXPECT_NEAR(got.logprob, e.logprob[static_cast<std::size_t>(token)], kTol) << where;
  ASSERT_EQ(got.top.size(), top) << where;
  for (std::uint32_t k = 0; k < top; ++k) {
    EXPECT_EQ(got.top[k].token, e.order[k]) << where << " top " << k;
    EXPECT_NEAR(got.top[k].logprob, e.logprob[static_cast<std::size_t>(e.order[k])], kTol) << where << " top " << k;
  }
}

}  // namespace

// Three conversations step together; each token is generated alone
// (max_tokens 1) so the logits it came from are the ones read just before.
TEST(LogprobsGeneration, EachEntryIsTheLogSoftmaxOfTheLogitsItWasSampledFrom) {
  const auto &m = weft_test::tiny();
  int biased_away = 0;
  for (unsigned seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(m, params());
    std::vector<weft::Conversation> convs;
    for (int i = 0; i < 3; ++i) {
      convs.push_back(ex.create());
      convs.back().prompt(random_tokens(rng, m, 5 + static_cast<int>(rng() % 20), true));
    }
    run_until_idle(ex);
    for (int step = 0; step < 8; ++step) {
      std::vector<std::vector<float>> before;
      std::vector<weft::Generation> gens;
      std::vector<std::uint32_t> tops;
      for (std::size_t i = 0; i < convs.size(); ++i) {
        ASSERT_TRUE(convs[i].has_logits());
        before.push_back(convs[i].logits());
        const auto top = static_cast<Token>(std::max_element(before[i].begin(), before[i].end()) - before[i].begin());
        // Conversation 0 greedy; 1 at a temperature; 2 with the model's
        // favourite banned: none of it shows in the logprobs.
        weft::SamplerParams sp;
        if (i == 1) sp = {.temperature = 1.2f, .seed = seed * 100 + static_cast<unsigned>(step)};
        if (i == 2) sp = {.logit_bias = {{top, -INFINITY}}};
        tops.push_back(static_cast<std::uint32_t>(rng() % 21));
        gens.push_back(convs[i].generate({.max_tokens = 1, .sampler = sp, .logprobs = true, .top_logprobs = tops[i]}));
      }
      run_until_idle(ex);
      for (std::size_t i = 0; i < convs.size(); ++i) {
        const auto r = gens[i].result();
        ASSERT_EQ(r.tokens.size(), 1u);
        ASSERT_EQ(r.logprobs.size(), 1u);
        const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step) + " conv " +
                                  std::to_string(i);
        expect_entry(r.logprobs[0], r.tokens[0], before[i], tops[i], where);
        if (i == 0) {
          EXPECT_EQ(r.tokens[0], log_softmax(before[i]).order[0]) << where << ": greedy takes the top";
        }
        if (i == 2) biased_away += r.tokens[0] != log_softmax(before[i]).order[0];
      }
    }
  }
  EXPECT_EQ(biased_away, 4 * 8) << "the banned favourite is never sampled, yet its logprob is the model's";
}

// A longer generation beside another: one entry per token, in order, each
// handed to on_logprob before on_token sees the token.
TEST(LogprobsGeneration, EntriesLineUpWithTokensAndCallbacks) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(11);
  weft::Executor ex(m, params());
  auto a = ex.create(), b = ex.create();
  a.prompt(random_tokens(rng, m, 12, true));
  b.prompt(random_tokens(rng, m, 30, true));
  std::vector<std::pair<char, Token>> calls;
  weft::GenerateParams gp{.max_tokens = 20, .sampler = weft::SamplerParams{.temperature = 0.9f, .seed = 3},
                          .logprobs = true, .top_logprobs = 4};
  gp.on_token = [&](Token t, std::string_view) { calls.push_back({'t', t}); };
  gp.on_logprob = [&](const weft::TokenLogprob &e) { calls.push_back({'l', e.token}); };
  auto ga = a.generate(gp);
  auto gb = b.generate({.max_tokens = 20});
  run_until_idle(ex);
  const auto r = ga.result();
  ASSERT_FALSE(r.tokens.empty());
  ASSERT_EQ(r.logprobs.size(), r.tokens.size());
  ASSERT_EQ(calls.size(), 2 * r.tokens.size());
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    EXPECT_EQ(r.logprobs[i].token, r.tokens[i]);
    EXPECT_EQ(calls[2 * i], std::make_pair('l', r.tokens[i])) << i;
    EXPECT_EQ(calls[2 * i + 1], std::make_pair('t', r.tokens[i])) << i;
    ASSERT_EQ(r.logprobs[i].top.size(), 4u);
    for (std::size_t k = 1; k < 4; ++k) EXPECT_GE(r.logprobs[i].top[k - 1].logprob, r.logprobs[i].top[k].logprob);
    EXPECT_LE(r.logprobs[i].logprob, r.logprobs[i].top[0].logprob);
  }
  EXPECT_TRUE(gb.result().logprobs.empty()) << "only when asked";
}

// Saved mid-generation (version 9): the loaded generation holds the entries
// so far and records the rest as the unsaved original does.
TEST(LogprobsGeneration, SaveAndLoadMidGenerationKeepTheEntries) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 3; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor a(m, params());
    auto c = a.create();
    c.prompt(random_tokens(rng, m, 8, true));
    auto g = c.generate({.max_tokens = 16, .sampler = weft::SamplerParams{.temperature = 1.0f, .seed = seed},
                         .logprobs = true, .top_logprobs = 2});
    for (int i = 0; i < 5; ++i) a.step();
    ASSERT_FALSE(g.done());
    const auto so_far = g.result().logprobs;
    ASSERT_FALSE(so_far.empty());
    const auto saved = c.save();
    ASSERT_GT(saved.size(), 12u);
    EXPECT_EQ(saved[8], 9) << "a generation recording logprobs is state version 9 (docs/STATE_FORMAT.md)";
    weft::Executor b(m, params());
    auto loaded = b.load(saved);
    const auto lg = loaded.generation();
    ASSERT_TRUE(lg.has_value());
    const auto at_load = lg->result().logprobs;
    ASSERT_EQ(at_load.size(), so_far.size());
    for (std::size_t i = 0; i < so_far.size(); ++i) {
      EXPECT_EQ(at_load[i].token, so_far[i].token);
      EXPECT_EQ(at_load[i].logprob, so_far[i].logprob);
      ASSERT_EQ(at_load[i].top.size(), 2u);
    }
    run_until_idle(a);
    run_until_idle(b);
    const auto ra = g.result(), rb = lg->result();
    EXPECT_EQ(rb.tokens, ra.tokens) << "seed " << seed;
    ASSERT_EQ(rb.logprobs.size(), ra.logprobs.size());
    for (std::size_t i = 0; i < ra.logprobs.size(); ++i) {
      EXPECT_EQ(rb.logprobs[i].token, ra.logprobs[i].token);
      EXPECT_EQ(rb.logprobs[i].logprob, ra.logprobs[i].logprob) << "seed " << seed << " token " << i;
    }
  }
}

TEST(LogprobsGeneration, BadSettingsAreRefused) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt(std::vector<Token>{1, 2, 3});
  EXPECT_TRUE(weft_test::throws_weft([&] { (void)c.generate({.logprobs = true, .top_logprobs = 21}); },
                                     weft::Errc::out_of_range, "GenerateParams.top_logprobs = 21 is over the limit of 20"));
  EXPECT_TRUE(weft_test::throws_weft([&] { (void)c.generate({.top_logprobs = 3}); }, weft::Errc::invalid_argument,
                                     "GenerateParams.top_logprobs needs GenerateParams.logprobs = true"));
  weft::GenerateParams gp;
  gp.on_logprob = [](const weft::TokenLogprob &) {};
  EXPECT_TRUE(weft_test::throws_weft([&] { (void)c.generate(gp); }, weft::Errc::invalid_argument,
                                     "GenerateParams.on_logprob needs GenerateParams.logprobs = true"));
  EXPECT_FALSE(c.generation().has_value());
}
