// History compaction: Conversation::compact leaves logits equal to a fresh
// decode of the new history, over seeded random histories, keeps and
// budgets; summarize_and_compact does it with the model's own summary.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"
#include "weft/compaction.hpp"
#include "weft/memory.hpp"

namespace {

using weft_test::nmse;

weft::ExecutorParams small_params(std::uint32_t slots = 4) {
  weft::ExecutorParams p;
  p.n_ctx = 1024;
  p.n_batch = 64;
  p.n_seq_max = slots;
  p.n_threads = 2;
  return p;
}

TEST(Compaction, LogitsEqualAFreshDecodeOfTheNewHistory) {
  const auto &m = weft_test::tiny();
  const double tol = weft_test::logits_tolerance(m);
  double worst = 0;
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(m, small_params());
    auto conv = ex.create();
    auto other = ex.create();  // shares the cache and the batches
    const auto first = weft_test::random_tokens(rng, m, 20 + static_cast<int>(rng() % 60), true);
    conv.prompt(first);
    other.prompt(weft_test::random_tokens(rng, m, 30, true));
    // Some decoded, maybe some still queued.
    for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) ex.step({.max_tokens = 1 + std::uint32_t(rng() % 32)});
    if (rng() % 2) conv.prompt(weft_test::random_tokens(rng, m, 1 + static_cast<int>(rng() % 10)));
    const auto before = conv.tokens();
    const auto total = static_cast<std::uint32_t>(before.size());
    weft::CompactParams cp;
    cp.keep_first = static_cast<std::uint32_t>(rng() % (total / 2));
    cp.keep_last = static_cast<std::uint32_t>(rng() % (total - cp.keep_first));
    if (rng() % 3) cp.summary = "Earlier: the smith sold a sword and the player owes nine gold.\n";
    conv.compact(cp);
    std::vector<weft::Token> want(before.begin(), before.begin() + cp.keep_first);
    const auto summary = m.tokenize(cp.summary);
    want.insert(want.end(), summary.begin(), summary.end());
    want.insert(want.end(), before.end() - cp.keep_last, before.end());
    ASSERT_EQ(conv.tokens(), want) << "seed " << seed;
    if (want.empty()) continue;
    weft_test::run_until_idle(ex, &rng, 48);
    ASSERT_TRUE(conv.has_logits());
    const double d = nmse(conv.logits(), weft_test::reference_logits(m, want));
    worst = std::max(worst, d);
    EXPECT_LE(d, tol) << "seed " << seed << " keep " << cp.keep_first << "/" << cp.keep_last;
  }
  std::printf("compaction: worst nmse %.3g, tolerance %.3g\n", worst, tol);
}

TEST(Compaction, RefusesWhatItCannotKeepAndLeavesTheConversationAlone) {
  using weft::Errc;
  std::mt19937 rng(2);
  weft::Executor ex(weft_test::tiny(), small_params());
  auto conv = ex.create();
  conv.prompt(weft_test::random_tokens(rng, weft_test::tiny(), 30, true));
  weft_test::run_until_idle(ex);
  const auto before = conv.tokens();
  EXPECT_TRUE(weft_test::throws_weft([&] { conv.compact({.keep_first = 20, .keep_last = 11}); }, Errc::out_of_range,
                                     "keep_first 20 + keep_last 11 exceed its 30 tokens"));
  std::string huge;
  for (int i = 0; i < 1100; ++i) huge += " gold";
  EXPECT_TRUE(weft_test::throws_weft([&] { conv.compact({.keep_first = 10, .keep_last = 10, .summary = huge}); },
                                     Errc::out_of_range, "exceeds n_ctx"));
  EXPECT_EQ(conv.tokens(), before);
  EXPECT_TRUE(conv.has_logits());
  // summarize_and_compact refuses the same before it forks.
  EXPECT_TRUE(weft_test::throws_weft([&] { weft::summarize_and_compact(ex, conv, {.keep_first = 20, .keep_last = 11}); },
                                     Errc::out_of_range, "keep_first 20 + keep_last 11"));
  EXPECT_EQ(ex.stats().conversations, 1u) << "no fork left behind";
}

// The NPC's own model writes the summary on a fork; the conversation is
// compacted with it, the fork is gone, the memory keeps the line, and the
// logits equal a fresh decode of the new history.
TEST(Compaction, SummarizeAndCompactUsesTheModelsOwnLine) {
  const auto &m = weft_test::tiny();
  auto p = small_params();
  p.embedder = weft::EmbedderParams{.n_ctx = 128};
  weft::Executor ex(m, p);
  std::mt19937 rng(4);
  auto conv = ex.create();
  conv.prompt(weft_test::random_tokens(rng, m, 80, true));
  weft_test::run_until_idle(ex);
  const auto before = conv.tokens();
  weft::Memory mem;
  std::optional<weft::SummaryResult> done;
  auto g = weft::summarize_and_compact(ex, conv,
                                       {.keep_first = 8, .keep_last = 24, .max_tokens = 10, .memory = mem,
                                        .on_done = [&](const weft::SummaryResult &r) { done = r; }});
  EXPECT_EQ(ex.stats().conversations, 2u) << "the fork writes the summary";
  weft_test::run_until_idle(ex);
  ASSERT_TRUE(g.done());
  ASSERT_TRUE(done);
  ASSERT_FALSE(done->error) << done->error->what();
  EXPECT_TRUE(done->compacted);
  EXPECT_FALSE(done->summary.empty());
  EXPECT_EQ(done->summary.find('\n'), std::string::npos);
  EXPECT_EQ(ex.stats().conversations, 1u) << "the fork is disposed";
  std::vector<weft::Token> want(before.begin(), before.begin() + 8);
  const auto s = m.tokenize("Earlier: " + done->summary + "\n");
  want.insert(want.end(), s.begin(), s.end());
  want.insert(want.end(), before.end() - 24, before.end());
  EXPECT_EQ(conv.tokens(), want);
  ASSERT_TRUE(conv.has_logits());
  EXPECT_LE(nmse(conv.logits(), weft_test::reference_logits(m, want)), weft_test::logits_tolerance(m));
  // The summary's line is a memory too.
  ASSERT_NE(done->memory_id, 0u);
  for (int i = 0; i < 100 && mem.pending() > 0; ++i) ex.step();
  EXPECT_EQ(mem.get(done->memory_id)->text, done->summary);
  EXPECT_EQ(mem.get(done->memory_id)->metadata, "summary");
  EXPECT_FALSE(mem.get(done->memory_id)->vector.empty());
}

// A conversation generating when its summary arrives is not cut: the summary
// comes back for later.
TEST(Compaction, AReplyInProgressIsNotCut) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, small_params());
  std::mt19937 rng(6);
  auto conv = ex.create();
  conv.prompt(weft_test::random_tokens(rng, m, 60, true));
  weft_test::run_until_idle(ex);
  std::optional<weft::SummaryResult> done;
  weft::summarize_and_compact(ex, conv, {.keep_last = 16, .max_tokens = 6,
                                         .on_done = [&](const weft::SummaryResult &r) { done = r; }});
  auto reply = conv.generate({.max_tokens = 400, .ignore_eos = true});
  for (int i = 0; i < 200 && !done; ++i) ex.step();
  ASSERT_TRUE(done);
  EXPECT_FALSE(done->compacted);
  EXPECT_FALSE(done->error);
  EXPECT_FALSE(reply.done()) << "the reply goes on";
  reply.cancel();
}

}  // namespace
