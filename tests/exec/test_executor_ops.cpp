// Dispose, remove/shift, the KV ledger against llama.cpp, pressure policies,
// stats, and invariant 8: bad input is refused, not fatal.
#include <gtest/gtest.h>

#include <random>

#include "exec/test_access.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"

using weft_test::random_tokens;
using weft_test::run_until_idle;
using weft_test::reference_logits;
using weft_test::throws_weft;

namespace {


weft::ExecutorParams params(std::uint32_t n_ctx = 1024, std::uint32_t n_seq_max = 4) {
  return {.n_ctx = n_ctx, .n_batch = 64, .n_seq_max = n_seq_max, .n_threads = 2};
}

void expect_logits_of(const weft::Conversation &c, const std::vector<weft::Token> &history) {
  const auto &m = weft_test::tiny();
  ASSERT_TRUE(c.has_logits());
  ASSERT_EQ(c.tokens(), history);
  EXPECT_LT(weft_test::nmse(c.logits(), reference_logits(m, history)), weft_test::logits_tolerance(m));
}

// A raw llama_decode of one token into a sequence nobody uses: does the
// cache accept one more cell?
int probe_one_more(weft::Executor &ex, llama_seq_id seq) {
  auto *ctx = weft::detail::TestAccess::core(ex).ctx;
  llama_batch b = llama_batch_init(1, 0, 1);
  b.n_tokens = 1;
  b.token[0] = 100;
  b.pos[0] = 0;
  b.n_seq_id[0] = 1;
  b.seq_id[0][0] = seq;
  b.logits[0] = 1;
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  if (rc == 0) llama_memory_seq_rm(llama_get_memory(ctx), seq, -1, -1);
  return rc;
}

}  // namespace

TEST(ExecutorOps, DisposedSlotReuseSeesNothing) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(1);
  weft::Executor ex(m, params(1024, 1));  // one slot: reuse is certain
  auto a = ex.create();
  a.prompt(random_tokens(rng, m, 40, true));
  run_until_idle(ex);
  a.prompt(random_tokens(rng, m, 30));  // queued, then dropped
  a.dispose();
  EXPECT_TRUE(a.disposed());
  EXPECT_EQ(ex.stats().cells_used, 0u);
  EXPECT_EQ(ex.stats().queued_tokens, 0u);
  auto b = ex.create();
  const auto x = random_tokens(rng, m, 25, true);
  b.prompt(x);
  const auto before = ex.stats().tokens_decoded;
  run_until_idle(ex);
  EXPECT_EQ(ex.stats().tokens_decoded - before, x.size());  // the dropped input was never decoded
  expect_logits_of(b, x);
  a.dispose();  // idempotent
}

TEST(ExecutorOps, LastHandleDisposes) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  {
    auto c = ex.create();
    c.prompt("A conversation nobody keeps.", {.add_bos = true});
    run_until_idle(ex);
    EXPECT_GT(ex.stats().cells_used, 0u);
    auto copy = c;  // handles share one conversation
    c = {};
    EXPECT_FALSE(copy.disposed());
  }
  EXPECT_EQ(ex.stats().conversations, 0u);
  EXPECT_EQ(ex.stats().cells_used, 0u);
}

TEST(ExecutorOps, LedgerMatchesWhatLlamaAccepts) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(2);
  weft::Executor ex(m, params(512, 4));
  const std::uint32_t n_ctx = ex.stats().n_ctx;
  ASSERT_EQ(ex.cells_free(), n_ctx);
  auto a = ex.create();
  a.prompt(random_tokens(rng, m, 100, true));
  run_until_idle(ex);
  auto b = a.fork();  // shares 100 cells
  b.prompt(random_tokens(rng, m, 50));
  run_until_idle(ex);
  EXPECT_EQ(ex.cells_free(), n_ctx - 150);
  EXPECT_EQ(a.n_cells(), 100u);
  EXPECT_EQ(b.n_cells(), 150u);
  // Fill exactly what the ledger says is free: llama.cpp must take all of it...
  auto c = ex.create();
  c.prompt(random_tokens(rng, m, static_cast<int>(ex.cells_free()), true));
  run_until_idle(ex);
  EXPECT_EQ(c.n_queued(), 0u);
  EXPECT_EQ(ex.cells_free(), 0u);
  EXPECT_EQ(ex.stats().decode_failures, 0u);
  // ...and not one cell more.
  EXPECT_EQ(probe_one_more(ex, 3), 1);
  // Rewinding the fork frees only its own cells, not the shared prefix.
  b.rewind(60);
  EXPECT_EQ(ex.cells_free(), 50u);  // 10 of the 60 were shared with a: still held
  run_until_idle(ex);               // b re-decodes its last token for logits
  EXPECT_EQ(ex.cells_free(), 49u);
  EXPECT_EQ(probe_one_more(ex, 3), 0);
}

// A shift's result does not depend on who shares the cells: a forked
// conversation's remove() gives what the same remove() gives one that
// shares nothing (another executor, prefix reuse off); the fork keeps its own.
TEST(ExecutorOps, RemoveWithSharedTailShiftsAsAloneWould) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(3);
  weft::Executor ex(m, params());
  auto lone_params = params();
  lone_params.prefix_cache_cells = 0;
  weft::Executor lone_ex(m, lone_params);
  auto a = ex.create();
  auto lone = lone_ex.create();
  const auto h = random_tokens(rng, m, 40, true);
  a.prompt(h);
  lone.prompt(h);
  run_until_idle(ex);
  run_until_idle(lone_ex);
  auto b = a.fork();  // every cell of a is now shared: a shift would move b's too
  const auto cells_before = ex.stats().cells_used;
  a.remove(5, 15);
  lone.remove(5, 15);
  auto expect = h;
  expect.erase(expect.begin() + 5, expect.begin() + 15);
  EXPECT_EQ(a.tokens(), expect);
  run_until_idle(ex);
  run_until_idle(lone_ex);
  // One more token each: its logits read the shifted cache.
  const auto next = random_tokens(rng, m, 1);
  a.prompt(next);
  lone.prompt(next);
  expect.push_back(next[0]);
  run_until_idle(ex);
  run_until_idle(lone_ex);
  ASSERT_TRUE(a.has_logits() && lone.has_logits());
  EXPECT_EQ(a.tokens(), lone.tokens());
  EXPECT_LT(weft_test::nmse(a.logits(), lone.logits()), weft_test::logits_tolerance(m)) << "shifted, as alone";
  EXPECT_GT(weft_test::nmse(a.logits(), reference_logits(m, expect)), weft_test::logits_tolerance(m))
      << "a shift, not a fresh decode";
  // a's moved positions [15, 40) are copies now; its first 5 stay shared.
  EXPECT_EQ(ex.stats().cells_used, cells_before + (40 - 15) + 1);
  expect_logits_of(b, h);  // the fork is untouched
}

TEST(ExecutorOps, ShiftLeftMovesPositionsAndFreesCells) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(4);
  weft::Executor ex(m, params());
  ASSERT_TRUE(weft::detail::TestAccess::core(ex).kv->can_shift());
  auto a = ex.create();
  const auto h = random_tokens(rng, m, 60, true);
  a.prompt(h);
  run_until_idle(ex);
  const auto logits_before = a.logits();
  a.shift_left(4, 20);
  auto expect = h;
  expect.erase(expect.begin() + 4, expect.begin() + 24);
  EXPECT_EQ(a.tokens(), expect);
  EXPECT_EQ(ex.stats().cells_used, 40u);
  // The cache itself agrees: positions 0..39, no re-decode needed.
  auto *mem = llama_get_memory(weft::detail::TestAccess::core(ex).ctx);
  const llama_seq_id seq = weft::detail::TestAccess::core(ex).convs.all.begin()->second->kv.seq;
  EXPECT_EQ(llama_memory_seq_pos_min(mem, seq), 0);
  EXPECT_EQ(llama_memory_seq_pos_max(mem, seq), 39);
  EXPECT_TRUE(a.has_logits());
  EXPECT_EQ(a.logits(), logits_before);  // the last token stayed; its logits too
  EXPECT_EQ(ex.step().tokens_decoded, 0u);
  // Generation goes on at the shifted positions.
  auto g = a.generate({.max_tokens = 3});
  run_until_idle(ex);
  EXPECT_EQ(g.reason(), weft::FinishReason::max_tokens);
  EXPECT_EQ(a.n_decoded(), 43u);
  EXPECT_EQ(llama_memory_seq_pos_max(mem, seq), 42);
}

// Pressure policies apply to what parking cannot solve: these run with no
// parking tier, so the policy itself is exercised.
weft::ExecutorParams no_spill(weft::ExecutorParams p) {
  p.spill = {.ram_bytes = 0, .recompute = false};
  return p;
}

TEST(ExecutorOps, PressureWaitThenProceeds) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(5);
  weft::Executor ex(m, no_spill(params(256, 4)));
  const auto n_ctx = ex.stats().n_ctx;
  auto big = ex.create();
  big.prompt(random_tokens(rng, m, static_cast<int>(n_ctx) - 10, true));
  run_until_idle(ex);
  auto waiting = ex.create();
  const auto x = random_tokens(rng, m, 30, true);
  waiting.prompt(x);  // fits the context, not the free cells
  // The policy "wait" holds a prompt that cannot finish in the free cells
  // back whole (it would otherwise take the last cells from everyone else).
  const auto r = ex.step();
  EXPECT_EQ(r.blocked, 1u);
  EXPECT_TRUE(r.idle) << "nothing can change until the caller frees room";
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.tokens_decoded, 0u);
  EXPECT_EQ(waiting.n_queued(), 30u);
  big.dispose();
  run_until_idle(ex);
  expect_logits_of(waiting, x);
}

TEST(ExecutorOps, PressureFailRefusesUpFront) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(6);
  auto p = no_spill(params(256, 4));
  p.pressure = weft::PressurePolicy::fail;
  weft::Executor ex(m, p);
  const auto n_ctx = ex.stats().n_ctx;
  auto big = ex.create();
  big.prompt(random_tokens(rng, m, static_cast<int>(n_ctx) - 10, true));
  auto other = ex.create();
  EXPECT_TRUE(throws_weft([&] { other.prompt(random_tokens(rng, m, 30)); }, weft::Errc::out_of_range,
                          "KV cells free"));
  EXPECT_EQ(other.n_queued(), 0u);
  other.prompt(random_tokens(rng, m, 10));  // exactly what is left
  run_until_idle(ex);
  EXPECT_EQ(ex.cells_free(), 0u);
}

TEST(ExecutorOps, PressureCallbackCanFreeRoom) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(7);
  std::vector<weft::Conversation> victims;
  int calls = 0;
  auto p = no_spill(params(256, 4));
  p.pressure = weft::PressurePolicy::callback;
  p.on_pressure = [&](const weft::PressureInfo &info) {
    ++calls;
    EXPECT_GT(info.needed_cells, info.free_cells);
    // "Compress history and continue": shift the big one's middle out.
    victims.front().shift_left(1, 100);
  };
  weft::Executor ex(m, p);
  const auto n_ctx = ex.stats().n_ctx;
  victims.push_back(ex.create());
  victims.front().prompt(random_tokens(rng, m, static_cast<int>(n_ctx) - 5, true));
  run_until_idle(ex);
  auto late = ex.create();
  const auto x = random_tokens(rng, m, 40, true);
  late.prompt(x);
  const auto r = ex.step();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.tokens_decoded, 40u);  // room made in the same step
  expect_logits_of(late, x);
}

TEST(ExecutorOps, StatsCountWhatHappened) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto a = ex.create();
  auto b = ex.create();
  a.prompt(std::vector<weft::Token>(30, 300));
  b.prompt(std::vector<weft::Token>(20, 301));
  auto s = ex.stats();
  EXPECT_EQ(s.conversations, 2u);
  EXPECT_EQ(s.queued_tokens, 50u);
  EXPECT_EQ(s.cells_used, 0u);
  run_until_idle(ex);
  s = ex.stats();
  EXPECT_EQ(s.tokens_decoded, 50u);
  EXPECT_EQ(s.cells_used, 50u);
  EXPECT_EQ(s.cells_free, s.n_ctx - 50);
  EXPECT_EQ(s.slots_used, 2u);
  EXPECT_GT(s.step_ms_p50, 0.0);
  EXPECT_GE(s.step_ms_p99, s.step_ms_p50);
  auto g = a.generate({.max_tokens = 5});
  run_until_idle(ex);
  EXPECT_EQ(ex.stats().tokens_sampled, 5u);
}

// Invariant 8: every bad input is a typed error naming the value and the
// limit; the executor and a bystander conversation carry on unharmed.
TEST(ExecutorOps, BadInputIsRefusedNotFatal) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(8);
  using weft::Errc;
  EXPECT_TRUE(throws_weft([&] { weft::Executor(m, {.n_batch = 4, .n_seq_max = 8}); }, Errc::invalid_argument,
                          "n_batch = 4"));
  EXPECT_TRUE(throws_weft([&] { weft::Executor(m, {.n_seq_max = 0}); }, Errc::invalid_argument, "n_seq_max = 0"));
  EXPECT_TRUE(throws_weft([&] { weft::Executor(m, {.n_seq_max = 100000}); }, Errc::invalid_argument, "100000"));
  EXPECT_TRUE(throws_weft([&] { weft::Executor(m, {.n_ctx = 8}); }, Errc::invalid_argument, "n_ctx = 8"));
  EXPECT_TRUE(throws_weft([&] { weft::Executor(m, {.n_ctx = 1u << 30}); }, Errc::invalid_argument, "n_ctx"));
  EXPECT_TRUE(throws_weft([&] { weft::Executor(m, {.n_batch = 64, .n_ubatch = 128}); }, Errc::invalid_argument,
                          "n_ubatch = 128"));
  EXPECT_TRUE(throws_weft([&] { weft::Executor(m, {.kv_type = weft::KvType::q8_0, .flash_attn = weft::FlashAttention::disabled}); },
                          Errc::invalid_argument, "q8_0"));
  EXPECT_TRUE(throws_weft([&] { weft::Executor(m, {.pressure = weft::PressurePolicy::callback}); },
                          Errc::invalid_argument, "on_pressure"));

  weft::Executor ex(m, params(512, 4));
  const auto n_ctx = ex.stats().n_ctx;
  auto bystander = ex.create();
  const auto bh = random_tokens(rng, m, 20, true);
  bystander.prompt(bh);
  auto c = ex.create();
  // max_tokens = 0 means n_batch (tests/test_refusals.cpp), not an error.
  EXPECT_TRUE(throws_weft([&] { ex.step({.max_tokens = 65}); }, Errc::invalid_argument, "n_batch = 64"));
  const std::vector<weft::Token> bad{5, -1};
  EXPECT_TRUE(throws_weft([&] { c.prompt(bad); }, Errc::out_of_range, "token id -1"));
  const std::vector<weft::Token> big_id{m.n_vocab()};
  EXPECT_TRUE(throws_weft([&] { c.prompt(big_id); }, Errc::out_of_range, "[0, 32000)"));
  EXPECT_TRUE(throws_weft([&] { c.prompt(std::vector<weft::Token>{}); }, Errc::invalid_argument, "empty prompt"));
  EXPECT_TRUE(throws_weft([&] { c.prompt(""); }, Errc::invalid_argument, "no tokens"));
  EXPECT_TRUE(throws_weft([&] { c.prompt(std::vector<weft::Token>(n_ctx + 1, 7)); }, Errc::out_of_range,
                          "exceed n_ctx = " + std::to_string(n_ctx)));
  EXPECT_EQ(c.n_queued(), 0u);  // nothing half-queued
  EXPECT_TRUE(throws_weft([&] { c.generate(); }, Errc::invalid_argument, "empty"));
  EXPECT_TRUE(throws_weft([&] { c.logits(); }, Errc::invalid_argument, "no logits"));
  c.prompt(random_tokens(rng, m, 10, true));
  EXPECT_TRUE(throws_weft([&] { c.rewind(11); }, Errc::out_of_range, "cannot rewind 11 tokens, it has 10"));
  EXPECT_TRUE(throws_weft([&] { c.remove(0, 1); }, Errc::out_of_range, "[0, 1)"));  // nothing decoded yet
  run_until_idle(ex);
  EXPECT_TRUE(throws_weft([&] { c.remove(5, 3); }, Errc::out_of_range, "[5, 3)"));
  EXPECT_TRUE(throws_weft([&] { c.shift_left(4, 7); }, Errc::out_of_range, "[4, 11)"));
  EXPECT_TRUE(throws_weft([&] { c.shift_left(1, UINT32_MAX); }, Errc::out_of_range, "overflows"));
  EXPECT_TRUE(throws_weft([&] { c.generate({.max_tokens = 0}); }, Errc::invalid_argument, "max_tokens = 0"));
  EXPECT_TRUE(throws_weft([&] { c.generate({.stop = {""}}); }, Errc::invalid_argument));
  EXPECT_TRUE(throws_weft([&] { c.generate({.sampler = weft::SamplerParams{.top_p = 2}}); }, Errc::invalid_argument,
                          "top_p"));
  EXPECT_TRUE(throws_weft([&] { c.generate({.sampler = weft::SamplerParams{.grammar = "root ::= ("}}); },
                          Errc::invalid_argument));
  EXPECT_TRUE(throws_weft([&] { c.set_sampler({.temperature = -1}); }, Errc::invalid_argument, "temperature"));
  auto g = c.generate({.max_tokens = 4});
  EXPECT_TRUE(throws_weft([&] { c.generate(); }, Errc::invalid_argument, "already generating"));
  EXPECT_TRUE(throws_weft([&] { c.prompt("more"); }, Errc::invalid_argument, "is generating"));
  EXPECT_TRUE(throws_weft([&] { c.sample(); }, Errc::invalid_argument));
  c.dispose();
  EXPECT_EQ(g.reason(), weft::FinishReason::cancelled);
  EXPECT_TRUE(throws_weft([&] { c.prompt("x"); }, Errc::disposed, "was disposed"));
  EXPECT_TRUE(throws_weft([&] { c.fork(); }, Errc::disposed));
  EXPECT_TRUE(throws_weft([&] { c.rewind(1); }, Errc::disposed));
  EXPECT_TRUE(throws_weft([&] { c.tokens(); }, Errc::disposed));
  weft::Conversation empty;
  EXPECT_TRUE(throws_weft([&] { empty.prompt("x"); }, Errc::disposed, "empty Conversation handle"));
  EXPECT_TRUE(empty.disposed());

  // All of that left the executor and the bystander unharmed.
  run_until_idle(ex);
  expect_logits_of(bystander, bh);
  EXPECT_EQ(ex.stats().cells_used, bh.size());
}

TEST(ExecutorOps, ConversationsOutliveTheirExecutorSafely) {
  const auto &m = weft_test::tiny();
  weft::Conversation c;
  weft::Generation g;
  {
    weft::Executor ex(m, params());
    c = ex.create();
    c.prompt("Hello", {.add_bos = true});
    g = c.generate({.max_tokens = 3});
  }
  EXPECT_TRUE(c.disposed());
  EXPECT_EQ(g.reason(), weft::FinishReason::cancelled);
  EXPECT_TRUE(throws_weft([&] { c.prompt("x"); }, weft::Errc::disposed, "executor was destroyed"));
}
