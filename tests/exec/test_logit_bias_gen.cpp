// SamplerParams::logit_bias through a conversation: greedy sampling picks the
// argmax of the conversation's own logits() plus the bias at every step (the
// arithmetic here), logits() stay as the model gave them, a greedy generation
// follows the same tokens; a save mid-generation (state version 8) loads with
// the bias and continues as the unsaved original does; a token outside the
// vocabulary is refused when set.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "common.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"

namespace {

using weft::LogitBias;
using weft::Token;
using weft_test::random_tokens;
using weft_test::run_until_idle;

weft::ExecutorParams params() { return {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 4, .n_threads = 2}; }

Token biased_argmax(std::vector<float> l, const std::vector<LogitBias> &bias) {
  for (const auto &b : bias) {
    float &v = l[static_cast<std::size_t>(b.token)];
    v = b.bias == -INFINITY ? -INFINITY : v + b.bias;
  }
  return static_cast<Token>(std::max_element(l.begin(), l.end()) - l.begin());
}

std::vector<LogitBias> random_bias(std::mt19937 &rng, const weft::Model &m, std::size_t n) {
  std::uniform_int_distribution<Token> tok(0, m.n_vocab() - 1);
  std::normal_distribution<float> b(0.0f, 4.0f);
  std::vector<LogitBias> out;
  std::set<Token> seen;
  while (out.size() < n) {
    const Token t = tok(rng);
    if (seen.insert(t).second) out.push_back({t, rng() % 6 == 0 ? -INFINITY : b(rng)});
  }
  return out;
}

}  // namespace

TEST(LogitBiasGeneration, GreedyIsTheArgmaxOfTheLogitsPlusTheBias) {
  const auto &m = weft_test::tiny();
  constexpr int kSteps = 16;
  int changed = 0;
  for (unsigned seed = 1; seed <= 5; ++seed) {
    std::mt19937 rng(seed);
    const auto prompt = random_tokens(rng, m, 4 + static_cast<int>(rng() % 6), true);
    std::vector<LogitBias> bias;
    std::vector<Token> steps;
    {
      weft::Executor ex(m, params());
      auto c = ex.create();
      c.prompt(prompt);
      run_until_idle(ex);
      // Random biases, and the unbiased first choice banned, so the bias decides at least once.
      const auto first = c.logits();
      const auto top = static_cast<Token>(std::max_element(first.begin(), first.end()) - first.begin());
      bias = random_bias(rng, m, 200);
      bias.erase(std::remove_if(bias.begin(), bias.end(), [&](const LogitBias &b) { return b.token == top; }),
                 bias.end());
      bias.push_back({top, -INFINITY});
      c.set_sampler({.logit_bias = bias});
      for (int i = 0; i < kSteps; ++i) {
        const auto l = c.logits();
        const Token want = biased_argmax(l, bias);
        const Token t = c.sample();
        ASSERT_EQ(t, want) << "seed " << seed << " step " << i;
        EXPECT_EQ(c.logits(), l) << "the conversation's logits stay unbiased";
        changed += t != biased_argmax(l, {});
        steps.push_back(t);
        c.prompt(std::vector<Token>{t});
        run_until_idle(ex);
      }
    }
    // A greedy generation with the bias, alone on an executor of its own: the same tokens.
    weft::Executor ex(m, params());
    auto c = ex.create();
    c.prompt(prompt);
    auto g = c.generate({.max_tokens = kSteps, .sampler = weft::SamplerParams{.logit_bias = bias}});
    run_until_idle(ex);
    const auto r = g.result();
    ASSERT_LE(r.tokens.size(), steps.size());
    EXPECT_EQ(r.tokens, std::vector<Token>(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(r.tokens.size())))
        << "seed " << seed;
  }
  EXPECT_GE(changed, 5) << "the bias changes the greedy choice";
}

// The bias on the conversation's own sampler and on a generation's: saved
// mid-generation, loaded on a second executor, the continuation equals the
// unsaved original's; the boosted tokens dominate, so a lost bias would show.
TEST(LogitBiasGeneration, SaveAndLoadMidGenerationKeepTheBias) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 4; ++seed) {
    for (const bool own : {true, false}) {
      std::mt19937 rng(seed);
      std::vector<LogitBias> bias;
      for (Token t = 40; t < 44; ++t) bias.push_back({t, 7.0f});
      for (Token t = 50; t < 60; ++t) bias.push_back({t, -INFINITY});
      const weft::SamplerParams sp{.temperature = 1.0f, .top_k = 12, .seed = seed, .logit_bias = bias};
      weft::Executor a(m, params());
      auto c = a.create();
      c.prompt(random_tokens(rng, m, 6, true));
      weft::GenerateParams gp{.max_tokens = 24};
      if (own) {
        c.set_sampler(sp);
      } else {
        gp.sampler = sp;
      }
      auto g = c.generate(gp);
      const auto run = weft_test::save_mid_generation(a, c, g, 5, params());
      ASSERT_TRUE(run.ok);
      EXPECT_EQ(run.version, 8) << "a sampler with a logit_bias is state version 8 (docs/STATE_FORMAT.md)";
      const auto &ra = run.original, &rb = run.loaded;
      EXPECT_EQ(rb.tokens, ra.tokens) << "seed " << seed << (own ? " own sampler" : " generation's sampler");
      int boosted = 0;
      for (const Token t : ra.tokens) {
        EXPECT_FALSE(t >= 50 && t < 60) << "banned token " << t;
        boosted += t >= 40 && t < 44;
      }
      EXPECT_GT(boosted * 2, static_cast<int>(ra.tokens.size())) << "the boosted tokens dominate";
    }
  }
}

TEST(LogitBiasGeneration, ATokenOutsideTheVocabularyIsRefusedWhenSet) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt(std::vector<Token>{1, 2, 3});
  const Token n = m.n_vocab();
  const std::string why =
      fmt::format("SamplerParams.logit_bias[0].token = {} is outside the vocabulary [0, {})", n + 5, n);
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_sampler({.logit_bias = {{n + 5, 1.0f}}}); }, weft::Errc::out_of_range,
                                     why));
  EXPECT_TRUE(weft_test::throws_weft(
      [&] { (void)c.generate({.sampler = weft::SamplerParams{.logit_bias = {{n + 5, 1.0f}}}}); },
      weft::Errc::out_of_range, why));
  EXPECT_FALSE(c.generation().has_value());
}
