// Sampler's fast paths (the argmax, and the top-k selection at a
// temperature) against the full llama.cpp chain: the same tokens, state and
// errors over seeded random and adversarial logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common.hpp"
#include "core/sampling.hpp"
#include "core/sampling_helpers.hpp"

using weft::SamplerParams;
using weft::Token;
using weft::detail::Sampler;
using weft_test::throws_weft;
using namespace weft_test::sampling;

namespace {

std::vector<Token> end_tokens() {
  std::vector<Token> eog;
  for (std::size_t t = 0; t < n_vocab(); ++t) {
    if (model().is_eog(static_cast<Token>(t))) eog.push_back(static_cast<Token>(t));
  }
  return eog;
}

}  // namespace

TEST(Sampling, GreedyFastPathIsTakenExactlyWhenTheChainIsAnArgmax) {
  EXPECT_TRUE(Sampler(model(), {}).greedy_fast_path());
  EXPECT_TRUE(Sampler(model(), {.top_k = 5, .top_p = 0.5f, .min_p = 0.2f}).greedy_fast_path());
  EXPECT_TRUE(Sampler(model(), {.repeat_penalty = 1.3f, .frequency_penalty = 0.5f, .penalty_last_n = 0})
                  .greedy_fast_path());  // a zero window disables every penalty in llama.cpp
  EXPECT_TRUE(Sampler(model(), {.penalty_last_n = -1}).greedy_fast_path());
  EXPECT_TRUE(Sampler(model(), {}).clone().greedy_fast_path());
  EXPECT_FALSE(Sampler(model(), {.temperature = 0.5f}).greedy_fast_path());
  EXPECT_FALSE(Sampler(model(), {.repeat_penalty = 1.1f}).greedy_fast_path());
  EXPECT_FALSE(Sampler(model(), {.frequency_penalty = 0.1f}).greedy_fast_path());
  EXPECT_FALSE(Sampler(model(), {.presence_penalty = -0.1f}).greedy_fast_path());
  // A grammar checks the fast path's pick afterwards (Sampling.GrammarKeepsTheUnconstrainedPickWhenItAllowsIt).
  EXPECT_TRUE(Sampler(model(), {.grammar = kDigits}).greedy_fast_path());
}

TEST(Sampling, GreedyFastPathMatchesTheFullChain) {
  const std::vector<SamplerParams> fast = {
      {}, {.top_k = 3, .top_p = 0.9f}, {.repeat_penalty = 2.0f, .presence_penalty = 1.0f, .penalty_last_n = 0}};
  for (const auto &params : fast) {
    Sampler a(model(), params);
    ASSERT_TRUE(a.greedy_fast_path());
    Sampler b = a.clone();
    std::mt19937 rng(42);
    for (unsigned i = 0; i < 600; ++i) {
      const auto l = tricky_logits(rng, i);
      const Token fast_token = a.sample(l);
      const Token chain_token = b.sample_chain(l);
      ASSERT_EQ(fast_token, chain_token) << "vector " << i << " kind " << i % 6;
      ASSERT_EQ(fast_token, argmax(l)) << "vector " << i;  // std::max_element also keeps the first maximum
      a.accept(fast_token);
      b.accept(chain_token);
      ASSERT_EQ(a.state().rng, b.state().rng);
      ASSERT_EQ(a.state().journal, b.state().journal);
    }
    // The same errors, naming the same entry.
    std::vector<float> l(n_vocab(), 0.0f);
    l[5] = std::nanf("");
    l[900] = std::nanf("");
    EXPECT_TRUE(throws_weft([&] { a.sample(l); }, weft::Errc::invalid_argument, "logits[5] is NaN"));
    EXPECT_TRUE(throws_weft([&] { b.sample_chain(l); }, weft::Errc::invalid_argument, "logits[5] is NaN"));
    l.assign(n_vocab(), -INFINITY);
    EXPECT_TRUE(throws_weft([&] { a.sample(l); }, weft::Errc::invalid_argument, "-inf"));
    EXPECT_TRUE(throws_weft([&] { b.sample_chain(l); }, weft::Errc::invalid_argument, "-inf"));
    l.assign(n_vocab() - 1, 0.0f);
    EXPECT_TRUE(throws_weft([&] { a.sample(l); }, weft::Errc::invalid_argument, std::to_string(n_vocab())));
    // A state saved from the fast path restores to a sampler that continues identically.
    Sampler r = Sampler::restore(model(), params, 0, a.state());
    std::mt19937 rng2(7);
    for (int k = 0; k < 20; ++k) {
      const auto l2 = tricky_logits(rng2, static_cast<unsigned>(k));
      ASSERT_EQ(r.sample(l2), b.sample_chain(l2));
    }
  }
}

TEST(Sampling, TopKFastPathIsTakenExactlyWhenTheChainStartsWithTopK) {
  EXPECT_TRUE(Sampler(model(), {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f}).top_k_fast_path());
  EXPECT_TRUE(Sampler(model(), {.temperature = 0.8f, .top_k = Sampler::kTopKFastMax}).top_k_fast_path());
  EXPECT_TRUE(Sampler(model(), {.temperature = 0.8f, .top_k = 1}).clone().top_k_fast_path());
  EXPECT_TRUE(
      Sampler(model(), {.temperature = 0.8f, .top_k = 8, .repeat_penalty = 2.0f, .penalty_last_n = 0}).top_k_fast_path());
  EXPECT_FALSE(Sampler(model(), {.temperature = 0.8f, .top_k = 0}).top_k_fast_path());
  EXPECT_FALSE(Sampler(model(), {.temperature = 0.8f, .top_k = Sampler::kTopKFastMax + 1}).top_k_fast_path());
  EXPECT_FALSE(Sampler(model(), {.top_k = 40}).top_k_fast_path());  // greedy has its own
  EXPECT_FALSE(Sampler(model(), {.temperature = 0.8f, .top_k = 40, .repeat_penalty = 1.1f}).top_k_fast_path());
  EXPECT_TRUE(Sampler(model(), {.temperature = 0.8f, .top_k = 40, .grammar = kDigits}).top_k_fast_path());
  EXPECT_FALSE(Sampler(model(), {.temperature = 0.8f, .top_k = 40, .mirostat = 2}).top_k_fast_path());
  EXPECT_FALSE(Sampler(model(), {.temperature = 0.8f, .top_k = 40, .dry_multiplier = 0.5f}).top_k_fast_path());
}

TEST(Sampling, TopKFastPathMatchesTheFullChain) {
  const std::vector<Token> eog = end_tokens();
  ASSERT_FALSE(eog.empty());
  const std::vector<SamplerParams> fast = {
      {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 1},
      {.temperature = 1.5f, .top_k = 1, .seed = 2},
      {.temperature = 0.5f, .top_k = Sampler::kTopKFastMax, .min_p = 0.05f, .seed = 3},
      {.temperature = 1.0f, .top_k = 7, .top_p = 0.5f, .min_p = 0.1f, .seed = 4}};
  for (const auto &params : fast) {
    Sampler a(model(), params);
    ASSERT_TRUE(a.top_k_fast_path());
    Sampler b = a.clone();
    const auto k = static_cast<std::size_t>(params.top_k);
    std::mt19937 rng(42 + params.seed);
    unsigned taken = 0, plain = 0;  // fast-path draws; vectors of plain logits
    for (unsigned i = 0; i < 400; ++i) {
      const unsigned kind = i % 8;
      auto l = kind < 6 ? tricky_logits(rng, kind) : normal_logits(rng, 3.0f);
      if (kind == 6 && k < l.size()) {
        // The (k+1)-th largest equal to the k-th: which of them is kept is
        // the partial sort's choice, so the fast path must defer.
        std::vector<float> sorted = l;
        std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k), sorted.end(),
                         std::greater<>());
        const float kth = *std::min_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k));
        *std::find(l.begin(), l.end(), sorted[k]) = kth;
      }
      if (kind == 7) {
        // An end token on top, and ties well below the top k.
        l[static_cast<std::size_t>(eog[i % eog.size()])] = 40.0f;
        for (std::size_t t = 0; t < 64; ++t) l[t] = -20.0f;
      }
      const bool ban = i % 3 == 0;
      const Token fast_token = a.sample_top_k(l, ban);
      const Token chain_token = b.sample_chain(l, ban);
      if (kind == 6 && k < l.size()) {
        ASSERT_EQ(fast_token, -1) << "vector " << i;
      }
      // Independently: are the top k and their order unique?
      std::vector<float> kept;
      for (std::size_t t = 0; t < l.size(); ++t) {
        const bool banned = ban && model().is_eog(static_cast<Token>(t));
        if (!banned && l[t] > -INFINITY) kept.push_back(l[t]);
      }
      std::sort(kept.begin(), kept.end(), std::greater<>());
      bool unique = kept.size() >= std::min(k, l.size());
      for (std::size_t j = 1; unique && j < kept.size() && j <= k; ++j) unique = kept[j] != kept[j - 1];
      ASSERT_EQ(fast_token >= 0, unique) << "vector " << i << " kind " << kind;
      if (kind == 0 || kind == 7) ++plain;
      if (fast_token < 0) {
        // Deferred: nothing drawn; sample() then takes the chain.
        ASSERT_EQ(a.sample(l, ban), chain_token) << "vector " << i;
      } else {
        ++taken;
        ASSERT_EQ(fast_token, chain_token) << "vector " << i << " kind " << kind;
      }
      if (ban) {
        ASSERT_FALSE(model().is_eog(chain_token)) << "vector " << i;
      }
      a.accept(chain_token);
      b.accept(chain_token);
      ASSERT_EQ(a.state().rng, b.state().rng) << "vector " << i;
      ASSERT_EQ(a.state().journal, b.state().journal);
    }
    EXPECT_GE(taken, plain * 3 / 4);  // plain normal logits rarely tie among the top k
    // The same errors, naming the same entry, through sample().
    std::vector<float> l(n_vocab(), 0.0f);
    l[5] = std::nanf("");
    EXPECT_TRUE(throws_weft([&] { a.sample(l); }, weft::Errc::invalid_argument, "logits[5] is NaN"));
    l.assign(n_vocab(), -INFINITY);
    EXPECT_TRUE(throws_weft([&] { a.sample(l); }, weft::Errc::invalid_argument, "-inf"));
    for (Token t : eog) l[static_cast<std::size_t>(t)] = 1.0f;
    EXPECT_TRUE(throws_weft([&] { a.sample(l, true); }, weft::Errc::invalid_argument, "-inf"));
    l.assign(n_vocab() - 1, 0.0f);
    EXPECT_TRUE(throws_weft([&] { a.sample(l); }, weft::Errc::invalid_argument, std::to_string(n_vocab())));
  }
}

// The grammar's draw without masking the whole vocabulary (sample_masked)
// against the full mask (sample_chain: every token checked, then the chain):
// the same token and state whenever it decides, at greedy and with a top k,
// with end tokens banned or not, over grammars that admit a few tokens
// (digits) or many (lowercase words); it decides most greedy draws, and
// most top-k draws where the grammar admits many tokens.
TEST(Sampling, MaskedDrawMatchesTheFullMask) {
  const std::vector<const char *> grammars = {R"(root ::= [0-9]+ ("." [0-9]+)*)",
                                              R"(root ::= [a-z]+ (" " [a-z]+)*)"};
  const std::vector<SamplerParams> chains = {
      {},
      {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 1},
      {.temperature = 1.0f, .top_k = 5, .seed = 2},
  };
  for (const char *g : grammars) {
    for (SamplerParams params : chains) {
      params.grammar = g;
      Sampler a(model(), params);
      Sampler b = a.clone();
      std::mt19937 rng(7 + params.seed);
      unsigned taken = 0;
      const unsigned draws = 120;
      for (unsigned i = 0; i < draws; ++i) {
        auto l = i % 5 == 4 ? tricky_logits(rng, 1) : normal_logits(rng, 3.0f);
        const bool ban = i % 3 == 0;
        const Token fast = a.sample_masked(l, ban);
        const Token full = b.sample_chain(l, ban);
        if (fast < 0) {
          ASSERT_EQ(a.sample_chain(l, ban), full) << g << " draw " << i;  // nothing was drawn
        } else {
          ++taken;
          ASSERT_EQ(fast, full) << g << " temperature " << params.temperature << " draw " << i;
        }
        ASSERT_EQ(a.state().rng, b.state().rng) << "draw " << i;
        a.accept(full);
        b.accept(full);
      }
      // Digits are a few hundred tokens: 40 of them are rarely among the best quarter.
      if (params.temperature == 0.0f || g == grammars[1]) {
        EXPECT_GE(taken, draws / 2) << g << " top_k " << params.top_k;
      }
    }
  }
  // Another chain (no top k at a temperature): always the full mask.
  Sampler c(model(), {.temperature = 0.8f, .grammar = grammars[0]});
  std::mt19937 rng(3);
  EXPECT_EQ(c.sample_masked(normal_logits(rng, 3.0f)), -1);
}
