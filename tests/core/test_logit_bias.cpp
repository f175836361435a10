// SamplerParams::logit_bias in the Sampler: on every path (the argmax, the
// top-k selection, the full chain, a grammar) a biased sampler picks what an
// unbiased twin picks from the logits plus the bias, by its own arithmetic
// here; a -inf ban holds at a temperature; a boost brings a token into the
// top k; the refusals and their messages.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common.hpp"
#include "core/sampling.hpp"
#include "core/sampling_helpers.hpp"

using namespace weft_test::sampling;
using weft::Errc, weft::LogitBias, weft::SamplerParams, weft::Token, weft::detail::Sampler, weft_test::throws_weft;

namespace {

// `n` distinct tokens with normal biases of `scale`, one in five banned.
std::vector<LogitBias> random_bias(std::mt19937 &rng, std::size_t n, float scale) {
  std::uniform_int_distribution<Token> tok(0, static_cast<Token>(n_vocab()) - 1);
  std::normal_distribution<float> b(0.0f, scale);
  std::vector<LogitBias> out;
  std::set<Token> seen;
  while (out.size() < n) {
    const Token t = tok(rng);
    if (!seen.insert(t).second) continue;
    out.push_back({t, rng() % 5 == 0 ? -INFINITY : b(rng)});
  }
  return out;
}

// The tokens whose piece is all digits (what kDigits admits first), up to 12.
std::vector<Token> digit_tokens() {
  std::vector<Token> out;
  for (Token t = 0; t < static_cast<Token>(n_vocab()) && out.size() < 12; ++t) {
    const std::string p = model().token_piece(t);
    if (!p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; })) out.push_back(t);
  }
  return out;
}

std::vector<float> plus(std::vector<float> l, const std::vector<LogitBias> &bias) {
  for (const auto &b : bias) {
    float &v = l[static_cast<std::size_t>(b.token)];
    v = b.bias == -INFINITY ? -INFINITY : v + b.bias;
  }
  return l;
}

SamplerParams with_bias(SamplerParams p, std::vector<LogitBias> bias) {
  p.logit_bias = std::move(bias);
  return p;
}

}  // namespace

TEST(LogitBias, EveryPathPicksWhatTheBiasedLogitsGive) {
  struct Case {
    const char *name;
    SamplerParams params;
    bool accept;
  };
  const std::vector<Case> cases = {
      {"greedy argmax", {}, true},
      {"greedy chain (penalties)", {.repeat_penalty = 1.3f}, true},
      {"top-k selection", {.temperature = 1.0f, .top_k = 5}, true},
      {"full chain", {.temperature = 0.8f, .top_p = 0.9f, .min_p = 0.02f}, true},
      {"grammar", {.temperature = 1.0f, .top_k = 4, .grammar = kDigits}, false},
  };
  for (const auto &c : cases) {
    int changed = 0;
    for (unsigned seed = 1; seed <= 3; ++seed) {
      std::mt19937 rng(seed);
      auto bias = random_bias(rng, 60, 3.0f);
      // And the grammar's own choices, so the bias decides there too.
      for (const Token t : digit_tokens()) {
        if (std::none_of(bias.begin(), bias.end(), [&](const LogitBias &b) { return b.token == t; })) {
          bias.push_back({t, std::normal_distribution<float>(0.0f, 3.0f)(rng)});
        }
      }
      Sampler a(model(), with_bias(c.params, bias));  // biased
      Sampler b(model(), c.params);                   // given the biased logits
      Sampler u(model(), c.params);                   // unbiased, for "the bias mattered"
      EXPECT_EQ(a.greedy_fast_path(), b.greedy_fast_path()) << c.name;
      EXPECT_EQ(a.top_k_fast_path(), b.top_k_fast_path()) << c.name;
      for (unsigned i = 0; i < 100; ++i) {
        auto l = normal_logits(rng, 2.0f);
        // Make the bias decide often: the biased tokens sit near the top.
        for (const auto &x : bias) l[static_cast<std::size_t>(x.token)] += 4.0f;
        const auto lb = plus(l, bias);
        if (a.top_k_fast_path()) {
          Sampler a2 = a.clone(), b2 = b.clone();
          ASSERT_EQ(a2.sample_top_k(l), b2.sample_top_k(lb)) << c.name << " seed " << seed << " draw " << i;
        }
        Sampler a3 = a.clone(), b3 = b.clone();
        ASSERT_EQ(a3.sample_chain(l), b3.sample_chain(lb)) << c.name << " seed " << seed << " draw " << i;
        const Token t = a.sample(l);
        ASSERT_EQ(t, b.sample(lb)) << c.name << " seed " << seed << " draw " << i;
        changed += t != u.sample(l);
        if (c.accept) {
          a.accept(t);
          b.accept(t);
          u.accept(t);
        }
      }
    }
    EXPECT_GT(changed, 20) << c.name << ": the bias changes the choice";
  }
}

TEST(LogitBias, TheCallersLogitsStayAsGiven) {
  std::mt19937 rng(3);
  const auto bias = random_bias(rng, 100, 5.0f);
  for (const SamplerParams &p : {SamplerParams{}, SamplerParams{.temperature = 1.0f, .top_k = 8},
                                 SamplerParams{.temperature = 1.0f}}) {
    Sampler s(model(), with_bias(p, bias));
    const auto l = normal_logits(rng);
    auto copy = l;
    s.sample(copy);
    EXPECT_EQ(copy, l);
  }
}

TEST(LogitBias, ABannedTokenIsNeverSampledAtATemperature) {
  std::mt19937 rng(11);
  auto l = normal_logits(rng);
  std::vector<LogitBias> bans;
  for (Token t = 10; t < 15; ++t) {
    l[static_cast<std::size_t>(t)] = 40.0f;  // by far the likeliest
    bans.push_back({t, -INFINITY});
  }
  for (const SamplerParams &p : {SamplerParams{.temperature = 1.5f}, SamplerParams{.temperature = 1.5f, .top_k = 3},
                                 SamplerParams{.temperature = 2.0f, .top_p = 0.95f}}) {
    for (std::uint32_t seed = 1; seed <= 32; ++seed) {
      SamplerParams q = p;
      q.seed = seed;
      Sampler banned(model(), with_bias(q, bans));
      Sampler free(model(), q);
      int free_hits = 0;
      for (int i = 0; i < 40; ++i) {
        const Token t = banned.sample(l);
        ASSERT_TRUE(t < 10 || t >= 15) << "seed " << seed << " sampled banned token " << t;
        const Token f = free.sample(l);
        free_hits += f >= 10 && f < 15;
      }
      EXPECT_GT(free_hits, 30) << "without the ban those tokens dominate";
    }
  }
}

TEST(LogitBias, ABoostBringsATokenIntoTheTopK) {
  std::mt19937 rng(5);
  const auto l = normal_logits(rng);
  std::vector<std::size_t> order(l.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return l[a] > l[b]; });
  const auto outsider = static_cast<Token>(order[100]);
  const float boost = l[order[0]] - l[order[100]] + 0.5f;  // now the likeliest
  const std::set<Token> top4 = {static_cast<Token>(order[0]), static_cast<Token>(order[1]),
                                static_cast<Token>(order[2]), static_cast<Token>(order[3])};
  int outsider_hits = 0;
  for (std::uint32_t seed = 1; seed <= 50; ++seed) {
    const SamplerParams p{.temperature = 1.0f, .top_k = 4, .seed = seed};
    Sampler plain(model(), p);
    Sampler boosted(model(), with_bias(p, {{outsider, boost}}));
    ASSERT_TRUE(boosted.top_k_fast_path());
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(top4.count(plain.sample(l))) << "unbiased, only the top 4 are drawn";
      const Token t = boosted.sample(l);
      // The boosted token pushes the 4th out of the choice set.
      ASSERT_TRUE(t == outsider || (top4.count(t) && t != static_cast<Token>(order[3]))) << "seed " << seed << ": " << t;
      outsider_hits += t == outsider;
    }
  }
  EXPECT_GT(outsider_hits, 100);  // ~1/3 of 1000 draws
}

TEST(LogitBias, RefusalsNameTheEntry) {
  const auto n = static_cast<Token>(n_vocab());
  EXPECT_TRUE(throws_weft([] { Sampler(model(), {.logit_bias = {{3, 1.0f}, {7, NAN}}}); }, Errc::invalid_argument,
                          "SamplerParams.logit_bias[1].bias (token 7) is NaN; it must be finite or -inf"));
  EXPECT_TRUE(throws_weft([] { Sampler(model(), {.logit_bias = {{3, 1.0f}, {7, -NAN}}}); }, Errc::invalid_argument,
                          "SamplerParams.logit_bias[1].bias (token 7) is NaN; it must be finite or -inf"));
  EXPECT_TRUE(throws_weft([] { Sampler(model(), {.logit_bias = {{7, INFINITY}}}); }, Errc::invalid_argument,
                          "SamplerParams.logit_bias[0].bias (token 7) is +inf; it must be finite or -inf"));
  EXPECT_TRUE(throws_weft([] { Sampler(model(), {.logit_bias = {{7, 1.0f}, {3, 1.0f}, {7, -INFINITY}}}); },
                          Errc::invalid_argument, "SamplerParams.logit_bias lists token 7 twice"));
  std::vector<LogitBias> many;
  for (Token t = 0; t < 1025; ++t) many.push_back({t, 1.0f});
  EXPECT_TRUE(throws_weft([&] { Sampler(model(), {.logit_bias = many}); }, Errc::invalid_argument,
                          "SamplerParams.logit_bias has 1025 entries; at most 1024 are taken"));
  many.pop_back();
  EXPECT_NO_THROW(Sampler(model(), {.logit_bias = many}));
  EXPECT_TRUE(throws_weft([&] { Sampler(model(), {.logit_bias = {{1, 1.0f}, {n, 1.0f}}}); }, Errc::out_of_range,
                          fmt::format("SamplerParams.logit_bias[1].token = {} is outside the vocabulary [0, {})", n, n)));
  EXPECT_TRUE(throws_weft([&] { Sampler(model(), {.logit_bias = {{-1, 1.0f}}}); }, Errc::out_of_range,
                          fmt::format("SamplerParams.logit_bias[0].token = -1 is outside the vocabulary [0, {})", n)));
  EXPECT_NO_THROW(Sampler(model(), {.logit_bias = {{n - 1, -INFINITY}, {0, -1e30f}}}));
}
