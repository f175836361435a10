// SamplerParams::banned_strings in the Sampler: on every path (the argmax,
// the top-k selection, the full chain, a grammar) a sampler with banned
// strings picks what a twin without them picks when the twin's pick is
// checked by a brute-force search of the text and, if it completes a string,
// drawn again over the vocabulary with every such token masked; the text
// never contains a string; start_text() forgets the text before; state(),
// restore() and clone() continue identically; the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "core/sampling.hpp"
#include "core/sampling_helpers.hpp"

using weft::Errc, weft::SamplerParams, weft::Token, weft::detail::Sampler, weft_test::throws_weft;
using namespace weft_test::sampling;

namespace {

std::string piece(Token t) { return model().token_piece(t); }

std::vector<float> brute_mask(std::vector<float> l, const std::string &text, const std::vector<std::string> &bans) {
  for (std::size_t t = 0; t < l.size(); ++t) {
    if (completes_banned(text, piece(static_cast<Token>(t)), bans)) l[t] = -INFINITY;
  }
  return l;
}

// The reference: `twin` (no bans) picks; a pick that completes a string is
// drawn again from the same state over the masked logits.
Token reference_pick(Sampler &twin, const std::vector<float> &l, const std::string &text,
                     const std::vector<std::string> &bans) {
  Sampler before = twin.clone();
  const Token t = twin.sample(l);
  if (!completes_banned(text, piece(t), bans)) return t;
  twin = std::move(before);
  return twin.sample(brute_mask(l, text, bans));
}

// Tokens whose pieces are 2+ printable ASCII bytes.
std::vector<Token> printable_pool(std::mt19937 &rng, std::size_t n) {
  std::vector<Token> out;
  std::uniform_int_distribution<Token> tok(0, static_cast<Token>(n_vocab()) - 1);
  while (out.size() < n) {
    const Token t = tok(rng);
    const std::string p = piece(t);
    if (p.size() >= 2 && std::all_of(p.begin(), p.end(), [](char c) { return c > ' ' && c < 127; })) out.push_back(t);
  }
  return out;
}

// Strings that span two pool tokens (a suffix of one, a prefix of another)
// and one inside a token, so that bans bite often when the pool is favoured.
std::vector<std::string> pool_bans(std::mt19937 &rng, const std::vector<Token> &pool) {
  std::vector<std::string> bans;
  auto any = [&] { return piece(pool[rng() % pool.size()]); };
  for (int i = 0; i < 4; ++i) {
    const std::string a = any(), b = any();
    const std::size_t na = 1 + rng() % std::min<std::size_t>(2, a.size());
    const std::size_t nb = 1 + rng() % std::min<std::size_t>(2, b.size());
    bans.push_back(a.substr(a.size() - na) + b.substr(0, nb));
  }
  const std::string c = any();
  bans.push_back(c.substr(rng() % (c.size() - 1), 2));
  return bans;
}

std::vector<float> pool_logits(std::mt19937 &rng, const std::vector<Token> &pool) {
  auto l = normal_logits(rng, 1.0f);
  std::normal_distribution<float> hi(6.0f, 1.0f);
  for (const Token t : pool) l[static_cast<std::size_t>(t)] = hi(rng);
  return l;
}

SamplerParams with_bans(SamplerParams p, std::vector<std::string> bans) {
  p.banned_strings = std::move(bans);
  return p;
}

}  // namespace

TEST(BannedStrings, EveryPathPicksWhatTheCheckedTwinPicks) {
  const std::vector<std::pair<const char *, SamplerParams>> paths = {
      {"greedy", {}},
      {"top-k", {.temperature = 0.9f, .top_k = 40}},
      {"chain", {.temperature = 0.9f, .top_p = 0.9f, .repeat_penalty = 1.1f}},
      {"mirostat", {.temperature = 1.0f, .mirostat = 2}},
  };
  for (const auto &[name, base] : paths) {
    int bites = 0;
    for (unsigned seed = 1; seed <= 4; ++seed) {
      std::mt19937 rng(seed);
      SamplerParams p = base;
      p.seed = seed;
      const auto pool = printable_pool(rng, 12);
      const auto bans = pool_bans(rng, pool);
      Sampler s(model(), with_bans(p, bans));
      Sampler twin(model(), p);
      Sampler free(model(), p);  // no bans at all: how often they bite
      std::string text;
      for (int step = 0; step < 120; ++step) {
        const auto l = pool_logits(rng, pool);
        const Token want = reference_pick(twin, l, text, bans);
        const Token got = s.sample(l);
        ASSERT_EQ(got, want) << name << " seed " << seed << " step " << step << " after '" << text << "'";
        bites += free.sample(l) != got;
        s.accept(got);
        twin.accept(got);
        free.accept(got);
        text += piece(got);
        for (const auto &b : bans) ASSERT_EQ(text.find(b), std::string::npos) << name << ": '" << b << "' in " << text;
      }
    }
    EXPECT_GE(bites, 20) << name << ": the bans should change many picks";
  }
}

// A grammar and bans together: greedy picks the best token both allow (the
// brute-force mask, then the grammar's own greedy), and at a temperature the
// text fits the grammar and holds no banned string.
TEST(BannedStrings, WithAGrammar) {
  for (unsigned seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    const std::vector<std::string> bans = {"7", "12", "00", "345"};
    const SamplerParams g{.grammar = kDigits};
    Sampler s(model(), with_bans(g, bans));
    Sampler twin(model(), g);
    std::string text;
    for (int step = 0; step < 12; ++step) {
      const auto l = normal_logits(rng, 3.0f);
      const Token got = s.sample(l);
      ASSERT_EQ(got, twin.sample(brute_mask(l, text, bans))) << "seed " << seed << " step " << step;
      s.accept(got);
      twin.accept(got);
      text += piece(got);
      if (text.back() == '.') break;
    }
    SamplerParams hot = with_bans(g, bans);
    hot.temperature = 1.0f;
    hot.seed = seed;
    Sampler t(model(), hot);
    text.clear();
    for (int step = 0; step < 40 && (text.empty() || text.back() != '.'); ++step) {
      const Token got = t.sample(normal_logits(rng, 3.0f));
      t.accept(got);
      text += piece(got);
    }
    for (const auto &b : bans) EXPECT_EQ(text.find(b), std::string::npos) << b << " in " << text;
    EXPECT_TRUE(std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }))
        << text;
  }
}

// A string spanning two tokens is refused after the first; after
// start_text() the first no longer counts.
TEST(BannedStrings, StartTextForgetsTheTextBefore) {
  std::mt19937 rng(3);
  const auto pool = printable_pool(rng, 40);
  // a and b such that neither piece holds the two bytes that span them.
  Token a = -1, b = -1;
  std::string span;
  for (const Token x : pool) {
    for (const Token y : pool) {
      const std::string s = piece(x).substr(piece(x).size() - 1) + piece(y).substr(0, 1);
      if (x != y && piece(x).find(s) == std::string::npos && piece(y).find(s) == std::string::npos) {
        a = x, b = y, span = s;
      }
    }
  }
  ASSERT_GE(a, 0);
  auto favour = [&](Token t) {
    auto l = normal_logits(rng, 0.1f);
    l[static_cast<std::size_t>(t)] = 50.0f;
    return l;
  };
  Sampler s(model(), {.banned_strings = {span}});
  ASSERT_EQ(s.sample(favour(a)), a);
  s.accept(a);
  EXPECT_NE(s.sample(favour(b)), b) << "'" << span << "' spans " << piece(a) << " | " << piece(b);
  Sampler fresh = s.clone();
  fresh.start_text();
  EXPECT_EQ(fresh.sample(favour(b)), b);
}

// A sampler restored from state() (or cloned) at every step picks as the
// original; penalty_last_n 0 keeps no journal to replay, so there the saved
// tail alone carries the text. The bans bite at some of those steps.
TEST(BannedStrings, StateRestoreAndCloneContinueIdentically) {
  int bites = 0;
  for (unsigned seed = 1; seed <= 8; ++seed) {
    std::mt19937 rng(seed);
    const auto pool = printable_pool(rng, 12);
    const SamplerParams base{.temperature = 0.8f, .top_k = 20, .penalty_last_n = seed % 2 == 0 ? 0 : 64, .seed = seed};
    const SamplerParams p = with_bans(base, pool_bans(rng, pool));
    Sampler s(model(), p);
    Sampler free(model(), base);
    for (int i = 0; i < 80; ++i) {
      const auto l = pool_logits(rng, pool);
      Sampler r = Sampler::restore(model(), p, 0, s.state());
      Sampler c = s.clone();
      const Token t = s.sample(l);
      ASSERT_EQ(r.sample(l), t) << "restored, seed " << seed << " step " << i;
      ASSERT_EQ(c.sample(l), t) << "clone, seed " << seed << " step " << i;
      bites += free.sample(l) != t;
      s.accept(t);
      free.accept(t);
    }
    ASSERT_TRUE(s.state().ban_tail.has_value());
  }
  EXPECT_GE(bites, 20);
}

TEST(BannedStrings, Refusals) {
  EXPECT_TRUE(throws_weft([] { Sampler(model(), {.banned_strings = {"a", ""}}); }, Errc::invalid_argument,
                          "SamplerParams.banned_strings[1] is 0 bytes; each must hold 1 to 256"));
  EXPECT_TRUE(throws_weft([] { Sampler(model(), {.banned_strings = {std::string(257, 'x')}}); }, Errc::invalid_argument,
                          "SamplerParams.banned_strings[0] is 257 bytes; each must hold 1 to 256"));
  EXPECT_TRUE(throws_weft([] { Sampler(model(), {.banned_strings = std::vector<std::string>(257, "x")}); },
                          Errc::invalid_argument,
                          "SamplerParams.banned_strings has 257 entries; at most 256 are taken"));
  // Only two tokens can be drawn, and the bans refuse both.
  std::mt19937 rng(5);
  const auto pool = printable_pool(rng, 2);
  std::vector<float> l(n_vocab(), -INFINITY);
  for (const Token t : pool) l[static_cast<std::size_t>(t)] = 1.0f;
  for (const SamplerParams &p : {SamplerParams{}, SamplerParams{.temperature = 1.0f}}) {
    Sampler s(model(), with_bans(p, {piece(pool[0]), piece(pool[1])}));
    EXPECT_TRUE(throws_weft([&] { (void)s.sample(l); }, Errc::invalid_argument,
                            "SamplerParams.banned_strings leave no token to sample after this text"));
  }
}
