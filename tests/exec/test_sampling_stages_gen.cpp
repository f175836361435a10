// typical_p, XTC, DRY and mirostat through generations: saved mid-generation
// (state version 10: the params, the DRY history in the journal, mirostat's
// mu), loaded on a second executor, the continuation equals the unsaved
// original's; the conversation's own sampler and a generation's alike.
#include <gtest/gtest.h>

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

}  // namespace

TEST(SamplingStagesGeneration, SaveAndLoadMidGenerationContinueAsTheOriginal) {
  const auto &m = weft_test::tiny();
  const std::vector<weft::SamplerParams> all = {
      {.temperature = 1.0f, .seed = 1, .dry_multiplier = 1.5f, .dry_allowed_length = 1, .dry_sequence_breakers = {"."}},
      {.temperature = 1.0f, .seed = 2, .typical_p = 0.8f, .xtc_probability = 0.7f, .xtc_threshold = 0.001f},
      {.temperature = 1.0f, .seed = 3, .mirostat = 2, .mirostat_tau = 6.0f, .mirostat_eta = 0.3f},
      {.seed = 4, .dry_multiplier = 3.0f, .dry_penalty_last_n = 16},
  };
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (const bool own : {true, false}) {
      std::mt19937 rng(static_cast<unsigned>(i) + 1);
      weft::Executor a(m, params());
      auto c = a.create();
      c.prompt(random_tokens(rng, m, 12, true));
      weft::GenerateParams gp{.max_tokens = 24};
      if (own) {
        c.set_sampler(all[i]);
      } else {
        gp.sampler = all[i];
      }
      auto g = c.generate(gp);
      const auto run = weft_test::save_mid_generation(a, c, g, 6, params());
      ASSERT_TRUE(run.ok);
      EXPECT_EQ(run.version, 10) << "typical_p, XTC, DRY or mirostat make state version 10 (docs/STATE_FORMAT.md)";
      EXPECT_EQ(run.loaded.tokens, run.original.tokens) << "params " << i << (own ? " own sampler" : " generation's");
      EXPECT_GT(run.original.tokens.size(), 6u);
    }
  }
}
