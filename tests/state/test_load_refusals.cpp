// Loading state the cache cannot take: refused whole, the executor unchanged.
#include <gtest/gtest.h>

#include <random>

#include "common.hpp"
#include "reference.hpp"

// KV data llama.cpp refuses (another cache type) is a typed error, and the
// executor is unchanged: no conversation added, no cell or slot held — also
// while a worker steps.
TEST(State, KvDataOfAnotherCacheTypeIsRefusedWhole) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(31);
  weft::Executor f32(m, {.n_ctx = 512, .n_batch = 64, .n_seq_max = 2, .kv_type = weft::KvType::f32});
  auto c = f32.create();
  c.prompt(weft_test::random_tokens(rng, m, 24, true));
  weft_test::run_until_idle(f32);
  const auto bytes = c.save();
  weft::Executor f16(m, {.n_ctx = 512, .n_batch = 64, .n_seq_max = 2});
  auto other = f16.create();
  other.prompt(weft_test::random_tokens(rng, m, 8, true));
  weft_test::run_until_idle(f16);
  const auto before = f16.stats();
  EXPECT_TRUE(weft_test::throws_weft([&] { (void)f16.load(bytes); }, weft::Errc::corrupt, "refused the KV data"));
  const auto after = f16.stats();
  EXPECT_EQ(after.conversations, before.conversations);
  EXPECT_EQ(after.cells_used, before.cells_used);
  EXPECT_EQ(after.slots_used, before.slots_used);
  EXPECT_TRUE(other.has_logits());
}
