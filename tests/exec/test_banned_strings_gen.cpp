// SamplerParams::banned_strings through a conversation: a greedy generation
// equals, token for token, the argmax of the conversation's own logits() with
// every token that would complete a string masked by a brute-force search of
// the text generated so far; the text never holds a string; a second
// generation on the conversation's own sampler starts its text afresh; a save
// mid-generation (state version 12) loads and continues as the unsaved
// original does; bad strings are refused when set.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "core/sampling_helpers.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"

namespace {

using weft::Token;
using weft_test::random_tokens;
using weft_test::run_until_idle;

weft::ExecutorParams params() { return {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 4, .n_threads = 2}; }

// The best token of `l` whose piece completes no string after `text`.
Token checked_argmax(const weft::Model &m, const std::vector<float> &l, const std::string &text,
                     const std::vector<std::string> &bans) {
  Token best = -1;
  for (Token t = 0; t < m.n_vocab(); ++t) {
    const float v = l[static_cast<std::size_t>(t)];
    const bool better = best < 0 || v > l[static_cast<std::size_t>(best)];
    if (better && !weft_test::sampling::completes_banned(text, m.token_piece(t), bans)) best = t;
  }
  return best;
}

// Greedy steps by hand: each token the checked argmax of the logits, prompted back.
std::vector<Token> by_hand(const weft::Model &m, weft::Executor &ex, weft::Conversation &c, int n,
                           const std::vector<std::string> &bans) {
  std::vector<Token> out;
  std::string text;
  for (int i = 0; i < n; ++i) {
    const Token t = checked_argmax(m, c.logits(), text, bans);
    out.push_back(t);
    text += m.token_piece(t);
    c.prompt(std::vector<Token>{t});
    run_until_idle(ex);
  }
  return out;
}

// Strings from an unbanned greedy reply: 2-3 bytes across a token boundary
// and one inside a token, so that they bite.
std::vector<std::string> bans_from(const weft::Model &m, const std::vector<Token> &reply, std::mt19937 &rng) {
  std::vector<std::string> bans;
  for (std::size_t i = 1; i < reply.size() && bans.size() < 3; i += 1 + rng() % 4) {
    const std::string a = m.token_piece(reply[i - 1]), b = m.token_piece(reply[i]);
    if (a.empty() || b.empty()) continue;
    bans.push_back(a.substr(a.size() - 1) + b.substr(0, 1 + rng() % std::min<std::size_t>(2, b.size())));
  }
  for (const Token t : reply) {
    if (const std::string p = m.token_piece(t); p.size() >= 3) {
      bans.push_back(p.substr(1, 2));
      break;
    }
  }
  return bans;
}

}  // namespace

TEST(BannedStringsGeneration, GreedyIsTheCheckedArgmaxAndTheTextHoldsNoString) {
  const auto &m = weft_test::tiny();
  constexpr int kSteps = 20;
  int changed = 0;
  for (unsigned seed = 1; seed <= 5; ++seed) {
    std::mt19937 rng(seed);
    const auto prompt = random_tokens(rng, m, 4 + static_cast<int>(rng() % 6), true);
    weft::Executor ex(m, params());
    auto free = ex.create();
    free.prompt(prompt);
    auto fg = free.generate({.max_tokens = kSteps, .ignore_eos = true});
    run_until_idle(ex);
    const auto unbanned = fg.result();
    const auto bans = bans_from(m, unbanned.tokens, rng);
    ASSERT_FALSE(bans.empty());

    auto hand = ex.create();
    hand.prompt(prompt);
    run_until_idle(ex);
    const auto want = by_hand(m, ex, hand, kSteps, bans);

    auto c = ex.create();
    c.prompt(prompt);
    auto g = c.generate({.max_tokens = kSteps, .sampler = weft::SamplerParams{.banned_strings = bans},
                         .ignore_eos = true});
    run_until_idle(ex);
    const auto r = g.result();
    EXPECT_EQ(r.tokens, want) << "seed " << seed;
    for (const auto &b : bans) EXPECT_EQ(r.text.find(b), std::string::npos) << "'" << b << "' in '" << r.text << "'";
    changed += r.tokens != unbanned.tokens;
  }
  EXPECT_GE(changed, 4) << "the strings change the replies";
}

// The conversation's own sampler across two generations: each starts its
// text afresh, so the second equals the checked argmax from an empty text,
// also where a string spans the two replies (the last byte of the first and
// the first of the second, added to the bans until the replies keep it).
TEST(BannedStringsGeneration, EachGenerationStartsItsTextAfresh) {
  const auto &m = weft_test::tiny();
  int spanning = 0;
  for (unsigned seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed + 10);
    const auto prompt = random_tokens(rng, m, 6, true);
    weft::Executor ex(m, params());
    auto free = ex.create();
    free.prompt(prompt);
    auto fg = free.generate({.max_tokens = 24, .ignore_eos = true});
    run_until_idle(ex);
    auto bans = bans_from(m, fg.result().tokens, rng);

    std::vector<Token> first, second;
    bool spans = false;
    for (int round = 0; round < 4 && !spans; ++round) {
      auto hand = ex.create();
      hand.prompt(prompt);
      run_until_idle(ex);
      first = by_hand(m, ex, hand, 8, bans);
      second = by_hand(m, ex, hand, 8, bans);  // its own text, from empty
      std::string t1;
      for (const Token t : first) t1 += m.token_piece(t);
      const std::string p = m.token_piece(second[0]);
      if (t1.empty() || p.empty()) break;
      const std::string across = t1.substr(t1.size() - 1) + p.substr(0, 1);
      spans = std::find(bans.begin(), bans.end(), across) != bans.end();
      if (!spans) bans.push_back(across);
    }
    spanning += spans;

    auto c = ex.create();
    c.set_sampler({.banned_strings = bans});
    c.prompt(prompt);
    auto g1 = c.generate({.max_tokens = 8, .ignore_eos = true});
    run_until_idle(ex);
    auto g2 = c.generate({.max_tokens = 8, .ignore_eos = true});
    run_until_idle(ex);
    EXPECT_EQ(g1.result().tokens, first) << "seed " << seed;
    EXPECT_EQ(g2.result().tokens, second) << "seed " << seed;
  }
  EXPECT_GE(spanning, 2) << "replies joined by a banned string";
}

// At a temperature, saved mid-generation and loaded on a second executor:
// the continuation equals the unsaved original's, and holds no string.
TEST(BannedStringsGeneration, SaveAndLoadMidGenerationKeepTheText) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 4; ++seed) {
    for (const bool own : {true, false}) {
      std::mt19937 rng(seed);
      const auto prompt = random_tokens(rng, m, 6, true);
      weft::SamplerParams sp{.temperature = 1.0f, .top_k = 8, .seed = seed};
      std::vector<std::string> bans;
      {
        weft::Executor ex(m, params());
        auto free = ex.create();
        free.prompt(prompt);
        auto fg = free.generate({.max_tokens = 32, .sampler = sp, .ignore_eos = true});
        run_until_idle(ex);
        bans = bans_from(m, fg.result().tokens, rng);
      }
      sp.banned_strings = bans;
      weft::Executor a(m, params());
      auto c = a.create();
      c.prompt(prompt);
      weft::GenerateParams gp{.max_tokens = 32, .ignore_eos = true};
      if (own) {
        c.set_sampler(sp);
      } else {
        gp.sampler = sp;
      }
      auto g = c.generate(gp);
      const auto run = weft_test::save_mid_generation(a, c, g, 6, params());
      ASSERT_TRUE(run.ok);
      EXPECT_EQ(run.version, 12) << "a sampler with banned_strings is state version 12 (docs/STATE_FORMAT.md)";
      EXPECT_EQ(run.loaded.tokens, run.original.tokens) << "seed " << seed << (own ? " own sampler" : " generation's");
      for (const auto &b : bans) EXPECT_EQ(run.loaded.text.find(b), std::string::npos) << b;
    }
  }
}

TEST(BannedStringsGeneration, BadStringsAreRefusedWhenSet) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt(std::vector<Token>{1, 2, 3});
  const std::string why = "SamplerParams.banned_strings[0] is 0 bytes; each must hold 1 to 256";
  EXPECT_TRUE(weft_test::throws_weft([&] { c.set_sampler({.banned_strings = {""}}); }, weft::Errc::invalid_argument,
                                     why));
  EXPECT_TRUE(weft_test::throws_weft(
      [&] { (void)c.generate({.sampler = weft::SamplerParams{.banned_strings = {""}}}); },
      weft::Errc::invalid_argument, why));
  EXPECT_FALSE(c.generation().has_value());
}
