// Per-conversation adapters against raw llama.cpp: a conversation decoded by
// weft under its own LoRA/control-vector setting, batched beside others
// under other settings, has the logits raw llama.cpp gives decoding it
// alone with that setting applied — across setting changes mid-history,
// fork, rewind, save/load, park to RAM/disk and recompute.
#include <gtest/gtest.h>

#include <random>

#include "exec/adapter_fixture.hpp"
using namespace adapter_test;


TEST(Adapters, SettingsReallyDiffer) {
  const auto s = settings(deep());
  std::mt19937 rng(1);
  const auto tokens = weft_test::random_tokens(rng, deep(), 24, true);
  const auto base = ref_logits(tokens, {{UINT32_MAX, {}}});
  double tol = 0;
  for (std::size_t k = 0; k < s.ref.size(); ++k) {
    const double t = tolerance({{UINT32_MAX, s.ref[k]}});
    std::printf("setting %zu: batch-shape floor x8 = %.3g\n", k, t);
    tol = std::max(tol, t);
  }
  // Each setting moves the logits far beyond the tolerance, so a test below
  // that applies the wrong one (or none) fails.
  for (std::size_t k = 1; k < s.ref.size(); ++k) {
    EXPECT_GT(weft_test::nmse(ref_logits(tokens, {{UINT32_MAX, s.ref[k]}}), base), 1000 * tol) << "setting " << k;
  }
  // And a control vector's layer range matters.
  EXPECT_GT(weft_test::nmse(ref_logits(tokens, {{UINT32_MAX, s.ref[4]}}),
                            ref_logits(tokens, {{UINT32_MAX, {{files().c, 1.0f, 2, 3}}}})),
            1000 * tol);
}

TEST(Adapters, BatchedBesideOtherSettingsEqualsDecodingAlone) {
  for (std::uint32_t seed : {1u, 2u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    weft::Executor ex(deep(), params());
    const auto s = settings(deep());
    std::vector<Tracked> convs;
    for (int i = 0; i < 8; ++i) {
      Tracked t{ex.create(), {}};
      t.set(s, rng() % s.uses.size());
      t.conv.prompt(weft_test::random_tokens(rng, deep(), 5 + static_cast<int>(rng() % 60), true));
      convs.push_back(std::move(t));
    }
    weft_test::run_until_idle(ex, &rng, 40);
    for (const auto &t : convs) EXPECT_TRUE(t.matches());
    // A new setting mid-history applies to later tokens only; generated
    // tokens decode under it too.
    for (auto &t : convs) {
      t.set(s, rng() % s.uses.size());
      t.conv.prompt(weft_test::random_tokens(rng, deep(), 1 + static_cast<int>(rng() % 30)));
      if (rng() % 2 == 0) t.conv.generate({.max_tokens = 4});
    }
    weft_test::run_until_idle(ex, &rng, 40);
    for (const auto &t : convs) EXPECT_TRUE(t.matches());
    EXPECT_GT(ex.stats().adapter_switches, 0u);
  }
}

TEST(Adapters, HistoryOperationsKeepEachPositionsSetting) {
  const auto dir = weft_test::temp_dir("adapters-spill");
  auto p = params(4);
  p.spill.disk_dir = dir.string();
  weft::Executor ex(deep(), p);
  const auto s = settings(deep());
  std::mt19937 rng(7);
  Tracked t{ex.create(), {}};
  t.set(s, 1);
  t.conv.prompt(weft_test::random_tokens(rng, deep(), 40, true));
  weft_test::run_until_idle(ex);
  t.set(s, 6);
  t.conv.prompt(weft_test::random_tokens(rng, deep(), 25));
  weft_test::run_until_idle(ex);
  ASSERT_TRUE(t.matches());

  // Fork: the child inherits history and setting, then goes its own way.
  Tracked child{t.conv.fork(), t.parts};
  EXPECT_EQ(child.conv.adapters().size(), 2u);
  child.set(s, 5);
  child.conv.prompt(weft_test::random_tokens(rng, deep(), 9));
  weft_test::run_until_idle(ex);
  EXPECT_TRUE(child.matches());

  // Rewind into the second setting's tokens, then on under a third.
  t.conv.rewind(10);
  t.parts.back().until = UINT32_MAX;
  weft_test::run_until_idle(ex);
  EXPECT_TRUE(t.matches());
  t.set(s, 3);
  t.conv.prompt(weft_test::random_tokens(rng, deep(), 7));
  weft_test::run_until_idle(ex);
  EXPECT_TRUE(t.matches());

  // Save/load into another executor with the adapters loaded there.
  {
    weft::Executor other(deep(), params(2));
    Tracked loaded{other.load(t.conv.save()), t.parts};
    EXPECT_TRUE(loaded.matches());
    loaded.conv.prompt(weft_test::random_tokens(rng, deep(), 5));
    weft_test::run_until_idle(other);
    EXPECT_TRUE(loaded.matches());
  }

  // Tokens only: every position is decoded again, each under its setting.
  {
    weft::Executor other(deep(), params(2));
    Tracked again{other.load(child.conv.save({.tokens_only = true})), child.parts};
    weft_test::run_until_idle(other);
    EXPECT_TRUE(again.matches());
  }

  // Park to RAM, disk and recompute: restored or re-decoded alike.
  for (int tier = 0; tier < 3; ++tier) {
    SCOPED_TRACE("tier " + std::to_string(tier));
    auto q = params(2);
    if (tier >= 1) q.spill.ram_bytes = 0;
    if (tier == 1) q.spill.disk_dir = dir.string();
    weft::Executor other(deep(), q);
    Tracked moved{other.load(child.conv.save()), child.parts};
    weft_test::run_until_idle(other);
    ASSERT_TRUE(moved.conv.park());
    weft_test::run_until_idle(other);
    EXPECT_EQ(moved.conv.residency(),
              tier == 0 ? weft::Residency::ram : tier == 1 ? weft::Residency::disk : weft::Residency::recompute);
    moved.conv.prompt(weft_test::random_tokens(rng, deep(), 3));
    weft_test::run_until_idle(other);
    EXPECT_TRUE(moved.matches());
  }
}

TEST(Adapters, PrefixReuseNeverCrossesSettings) {
  weft::Executor ex(deep(), params());
  const auto s = settings(deep());
  std::mt19937 rng(3);
  const auto lore = weft_test::random_tokens(rng, deep(), 96, true);
  Tracked plain{ex.create(), {}}, under_a{ex.create(), {}};
  plain.set(s, 0);
  under_a.set(s, 1);
  plain.conv.prompt(lore);
  weft_test::run_until_idle(ex);
  under_a.conv.prompt(lore);
  weft_test::run_until_idle(ex);
  EXPECT_EQ(ex.stats().prefix_tokens_reused, 0u);  // the base model's KV is not A's
  EXPECT_TRUE(plain.matches());
  EXPECT_TRUE(under_a.matches());
  // The same setting shares.
  Tracked also_a{ex.create(), {}};
  also_a.set(s, 1);
  auto more = lore;
  more.push_back(lore[5]);
  also_a.conv.prompt(more);
  weft_test::run_until_idle(ex);
  EXPECT_GE(ex.stats().prefix_tokens_reused, 80u);
  EXPECT_TRUE(also_a.matches());
}
