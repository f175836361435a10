// lookup_draft: the continuation of the latest earlier occurrence of the
// last n tokens, longest n first, against a brute-force search.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "sched/draft_lookup.hpp"

using weft::Token;
using weft::detail::lookup_draft;

namespace {

std::vector<Token> draft(const std::vector<Token> &seq, std::uint32_t lo, std::uint32_t hi, std::size_t n,
                         std::uint32_t window = 8192) {
  std::vector<Token> out(n);
  const std::vector<Token> history(seq.begin(), seq.end() - 1);
  out.resize(lookup_draft(history, seq.back(), lo, hi, out, window));
  return out;
}

// The same by brute force: for n from hi down to lo, the latest s < end - n
// with seq[s, s + n) == seq[end - n, end); then what follows s + n,
// periodically past the end.
std::vector<Token> brute(const std::vector<Token> &seq, std::uint32_t lo, std::uint32_t hi, std::size_t want) {
  const std::size_t end = seq.size();
  for (std::uint32_t n = hi; n >= lo; --n) {
    if (n >= end) continue;
    for (std::size_t s = end - n; s-- > 0;) {
      if (!std::equal(seq.begin() + s, seq.begin() + s + n, seq.end() - n)) continue;
      std::vector<Token> ext = seq;
      while (ext.size() < s + n + want) ext.push_back(ext[ext.size() - (end - s - n)]);
      return {ext.begin() + s + n, ext.begin() + s + n + want};
    }
  }
  return {};
}

}  // namespace

TEST(LookupDraft, PrefersTheLongestThenTheLatestMatch) {
  // "5 6 7" occurs at 1; "6 7" alone later at 6: the 3-token match wins.
  const std::vector<Token> seq = {1, 5, 6, 7, 8, 9, 6, 7, 2, 5, 6, 7};
  EXPECT_EQ(draft(seq, 1, 3, 3), (std::vector<Token>{8, 9, 6}));
  // With at most 2, "6 7" matches latest at 6: what follows is 2 5 6.
  EXPECT_EQ(draft(seq, 1, 2, 3), (std::vector<Token>{2, 5, 6}));
}

TEST(LookupDraft, NoMatchNoDraftAndBoundsHold) {
  EXPECT_TRUE(draft({1, 2, 3, 4}, 1, 3, 4).empty());
  EXPECT_TRUE(draft({7}, 1, 3, 4).empty()) << "a lone token has nothing before it";
  // A 1-token match exists, but ngram_min 2 refuses it.
  EXPECT_TRUE(draft({1, 2, 3, 2}, 2, 3, 4).empty());
  EXPECT_EQ(draft({1, 2, 3, 2}, 1, 3, 4), (std::vector<Token>{3, 2, 3, 2}));
  // Nothing is written past the room given.
  EXPECT_EQ(draft({4, 4, 4}, 1, 3, 2).size(), 2u);
  // ngram_min > ngram_max, or 0: nothing.
  EXPECT_TRUE(draft({1, 2, 1, 2}, 3, 2, 4).empty());
  EXPECT_TRUE(draft({1, 2, 1, 2}, 0, 2, 4).empty());
}

TEST(LookupDraft, ALoopGoesOnLooping) {
  // Period 3: the draft continues the cycle past the end of what was seen.
  EXPECT_EQ(draft({9, 1, 2, 3, 1, 2, 3, 1}, 1, 3, 7), (std::vector<Token>{2, 3, 1, 2, 3, 1, 2}));
}

TEST(LookupDraft, OnlyTheWindowIsSearched) {
  // The only match is at the start, outside a window of the last 4 tokens.
  const std::vector<Token> seq = {1, 2, 9, 8, 7, 6, 5, 1, 2};
  EXPECT_EQ(draft(seq, 2, 2, 1), (std::vector<Token>{9}));
  EXPECT_TRUE(draft(seq, 2, 2, 1, 4).empty());
}

TEST(LookupDraft, MatchesABruteForceSearchOnRandomSequences) {
  std::mt19937 rng(3);
  int drafted = 0;
  for (int round = 0; round < 3000; ++round) {
    const std::size_t len = 1 + rng() % 40;
    const Token alphabet = 2 + static_cast<Token>(rng() % 5);
    std::vector<Token> seq(len);
    for (auto &t : seq) t = static_cast<Token>(rng() % alphabet);
    const auto lo = static_cast<std::uint32_t>(1 + rng() % 3), hi = lo + static_cast<std::uint32_t>(rng() % 3);
    const std::size_t want = 1 + rng() % 8;
    const auto got = draft(seq, lo, hi, want);
    EXPECT_EQ(got, brute(seq, lo, hi, want)) << "round " << round;
    drafted += got.empty() ? 0 : 1;
  }
  EXPECT_GT(drafted, 1000);
}
