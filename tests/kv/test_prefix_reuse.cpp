// Prefix reuse through the executor: conversations that begin alike share
// KV cells without being forked, the prefix cache, pinned prefixes, compact
// snapshots and tokens-only saves — each checked against an independent
// path (a fresh decode of the same history, or an executor with reuse off).
#include <gtest/gtest.h>

#include <random>

#include "exec/test_access.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"

using weft::Errc;
using weft_test::random_tokens;
using weft_test::reference_logits;
using weft_test::run_until_idle;
using weft_test::throws_weft;

namespace {

weft::ExecutorParams params(std::optional<std::uint32_t> cache = {}, std::uint32_t n_seq_max = 16) {
  return {.n_ctx = 4096, .n_batch = 256, .n_seq_max = n_seq_max, .n_threads = 2, .prefix_cache_cells = cache};
}

double tol() { return weft_test::logits_tolerance(weft_test::tiny()); }

std::vector<weft::Token> cat(std::vector<weft::Token> a, const std::vector<weft::Token> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void expect_fresh(const weft::Conversation &c, const std::vector<weft::Token> &history) {
  ASSERT_EQ(c.tokens(), history);
  ASSERT_TRUE(c.has_logits());
  EXPECT_LT(weft_test::nmse(c.logits(), reference_logits(weft_test::tiny(), history)), tol());
}

// 16 NPCs created one by one (never forked), a 1,000-token lore and 20
// tokens of their own each; with step_each, each decoded before the next.
struct Npcs {
  Npcs(weft::Executor &ex, unsigned seed, bool step_each) : rng(seed) {
    const auto &m = weft_test::tiny();
    const auto lore = random_tokens(rng, m, 1000, true);
    for (int i = 0; i < 16; ++i) {
      histories.push_back(cat(lore, random_tokens(rng, m, 20)));
      convs.push_back(ex.create());
      convs.back().prompt(histories.back());
      if (step_each) run_until_idle(ex);
    }
  }
  std::mt19937 rng;
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<weft::Token>> histories;
};

}  // namespace

// The case: 16 conversations created one by one, never forked, with
// a 1,000-token lore and 20 tokens of their own: the lore is decoded once.
TEST(PrefixReuse, SixteenConversationsDecodeTheirSharedLoreOnce) {
  weft::Executor ex(weft_test::tiny(), params());
  Npcs npcs(ex, 1, /*step_each=*/true);
  auto &convs = npcs.convs;
  auto &histories = npcs.histories;
  const auto s = ex.stats();
  EXPECT_LE(s.tokens_decoded, 1000u + 16 * 20) << "the lore once, then 20 own tokens each";
  EXPECT_LE(s.cells_used, 1000u + 16 * 20);
  EXPECT_EQ(s.prefix_tokens_reused, 15u * 1000);
  EXPECT_EQ(s.prefix_hits, 15u);
  EXPECT_EQ(s.cells_saved, 15u * 1000);
  for (int i = 0; i < 16; ++i) expect_fresh(convs[i], histories[i]);

  // The first owner disposed, some others disposed and created again.
  convs[0].dispose();
  for (int i : {3, 7}) {
    convs[i].dispose();
    convs[i] = ex.create();
    convs[i].prompt(histories[i]);
  }
  const auto before = ex.stats().tokens_decoded;
  run_until_idle(ex);
  EXPECT_LE(ex.stats().tokens_decoded - before, 2u * 20);
  for (int i : {3, 7}) expect_fresh(convs[i], histories[i]);
}

// The same when all sixteen arrive at once (a game creating its NPCs at
// start-up): one decodes the lore, the others wait for it and share it.
TEST(PrefixReuse, ConversationsArrivingTogetherDecodeTheLoreOnce) {
  weft::Executor ex(weft_test::tiny(), params());
  Npcs npcs(ex, 11, /*step_each=*/false);
  auto &convs = npcs.convs;
  auto &histories = npcs.histories;
  const int steps = run_until_idle(ex);
  const auto s = ex.stats();
  EXPECT_LE(s.tokens_decoded, 1000u + 16 * 20);
  EXPECT_LE(s.cells_used, 1000u + 16 * 20);
  EXPECT_EQ(s.prefix_tokens_reused, 15u * 1000);
  // Not slower in steps than decoding the lore and then everyone's own.
  EXPECT_LE(steps, 1000 / 256 + 1 + 2 + 1);
  for (int i = 0; i < 16; ++i) expect_fresh(convs[i], histories[i]);
}

TEST(PrefixReuse, FromTheCacheWhenTheOwnerIsDisposedOrParked) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(2);
  const auto lore = random_tokens(rng, m, 300, true);
  weft::ExecutorParams p = params();
  p.spill.ram_bytes = 64ull << 20;
  weft::Executor ex(m, p);
  for (bool park : {false, true}) {
    auto owner = ex.create();
    const auto h0 = cat(lore, random_tokens(rng, m, 7));
    owner.prompt(h0);
    run_until_idle(ex);
    if (park) {
      ASSERT_TRUE(owner.park());
    } else {
      owner.dispose();
    }
    const auto s0 = ex.stats();
    auto next = ex.create();
    const auto h1 = cat(lore, random_tokens(rng, m, 9));
    next.prompt(h1);
    run_until_idle(ex);
    const auto s1 = ex.stats();
    EXPECT_LE(s1.tokens_decoded - s0.tokens_decoded, 9u) << (park ? "parked" : "disposed");
    EXPECT_GT(s1.prefix_cache_hits, s0.prefix_cache_hits);
    expect_fresh(next, h1);
    if (park) {
      // And the parked owner comes back equal.
      owner.prompt(random_tokens(rng, m, 2));
      run_until_idle(ex);
      auto h = owner.tokens();
      expect_fresh(owner, h);
    }
    next.dispose();
  }
}

TEST(PrefixReuse, ARewoundConversationRePromptedWithTheSameTokens) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(3);
  weft::Executor ex(m, params());
  auto c = ex.create();
  const auto h = random_tokens(rng, m, 200, true);
  c.prompt(h);
  run_until_idle(ex);
  c.rewind(150);
  c.prompt(std::vector(h.begin() + 50, h.end()));
  const auto before = ex.stats().tokens_decoded;
  run_until_idle(ex);
  EXPECT_EQ(ex.stats().tokens_decoded - before, 1u) << "only the last token, for its logits";
  expect_fresh(c, h);
}

// Reuse never changes results: seeded random scenarios run side by side on
// an executor with reuse and one without; every conversation's tokens and
// logits agree after every round.
TEST(PrefixReuse, RandomScenariosMatchAnExecutorWithoutReuse) {
  const auto &m = weft_test::tiny();
  for (int seed = 0; seed < 6; ++seed) {
    std::mt19937 rng(100 + seed);
    std::vector<std::vector<weft::Token>> lores;
    for (int i = 0; i < 3; ++i) lores.push_back(random_tokens(rng, m, 20 + static_cast<int>(rng() % 120), true));
    weft::ExecutorParams p = params({}, 6);
    p.n_ctx = 2048;
    p.spill.ram_bytes = 64ull << 20;
    weft::ExecutorParams off = p;
    off.prefix_cache_cells = 0;
    weft::Executor a(m, p), b(m, off);
    std::vector<std::pair<weft::Conversation, weft::Conversation>> cs;
    for (int round = 0; round < 40; ++round) {
      const int op = static_cast<int>(rng() % 8);
      const std::size_t k = cs.empty() ? 0 : rng() % cs.size();
      if (cs.empty() || op == 0 || (op == 1 && cs.size() < 10)) {
        const auto &lore = lores[rng() % lores.size()];
        auto t = cat(std::vector(lore.begin(), lore.begin() + static_cast<long>(rng() % (lore.size() + 1))),
                     random_tokens(rng, m, 1 + static_cast<int>(rng() % 12)));
        cs.emplace_back(a.create(), b.create());
        cs.back().first.prompt(t);
        cs.back().second.prompt(t);
      } else if (op == 2) {
        const auto t = random_tokens(rng, m, 1 + static_cast<int>(rng() % 20));
        cs[k].first.prompt(t);
        cs[k].second.prompt(t);
      } else if (op == 3 && cs.size() < 10) {
        cs.emplace_back(cs[k].first.fork(), cs[k].second.fork());
      } else if (op == 4) {
        const auto n = static_cast<std::uint32_t>(rng() % (cs[k].first.n_tokens() + 1));
        cs[k].first.rewind(n);
        cs[k].second.rewind(n);
      } else if (op == 5) {
        cs[k].first.dispose();
        cs[k].second.dispose();
        cs.erase(cs.begin() + static_cast<long>(k));
      } else if (op == 6) {
        cs[k].first.park();
        cs[k].second.park();
      } else {
        auto ca = a.load(cs[k].first.save());
        auto cb = b.load(cs[k].second.save());
        cs.emplace_back(std::move(ca), std::move(cb));
      }
      run_until_idle(a);
      run_until_idle(b);
      for (auto &[x, y] : cs) {
        ASSERT_EQ(x.tokens(), y.tokens()) << "seed " << seed << " round " << round;
        ASSERT_EQ(x.has_logits(), y.has_logits());
        if (x.has_logits()) {
          ASSERT_LT(weft_test::nmse(x.logits(), y.logits()), tol()) << "seed " << seed << " round " << round;
        }
      }
    }
    EXPECT_GT(a.stats().prefix_tokens_reused, 0u) << "seed " << seed << ": the scenario exercised reuse";
    EXPECT_EQ(b.stats().prefix_tokens_reused, 0u);
    EXPECT_EQ(b.stats().prefix_cache_cells, 0u);
    EXPECT_LE(a.stats().tokens_decoded, b.stats().tokens_decoded);
  }
}

// A snapshot stores a prefix many conversations share once, and restores equal.
TEST(PrefixReuse, SnapshotStoresASharedPrefixOnce) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(4);
  const auto lore = random_tokens(rng, m, 1000, true);
  weft::Executor ex(m, params());
  weft::ExecutorParams off_p = params(0);
  weft::Executor off(m, off_p);
  std::vector<std::vector<weft::Token>> hs;
  std::vector<weft::Conversation> keep;
  for (int i = 0; i < 16; ++i) {
    hs.push_back(cat(lore, random_tokens(rng, m, 20)));
    for (auto *x : {&ex, &off}) {
      keep.push_back(x->create());
      keep.back().prompt(hs.back());
      run_until_idle(*x);
    }
  }
  const auto compact = ex.save_all();
  const auto full = off.save_all();
  // Each conversation also carries its logits (n_vocab floats): with the
  // tiny model's 256 bytes of KV per token they outweigh the KV data, so
  // the 1/8 is checked on the rest (docs/STATE_FORMAT.md has whole-file
  // sizes on realistic models).
  const std::size_t logits = 16 * static_cast<std::size_t>(m.n_vocab()) * sizeof(float);
  EXPECT_LE((compact.size() - logits) * 8, full.size() - logits) << compact.size() << " vs " << full.size();
  weft::Executor back(m, params());
  auto loaded = back.load_all(compact);
  ASSERT_EQ(loaded.size(), 16u);
  std::size_t i = 0;
  for (auto &[id, c] : loaded) {
    const auto more = random_tokens(rng, m, 2);
    c.prompt(more);
    run_until_idle(back);
    expect_fresh(c, cat(hs[i++], more));
  }
  EXPECT_LE(back.stats().cells_used, 1000u + 16 * 22);
  EXPECT_EQ(back.stats().parked_recompute, 0u);
}

TEST(PrefixReuse, TokensOnlySaveIsSmallAndLoadsEqual) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(5);
  weft::Executor ex(m, params());
  auto c = ex.create();
  const auto h = random_tokens(rng, m, 300, true);
  c.prompt(h);
  run_until_idle(ex);
  const auto full = c.save();
  const auto small = c.save(weft::SaveOptions{.tokens_only = true});
  EXPECT_LT(small.size() * 10, full.size());
  c.dispose();
  weft::ExecutorParams off = params(0);
  for (auto *p : {&off}) {
    weft::Executor fresh(m, *p);
    auto back = fresh.load(small);
    EXPECT_EQ(back.n_decoded(), 0u) << "tokens only: all input again";
    EXPECT_EQ(back.tokens(), h);
    run_until_idle(fresh);
    expect_fresh(back, h);
  }
  // Into an executor whose cache still holds it: shared, one token decoded.
  auto back = ex.load(small);
  const auto before = ex.stats().tokens_decoded;
  run_until_idle(ex);
  EXPECT_EQ(ex.stats().tokens_decoded - before, 1u);
  expect_fresh(back, h);
  // Another model: refused.
  const auto other_path = weft_test::temp_dir("prefix-other") / "other.gguf";
  weft::make_model({.preset = weft::ModelPreset::tiny, .seed = 98, .out = other_path.string()});
  weft::Executor other(weft::Model::load({.path = other_path.string()}), params());
  EXPECT_TRUE(throws_weft([&] { (void)other.load(small); }, Errc::incompatible, "another model"));
}

TEST(PrefixReuse, PinnedPrefixServesLaterConversations) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(6);
  weft::Executor ex(m, params({}, 4));
  const auto lore = random_tokens(rng, m, 400, true);
  ex.pin_prefix(lore);
  run_until_idle(ex);
  EXPECT_EQ(ex.stats().pinned_prefixes, 1u);
  EXPECT_EQ(ex.stats().conversations, 0u);
  // Slots fill up with others: the pin is never the one parked.
  std::vector<weft::Conversation> cs;
  for (int i = 0; i < 6; ++i) {
    const auto h = cat(lore, random_tokens(rng, m, 5));
    const auto before = ex.stats().tokens_decoded;
    cs.push_back(ex.create());
    cs.back().prompt(h);
    run_until_idle(ex);
    EXPECT_LE(ex.stats().tokens_decoded - before, 5u) << i;
    expect_fresh(cs.back(), h);
    cs.back().dispose();
  }
  EXPECT_TRUE(throws_weft([&] { ex.pin_prefix(lore); }, Errc::invalid_argument, "pinned already"));
  EXPECT_TRUE(ex.unpin_prefix(lore));
  EXPECT_FALSE(ex.unpin_prefix(lore));
  run_until_idle(ex);
  EXPECT_EQ(ex.stats().pinned_prefixes, 0u);
}

TEST(PrefixReuse, BadInputIsRefusedOthersUnaffected) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(7);
  weft::Executor ex(m, params());
  auto c = ex.create();
  const auto h = random_tokens(rng, m, 40, true);
  c.prompt(h);
  const auto n_ctx = ex.stats().n_ctx;
  EXPECT_TRUE(throws_weft([&] { ex.pin_prefix(random_tokens(rng, m, static_cast<int>(n_ctx))); }, Errc::out_of_range,
                          "n_ctx"));
  auto bad = random_tokens(rng, m, 20);
  bad[5] = m.n_vocab() + 3;
  EXPECT_TRUE(throws_weft([&] { ex.pin_prefix(bad); }, Errc::out_of_range));
  bad[5] = -1;
  EXPECT_TRUE(throws_weft([&] { ex.pin_prefix(bad); }, Errc::out_of_range));
  EXPECT_TRUE(throws_weft([&] { ex.pin_prefix(random_tokens(rng, m, 15)); }, Errc::invalid_argument, "16"));
  EXPECT_TRUE(throws_weft([&] { weft::Executor e(m, params(5000)); }, Errc::invalid_argument, "prefix_cache_cells"));
  weft::Executor off(m, params(0));
  EXPECT_TRUE(throws_weft([&] { off.pin_prefix(h); }, Errc::invalid_argument, "reuse is off"));
  run_until_idle(ex);
  expect_fresh(c, h);
  EXPECT_EQ(ex.stats().pinned_prefixes, 0u);
}

// The prefix cache stays within its budget under a churn of creates and
// disposes, and never holds more entries than there are slots.
TEST(PrefixReuse, CacheStaysWithinItsBudgetUnderChurn) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(8);
  weft::Executor ex(m, params(200, 4));
  auto &core = weft::detail::TestAccess::core(ex);
  std::vector<std::vector<weft::Token>> lores;
  for (int i = 0; i < 8; ++i) lores.push_back(random_tokens(rng, m, 60, true));
  for (int i = 0; i < 10000; ++i) {
    auto c = ex.create();
    if (i % 50 == 0) {
      c.prompt(cat(lores[rng() % lores.size()], random_tokens(rng, m, 3)));
      run_until_idle(ex);
    }
    c.dispose();
    if (i % 50 == 0) {
      run_until_idle(ex);
      const auto s = ex.stats();
      ASSERT_LE(s.prefix_cache_cells, 200u);
      std::lock_guard lock(core.mu);
      ASSERT_LE(core.kv->cache_entries(), 4u);
      ASSERT_LE(core.kv->index_blocks(), 4u * 4);
    }
  }
  EXPECT_GT(ex.stats().prefix_evictions, 0u);
  EXPECT_GT(ex.stats().prefix_cache_hits, 0u);
}
