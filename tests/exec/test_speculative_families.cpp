// Speculative decoding on other model families: a recurrent, a hybrid and a
// sliding-window model draft nothing (their memory cannot give a rejected
// draft back); a mixture-of-experts model (plain attention) drafts, and its
// tokens are those without drafts.
#include <gtest/gtest.h>

#include <random>

#include "reference.hpp"
#include "weft/executor.hpp"
#include "weft/make_model.hpp"

namespace {

struct SpecFamily {
  weft::ModelArch arch;
  const char *name;
  bool drafts;
};

}  // namespace

TEST(SpeculativeFamilies, OnlyPlainAttentionDraftsAndTokensMatch) {
  const SpecFamily families[] = {{weft::ModelArch::gemma3, "gemma3", false},
                                 {weft::ModelArch::lfm2, "lfm2", false},
                                 {weft::ModelArch::mamba, "mamba", false},
                                 {weft::ModelArch::moe, "moe", true}};
  const auto dir = weft_test::temp_dir("spec-families");
  for (const auto &f : families) {
    SCOPED_TRACE(f.name);
    weft::MakeModelParams mp;
    mp.preset = weft::ModelPreset::tiny;
    mp.seed = 5;
    mp.arch = f.arch;
    mp.out = (dir / (std::string(f.name) + ".gguf")).string();
    weft::make_model(mp);
    const auto m = weft::Model::load({.path = mp.out});
    weft::SamplerParams biased;  // a small alphabet: replies repeat, lookup finds drafts
    for (weft::Token t : {300, 301, 302, 303, 304}) biased.logit_bias.push_back({t, 30.0f});
    const weft::SpeculativeParams lookup{.drafter = weft::Drafter::lookup, .ngram_min = 1, .adaptive = false};
    std::uint32_t drafted = 0;
    for (unsigned seed = 1; seed <= 3; ++seed) {
      std::mt19937 rng(seed);
      const auto prompt = weft_test::random_tokens(rng, m, 12, true);
      weft::GenerationResult r[2];
      for (int side = 0; side < 2; ++side) {
        weft::Executor ex(m, {.n_ctx = 512, .n_batch = 64, .n_seq_max = 4, .n_threads = 2});
        auto c = ex.create();
        c.prompt(prompt);
        weft::GenerateParams g{.max_tokens = 24, .sampler = biased};
        if (side == 1) g.speculative = lookup;
        auto gen = c.generate(g);
        weft_test::run_until_idle(ex);
        r[side] = gen.result();
      }
      EXPECT_EQ(r[0].tokens, r[1].tokens) << "seed " << seed;
      drafted += r[1].drafted;
      EXPECT_LE(r[1].accepted, r[1].drafted);
    }
    if (f.drafts) {
      EXPECT_GT(drafted, 0u);
    } else {
      EXPECT_EQ(drafted, 0u);
    }
  }
}
