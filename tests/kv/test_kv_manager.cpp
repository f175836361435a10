// KvManager on a real llama.cpp context: slots, cell accounting, sharing,
// shifting, parking and importing, each checked against what llama.cpp's own
// memory reports and against the logits of a fresh decode.
#include <gtest/gtest.h>
#include <llama.h>

#include <random>
#include <vector>

#include "common.hpp"
#include "core/model_impl.hpp"
#include "kv/kv_manager.hpp"
#include "reference.hpp"

namespace {

using weft::detail::KvHandle;
using weft::detail::KvManager;
using weft_test::random_tokens;

struct Fixture {
  explicit Fixture(std::uint32_t n_seq_max = 4, std::uint64_t ram = 64ull << 20, bool recompute = false,
                   std::uint32_t prefix_cache = 0) {
    auto p = llama_context_default_params();
    p.n_ctx = 512;
    p.n_batch = 256;
    p.n_ubatch = 256;
    p.n_seq_max = n_seq_max;
    p.n_threads = 2;
    p.n_threads_batch = 2;
    p.kv_unified = true;
    p.no_perf = true;
    p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    ctx = llama_init_from_model(weft_test::tiny().impl()->model, p);
    kv.emplace(ctx, n_seq_max, weft::detail::SpillConfig{.ram_bytes = ram}, recompute, prefix_cache);
  }
  ~Fixture() {
    kv.reset();
    llama_free(ctx);
  }
  // Decodes tokens at positions h.n().. into h's sequence; returns the last logits.
  std::vector<float> decode(KvHandle &h, const std::vector<weft::Token> &tokens) {
    llama_batch b = llama_batch_init(static_cast<int>(tokens.size()), 0, 1);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      b.token[i] = tokens[i];
      b.pos[i] = static_cast<llama_pos>(h.n() + i);
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = h.seq;
      b.logits[i] = i + 1 == tokens.size();
    }
    b.n_tokens = static_cast<int>(tokens.size());
    EXPECT_EQ(llama_decode(ctx, b), 0);
    llama_batch_free(b);
    kv->commit(h, tokens);
    const float *lg = llama_get_logits_ith(ctx, -1);
    return {lg, lg + weft_test::tiny().n_vocab()};
  }
  llama_context *ctx = nullptr;
  std::optional<KvManager> kv;
};

double tol() { return weft_test::logits_tolerance(weft_test::tiny()); }

}  // namespace

TEST(KvManager, SlotsRunOutAndComeBack) {
  Fixture f(3);
  std::vector<KvHandle> h(4);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(f.kv->acquire_slot(h[i]));
  EXPECT_FALSE(f.kv->acquire_slot(h[3]));
  EXPECT_EQ(f.kv->slots_free(), 0u);
  f.kv->release(h[1]);
  EXPECT_FALSE(h[1].has_slot());
  EXPECT_TRUE(f.kv->acquire_slot(h[3]));
}

TEST(KvManager, TruncateAndRollBackAgreeWithLlama) {
  Fixture f;
  std::mt19937 rng(1);
  const auto &m = weft_test::tiny();
  KvHandle h;
  ASSERT_TRUE(f.kv->acquire_slot(h));
  const auto toks = random_tokens(rng, m, 30, true);
  f.decode(h, toks);
  EXPECT_EQ(f.kv->cells_used(), 30u);
  f.kv->verify(h);
  f.kv->truncate(h, 12);
  EXPECT_EQ(h.n(), 12u);
  EXPECT_EQ(f.kv->cells_used(), 12u);
  f.kv->verify(h);
  // Decoded again from 12, the logits are a fresh decode's.
  auto rest = std::vector(toks.begin() + 12, toks.end());
  EXPECT_LT(weft_test::nmse(f.decode(h, rest), weft_test::reference_logits(m, toks)), tol());
  // Tokens llama.cpp holds but the ledger does not: rolled back.
  llama_batch b = llama_batch_init(1, 0, 1);
  b.n_tokens = 1, b.token[0] = 5, b.pos[0] = static_cast<llama_pos>(h.n()), b.n_seq_id[0] = 1, b.seq_id[0][0] = h.seq;
  b.logits[0] = 1;
  ASSERT_EQ(llama_decode(f.ctx, b), 0);
  llama_batch_free(b);
  EXPECT_THROW(f.kv->verify(h), weft::Error) << "verify sees the ledger out of step";
  f.kv->roll_back(h);
  EXPECT_NO_THROW(f.kv->verify(h));
}

TEST(KvManager, SharedPrefixCountsOnceAndIsNotShifted) {
  Fixture f;
  std::mt19937 rng(2);
  const auto &m = weft_test::tiny();
  KvHandle a, b;
  ASSERT_TRUE(f.kv->acquire_slot(a));
  ASSERT_TRUE(f.kv->acquire_slot(b));
  const auto toks = random_tokens(rng, m, 40, true);
  f.decode(a, toks);
  f.kv->share_prefix(a, b, 25);
  EXPECT_EQ(f.kv->cells_used(), 40u) << "shared cells count once";
  f.kv->verify(b);
  // b continues on its own from the shared prefix: a fresh decode's logits.
  auto mine = std::vector(toks.begin(), toks.begin() + 25);
  const auto extra = random_tokens(rng, m, 6);
  mine.insert(mine.end(), extra.begin(), extra.end());
  EXPECT_LT(weft_test::nmse(f.decode(b, extra), weft_test::reference_logits(m, mine)), tol());
  EXPECT_EQ(f.kv->cells_used(), 46u);
  // Shifting a's cells would move b's view of them: refused, nothing changed.
  EXPECT_FALSE(f.kv->erase_shift(a, 2, 5));
  EXPECT_EQ(a.n(), 40u);
  // Past the shared prefix a shift is fine.
  EXPECT_TRUE(f.kv->erase_shift(a, 30, 35));
  EXPECT_EQ(a.n(), 35u);
  f.kv->verify(a);
  f.kv->release(a);
  EXPECT_EQ(f.kv->cells_used(), 31u) << "b keeps the shared cells";
  f.kv->verify(b);
}

TEST(KvManager, ParkRestoreAndImportRoundTrip) {
  Fixture f(2);
  std::mt19937 rng(3);
  const auto &m = weft_test::tiny();
  KvHandle a;
  ASSERT_TRUE(f.kv->acquire_slot(a));
  auto toks = random_tokens(rng, m, 33, true);
  f.decode(a, toks);
  const auto bytes = f.kv->export_kv(a);
  ASSERT_TRUE(f.kv->park(a, 1));
  EXPECT_EQ(a.where, weft::Residency::ram);
  EXPECT_FALSE(a.has_slot());
  EXPECT_EQ(f.kv->cells_used(), 0u);
  EXPECT_EQ(f.kv->slots_free(), 2u);
  EXPECT_EQ(f.kv->export_kv(a), bytes) << "a parked handle exports its blob";
  // Restored with a shorter history (rewound while parked): trimmed.
  ASSERT_EQ(f.kv->restore(a, std::span(toks).first(30), 1), KvManager::Restore::done);
  EXPECT_EQ(a.n(), 30u);
  f.kv->verify(a);
  const auto next = random_tokens(rng, m, 4);
  auto expect = std::vector(toks.begin(), toks.begin() + 30);
  expect.insert(expect.end(), next.begin(), next.end());
  EXPECT_LT(weft_test::nmse(f.decode(a, next), weft_test::reference_logits(m, expect)), tol());
  // Import: resident when there is room, and the same cache as before.
  KvHandle b;
  EXPECT_TRUE(f.kv->import_kv(b, std::vector(bytes), toks, 33, 0, 2));
  ASSERT_TRUE(b.has_slot());
  f.kv->verify(b);
  const auto more = random_tokens(rng, m, 3);
  toks.insert(toks.end(), more.begin(), more.end());
  EXPECT_LT(weft_test::nmse(f.decode(b, more), weft_test::reference_logits(m, toks)), tol());
  // Damaged data is refused whole, nothing held.
  KvHandle c;
  f.kv->release(a);
  const auto used = f.kv->cells_used();
  std::vector<std::uint8_t> junk(bytes.size() / 2, 0x5a);
  EXPECT_THROW(f.kv->import_kv(c, std::move(junk), std::span(toks).first(33), 33, 0, 3), weft::Error);
  EXPECT_FALSE(c.has_slot());
  EXPECT_EQ(f.kv->cells_used(), used);
  EXPECT_EQ(f.kv->slots_free(), 1u);
}

TEST(KvManager, ParkWithoutAnyTierIsRefusedAndChangesNothing) {
  Fixture f(2, /*ram=*/0, /*recompute=*/false);
  std::mt19937 rng(4);
  KvHandle a;
  ASSERT_TRUE(f.kv->acquire_slot(a));
  f.decode(a, random_tokens(rng, weft_test::tiny(), 10, true));
  EXPECT_FALSE(f.kv->spill_on());
  EXPECT_FALSE(f.kv->park(a, 1));
  EXPECT_TRUE(a.has_slot());
  EXPECT_EQ(a.n(), 10u);
  f.kv->verify(a);
}

// Prefix reuse: a sequence that never forked shares what another holds.
TEST(KvManager, ReuseSharesAnotherSequencesPrefixAndMatchesAFreshDecode) {
  Fixture f(4, 64ull << 20, false, /*prefix_cache=*/256);
  std::mt19937 rng(21);
  const auto &m = weft_test::tiny();
  const auto lore = random_tokens(rng, m, 40, true);
  KvHandle a, b;
  ASSERT_TRUE(f.kv->acquire_slot(a));
  f.decode(a, lore);
  EXPECT_EQ(a.exact, 40u);
  auto want = lore;
  const auto own = random_tokens(rng, m, 10);
  want.insert(want.end(), own.begin(), own.end());
  ASSERT_TRUE(f.kv->acquire_slot(b));
  // The last input token is never shared (its logits are needed).
  EXPECT_EQ(f.kv->reuse(b, want, static_cast<std::uint32_t>(want.size() - 1)), 40u);
  EXPECT_EQ(f.kv->cells_used(), 40u) << "shared, not copied";
  EXPECT_EQ(f.kv->cells_saved(), 40u);
  f.kv->verify(b);
  EXPECT_LT(weft_test::nmse(f.decode(b, own), weft_test::reference_logits(m, want)), tol());
  EXPECT_EQ(f.kv->counters().reused_tokens, 40u);
  // Less than one block in common: nothing to share (the index works in
  // blocks of 16), and a diverging first block finds nothing.
  KvHandle c;
  ASSERT_TRUE(f.kv->acquire_slot(c));
  auto other = random_tokens(rng, m, 30, true);
  std::copy(lore.begin(), lore.begin() + 10, other.begin());
  EXPECT_EQ(f.kv->reuse(c, other, 29), 0u);
  EXPECT_EQ(f.kv->counters().prefix_misses, 1u);
}

TEST(KvManager, LetGoCellsStayInThePrefixCacheAndGiveWayToRealWork) {
  Fixture f(2, 0, false, /*prefix_cache=*/512);
  std::mt19937 rng(22);
  const auto &m = weft_test::tiny();
  const auto lore = random_tokens(rng, m, 64, true);
  KvHandle a;
  ASSERT_TRUE(f.kv->acquire_slot(a));
  f.decode(a, lore);
  const auto capacity = f.kv->cells_free() + f.kv->cells_used();
  f.kv->release(a);  // disposed: the cells stay, reclaimable
  EXPECT_EQ(f.kv->cache_entries(), 1u);
  EXPECT_EQ(f.kv->cache_cells(), 64u);
  EXPECT_EQ(f.kv->cells_used(), 0u);
  EXPECT_EQ(f.kv->cells_free(), capacity);
  EXPECT_EQ(f.kv->slots_free(), 2u);
  // A later conversation with the same beginning takes them from the cache.
  KvHandle b;
  ASSERT_TRUE(f.kv->acquire_slot(b));
  auto want = lore;
  const auto own = random_tokens(rng, m, 5);
  want.insert(want.end(), own.begin(), own.end());
  EXPECT_EQ(f.kv->reuse(b, want, static_cast<std::uint32_t>(want.size() - 1)), 64u);
  EXPECT_EQ(f.kv->counters().prefix_cache_hits, 1u);
  EXPECT_LT(weft_test::nmse(f.decode(b, own), weft_test::reference_logits(m, want)), tol());
  // Both slots wanted: the cache entry is evicted, b's cells stay.
  KvHandle c;
  ASSERT_TRUE(f.kv->acquire_slot(c));
  EXPECT_EQ(f.kv->cache_entries(), 0u);
  EXPECT_EQ(f.kv->counters().prefix_evictions, 1u);
  EXPECT_EQ(f.kv->cells_used(), 69u);
  f.kv->verify(b);
  // A rewound tail is kept too (into a free slot) and serves a re-prompt.
  f.kv->release(c);
  f.kv->truncate(b, 20);
  EXPECT_EQ(f.kv->cache_entries(), 1u);
  EXPECT_EQ(f.kv->reuse(b, want, static_cast<std::uint32_t>(want.size() - 1)), want.size() - 1 - 20);
  f.kv->verify(b);
}

TEST(KvManager, AShiftEndsWhatASequenceMayShare) {
  Fixture f(3, 0, false, /*prefix_cache=*/256);
  std::mt19937 rng(23);
  const auto &m = weft_test::tiny();
  const auto toks = random_tokens(rng, m, 64, true);
  KvHandle a, b;
  ASSERT_TRUE(f.kv->acquire_slot(a));
  f.decode(a, toks);
  if (!f.kv->can_shift()) GTEST_SKIP() << "no shift on this cache";
  ASSERT_TRUE(f.kv->erase_shift(a, 20, 30));
  EXPECT_EQ(a.exact, 20u);
  ASSERT_TRUE(f.kv->acquire_slot(b));
  std::vector<weft::Token> want(toks.begin(), toks.begin() + 20);
  want.insert(want.end(), toks.begin() + 30, toks.end());
  EXPECT_EQ(f.kv->reuse(b, want, static_cast<std::uint32_t>(want.size() - 1)), 20u) << "up to the shift";
  // The released, shifted one is cached only as far as it is exact.
  f.kv->release(b);
  f.kv->release(a);
  EXPECT_LE(f.kv->cache_cells(), 20u);
}
