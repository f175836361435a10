// Sampler's typical_p, XTC, DRY and Mirostat 2.0: DRY picks what llama.cpp's
// own DRY stage picks over the same history; typical_p samples only from
// the set llama.cpp's typical stage keeps; XTC with certainty never takes a
// token above the threshold but the least likely of them, and acts on about
// `probability` of the draws; mirostat's surprise rises with tau and stays
// below the plain draw's;
// state() and restore() (and clone()) continue every one identically; bad
// values are refused by name.
#include <gtest/gtest.h>

#include <llama.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "common.hpp"
#include "core/model_impl.hpp"
#include "core/sampling.hpp"
#include "core/sampling_helpers.hpp"

using weft::SamplerParams;
using weft::Token;
using weft::detail::Sampler;
using weft_test::throws_weft;
using namespace weft_test::sampling;

namespace {

struct Raw {
  llama_sampler *s;
  explicit Raw(llama_sampler *p) : s(p) {}
  ~Raw() { llama_sampler_free(s); }
  Raw(const Raw &) = delete;
  Raw &operator=(const Raw &) = delete;
};

std::vector<llama_token_data> candidates(const std::vector<float> &l) {
  std::vector<llama_token_data> c(l.size());
  for (std::size_t i = 0; i < l.size(); ++i) c[i] = {static_cast<llama_token>(i), l[i], 0.0f};
  return c;
}

// Logits whose favourite continues a run of `history` (the token after the
// run's earlier copy), ahead of the runner-up by `margin`.
std::vector<float> favour(std::mt19937 &rng, Token fav, Token second, float margin) {
  auto l = normal_logits(rng, 0.5f);
  l[static_cast<std::size_t>(second)] = 10.0f;
  l[static_cast<std::size_t>(fav)] = 10.0f + margin;
  return l;
}

}  // namespace

TEST(SamplingStages, DryPicksWhatLlamaCppsDryStagePicks) {
  const auto &m = model();
  int steered = 0;
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    const SamplerParams p{.dry_multiplier = 0.8f, .dry_base = 1.75f, .dry_allowed_length = 2,
                          .dry_penalty_last_n = static_cast<std::int32_t>(64 + seed)};
    Sampler s(m, p, 1024);
    EXPECT_FALSE(s.greedy_fast_path()) << "DRY changes logits: no plain argmax";
    std::vector<const char *> breakers;
    for (const auto &b : p.dry_sequence_breakers) breakers.push_back(b.c_str());
    Raw dry(llama_sampler_init_dry(m.impl()->vocab, p.dry_multiplier, p.dry_base, p.dry_allowed_length,
                                   p.dry_penalty_last_n, breakers.data(), breakers.size()));
    // A prompt that repeats a run of ordinary tokens (ids 300..399: no breakers).
    std::uniform_int_distribution<Token> tok(300, 399);
    std::vector<Token> run(3 + seed % 4);
    for (auto &t : run) t = tok(rng);
    std::vector<Token> history;
    for (int k = 0; k < 3; ++k) {
      history.insert(history.end(), run.begin(), run.end());
      history.push_back(tok(rng));
    }
    history.insert(history.end(), run.begin(), run.end() - 1);  // the run again, one short
    s.accept_prompt(history);
    for (Token t : history) llama_sampler_accept(dry.s, t);
    for (int step = 0; step < 10; ++step) {
      // The model favours finishing the run (a repeat DRY penalises) by a
      // margin the penalty may or may not overcome.
      const float margin = std::uniform_real_distribution<float>(0.1f, 6.0f)(rng);
      const auto l = favour(rng, run.back(), tok(rng), margin);
      auto c = candidates(l);
      llama_token_data_array arr{c.data(), c.size(), -1, false};
      llama_sampler_apply(dry.s, &arr);
      const auto best = std::max_element(c.begin(), c.end(), [](const auto &a, const auto &b) { return a.logit < b.logit; });
      const Token want = best->id;
      const Token got = s.sample(l);
      ASSERT_EQ(got, want) << "seed " << seed << " step " << step;
      steered += got != argmax(l);
      s.accept(got);
      llama_sampler_accept(dry.s, got);
    }
  }
  EXPECT_GE(steered, 10) << "DRY overrides the favourite where the run is long enough";
}

TEST(SamplingStages, TypicalSamplesOnlyFromTheSetLlamaCppKeeps) {
  const auto &m = model();
  std::set<Token> seen;
  for (unsigned seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    Sampler s(m, {.temperature = 1.0f, .seed = seed, .typical_p = 0.3f});
    Raw typical(llama_sampler_init_typical(0.3f, 1));
    for (int step = 0; step < 5; ++step) {
      const auto l = normal_logits(rng, 2.0f);
      auto c = candidates(l);
      llama_token_data_array arr{c.data(), c.size(), -1, false};
      llama_sampler_apply(typical.s, &arr);
      std::set<Token> kept;
      for (std::size_t i = 0; i < arr.size; ++i) kept.insert(arr.data[i].id);
      ASSERT_LT(kept.size(), l.size() / 2) << "the stage cuts";
      const Token t = s.sample(l);
      EXPECT_TRUE(kept.count(t)) << "seed " << seed << " step " << step << ": token " << t;
      seen.insert(t);
      s.accept(t);
    }
  }
  EXPECT_GT(seen.size(), 50u) << "still a draw, not a single pick";
}

TEST(SamplingStages, XtcLeavesOnlyTheLeastLikelyTopChoice) {
  const auto &m = model();
  int acted = 0, draws = 0;
  for (unsigned seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    const float probability = seed % 2 ? 1.0f : 0.5f;
    Sampler s(m, {.temperature = 1.0f, .seed = seed, .xtc_probability = probability, .xtc_threshold = 0.1f});
    for (int step = 0; step < 10; ++step) {
      // Four tokens well above the threshold (~0.24 each), the rest far below.
      auto l = normal_logits(rng, 0.1f);
      std::vector<Token> top;
      for (int k = 0; k < 4; ++k) {
        top.push_back(static_cast<Token>(1000 + 37 * k + seed));
        l[static_cast<std::size_t>(top.back())] = 14.0f + 0.01f * static_cast<float>(k);
      }
      const Token t = s.sample(l);
      s.accept(t);
      // The least likely top choice is the first one (the smallest logit).
      const bool other_top = std::find(top.begin() + 1, top.end(), t) != top.end();
      if (probability == 1.0f) {
        EXPECT_FALSE(other_top) << "seed " << seed << " step " << step;
      }
      if (probability == 0.5f) {
        ++draws;
        acted += !other_top;
      }
    }
  }
  // Without XTC a top choice other than the first is drawn ~3/4 of the time;
  // acting on half the draws leaves none in 1/2 + 1/2 * 1/4 = 5/8 of them
  // (150 draws: 94 +- 6); never acting gives ~38, always 150.
  EXPECT_GT(acted, draws * 45 / 100);
  EXPECT_LT(acted, draws * 80 / 100);
}

TEST(SamplingStages, MirostatSurpriseFollowsTau) {
  const auto &m = model();
  // The mean surprise (bits, under the full distribution) of 300 tokens
  // drawn from the same logits sequence.
  auto mean_surprise = [&](const SamplerParams &p) {
    std::mt19937 rng(5);
    Sampler s(m, p);
    double sum = 0;
    int n = 0;
    for (int step = 0; step < 400; ++step) {
      const auto l = normal_logits(rng, 3.0f);
      const Token t = s.sample(l);
      s.accept(t);
      const float mx = *std::max_element(l.begin(), l.end());
      double z = 0;
      for (float v : l) z += std::exp(static_cast<double>(v - mx));
      if (step >= 100) {
        sum += -std::log2(std::exp(static_cast<double>(l[static_cast<std::size_t>(t)] - mx)) / z);
        ++n;
      }
    }
    return sum / n;
  };
  const SamplerParams plain{.temperature = 1.0f, .seed = 9};
  std::vector<double> means;
  for (const float tau : {2.0f, 4.0f, 8.0f}) {
    SamplerParams p = plain;
    p.mirostat = 2;
    p.mirostat_tau = tau;
    means.push_back(mean_surprise(p));
  }
  const double untruncated = mean_surprise(plain);
  // Mirostat targets the surprise within the set it keeps, so the full
  // distribution's is higher than tau, but it rises with tau and stays
  // below the plain draw's.
  EXPECT_GT(means[1], means[0] + 0.5);
  EXPECT_GT(means[2], means[1] + 0.5);
  EXPECT_GT(untruncated, means[2] + 0.5);
  EXPECT_GT(means[0], 1.0);
}

TEST(SamplingStages, StateRestoreAndCloneContinueIdentically) {
  const auto &m = model();
  const std::vector<SamplerParams> all = {
      {.temperature = 0.9f, .seed = 1, .dry_multiplier = 1.0f, .dry_penalty_last_n = 32},
      {.temperature = 0.9f, .seed = 2, .xtc_probability = 0.6f, .xtc_threshold = 0.02f},
      {.temperature = 0.9f, .seed = 3, .typical_p = 0.7f},
      {.temperature = 0.9f, .seed = 4, .dry_multiplier = 0.5f, .mirostat = 2, .mirostat_tau = 3.0f},
      {.seed = 5, .dry_multiplier = 2.0f, .dry_allowed_length = 1},
  };
  for (std::size_t i = 0; i < all.size(); ++i) {
    std::mt19937 rng(static_cast<unsigned>(i) + 1);
    Sampler a(m, all[i], 1024);
    std::vector<Token> prompt(20);
    for (auto &t : prompt) t = static_cast<Token>(300 + rng() % 8);  // repeats for DRY
    a.accept_prompt(prompt);
    for (int k = 0; k < 15; ++k) a.accept(a.sample(normal_logits(rng, 1.0f)));
    Sampler b = Sampler::restore(m, all[i], 1024, a.state());
    Sampler c = a.clone();
    EXPECT_EQ(a.state().mirostat_mu.has_value(), all[i].mirostat == 2);
    for (int k = 0; k < 30; ++k) {
      auto l = normal_logits(rng, 1.0f);
      for (int j = 0; j < 8; ++j) l[300 + static_cast<std::size_t>(j)] += 2.5f;
      const Token ta = a.sample(l), tb = b.sample(l), tc = c.sample(l);
      ASSERT_EQ(tb, ta) << "params " << i << " step " << k << ": restored";
      ASSERT_EQ(tc, ta) << "params " << i << " step " << k << ": cloned";
      a.accept(ta);
      b.accept(tb);
      c.accept(tc);
    }
  }
}

TEST(SamplingStages, BadValuesAreRefusedByName) {
  const auto &m = model();
  auto refused = [&](const SamplerParams &p, const char *needle) {
    return throws_weft([&] { Sampler s(m, p); }, weft::Errc::invalid_argument, needle);
  };
  EXPECT_TRUE(refused({.typical_p = 0.0f}, "SamplerParams.typical_p = 0 is outside (0, 1]"));
  EXPECT_TRUE(refused({.xtc_probability = 1.5f}, "SamplerParams.xtc_probability = 1.5 is outside [0, 1]"));
  EXPECT_TRUE(refused({.xtc_threshold = NAN}, "SamplerParams.xtc_threshold = nan is outside (0, 1]"));
  EXPECT_TRUE(refused({.dry_multiplier = -1.0f}, "SamplerParams.dry_multiplier = -1 must be finite and >= 0"));
  EXPECT_TRUE(refused({.dry_base = 0.5f}, "SamplerParams.dry_base = 0.5 must be finite and >= 1"));
  EXPECT_TRUE(refused({.dry_allowed_length = 0}, "SamplerParams.dry_allowed_length = 0 must be >= 1"));
  EXPECT_TRUE(refused({.dry_penalty_last_n = -2}, "SamplerParams.dry_penalty_last_n = -2 must be >= -1"));
  EXPECT_TRUE(refused({.dry_sequence_breakers = {"\n", ""}}, "SamplerParams.dry_sequence_breakers[1] is 0 bytes"));
  EXPECT_TRUE(refused({.dry_sequence_breakers = {std::string(41, 'x')}}, "is 41 bytes; each must hold 1 to 40"));
  EXPECT_TRUE(refused({.dry_sequence_breakers = std::vector<std::string>(65, "x")}, "has 65 entries; at most 64"));
  EXPECT_TRUE(refused({.mirostat = 1}, "SamplerParams.mirostat = 1 must be 0 (off) or 2 (Mirostat 2.0)"));
  EXPECT_TRUE(refused({.mirostat_tau = 0.0f}, "SamplerParams.mirostat_tau = 0 must be finite and > 0"));
  EXPECT_TRUE(refused({.mirostat_eta = 2.0f}, "SamplerParams.mirostat_eta = 2 is outside (0, 1]"));
}
