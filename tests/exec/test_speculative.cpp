// Speculative decoding: generations with drafts against the same
// generations without, over seeded random scenarios (many conversations,
// budgets, rewinds, stop strings, forks, max_tokens inside a draft); a
// divergence is allowed only where an independent decode shows the two
// tokens' logits within the kernels' noise. At a temperature: the same
// tokens for the same seed, and the same distribution over seeds (a
// chi-square test). Bad input, save/load mid-generation.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <random>

#include "exec/spec_scenarios.hpp"

using weft_test::random_tokens;
using weft_test::reference_logits;

using namespace spec_test;

TEST(Speculative, GreedyTokensAreThoseWithoutDraftsOverRandomScenarios) {
  // Mixed drafters: some draft, some do not, some cap their drafts low.
  const auto n = run_greedy_scenarios(weft_test::tiny(), params(), 12, [](std::mt19937 &rng) {
    std::optional<weft::SpeculativeParams> sp;
    if (rng() % 4 != 0) sp = lookup(rng() % 4 == 0, 1 + static_cast<std::uint32_t>(rng() % 12));
    return sp;
  });
  std::cout << "drafted " << n.drafted << ", kept " << n.accepted << "; " << n.parted << " of " << n.compared
            << " generations parted at a near-tie\n";
  // Coverage, not tolerance: the scenarios must verify many drafts both ways.
  EXPECT_GT(n.drafted, 150u) << "lookup drafted";
  EXPECT_GT(n.accepted, 50u) << "drafts were kept";
  EXPECT_GT(n.drafted - n.accepted, 30u) << "drafts were rejected";
  EXPECT_LE(n.parted, n.compared / 10) << "near-ties are rare";
}

TEST(Speculative, SeededTemperatureGivesTheSameTokensAndRepeatPenaltyTheSameState) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(21);
  weft::Executor plain(m, params()), spec(m, params(lookup()));
  const auto p = prompt_with_repeats(rng, m);
  auto base_a = plain.create(), base_b = spec.create();
  base_a.prompt(p);
  base_b.prompt(p);
  weft_test::run_until_idle(plain);
  weft_test::run_until_idle(spec);
  std::uint64_t accepted = 0;
  for (std::uint32_t seed = 1; seed <= 24; ++seed) {
    auto sp = small_alphabet({.temperature = 0.9f, .top_k = 6, .seed = seed});
    if (seed % 2 == 0) {
      sp.repeat_penalty = 1.5f;  // its window is sampler state the drafts must not run ahead of
    }
    auto a = base_a.fork(), b = base_b.fork();
    a.set_sampler(sp);
    b.set_sampler(sp);
    // Twice on the conversation's own sampler: the second generation starts
    // from the state the first left.
    for (int turn = 0; turn < 2; ++turn) {
      weft::GenerateParams g{.max_tokens = 10 + seed % 7};
      if (turn == 1) g.stop = {"e"};
      auto ga = a.generate(g);
      auto gb = b.generate(g);
      weft_test::run_until_idle(plain);
      weft_test::run_until_idle(spec);
      EXPECT_EQ(ga.result().tokens, gb.result().tokens) << "seed " << seed << " turn " << turn;
      EXPECT_EQ(ga.result().text, gb.result().text) << "seed " << seed << " turn " << turn;
      EXPECT_EQ(a.tokens(), b.tokens()) << "seed " << seed << " turn " << turn;
      accepted += gb.result().accepted;
    }
  }
  EXPECT_GT(accepted, 10u);
}

namespace {

// Two-sample chi-square on counts (categories with too few pooled).
double chi_square(const std::map<std::uint64_t, int> &a, const std::map<std::uint64_t, int> &b, int &df) {
  int na = 0, nb = 0;
  for (auto &[k, v] : a) na += v;
  for (auto &[k, v] : b) nb += v;
  std::map<std::uint64_t, std::pair<int, int>> both;
  for (auto &[k, v] : a) both[k].first += v;
  for (auto &[k, v] : b) both[k].second += v;
  std::vector<std::pair<int, int>> cells;
  std::pair<int, int> rest{0, 0};
  for (auto &[k, v] : both) {
    if (v.first + v.second < 10) {
      rest.first += v.first;
      rest.second += v.second;
    } else {
      cells.push_back(v);
    }
  }
  if (rest.first + rest.second > 0) cells.push_back(rest);
  double x2 = 0;
  for (auto [x, y] : cells) {
    const double t = x + y;
    const double ea = t * na / double(na + nb), eb = t * nb / double(na + nb);
    x2 += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
  }
  df = static_cast<int>(cells.size()) - 1;
  return x2;
}

// The chi-square quantile at 1 - 1e-3 (Wilson-Hilferty).
double chi_square_critical(int df) {
  const double z = 3.09, k = df;
  return k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
}

}  // namespace

TEST(Speculative, TheDistributionAtATemperatureIsUnchanged) {
  // Independent seeds on each side: not the same draws, the same law. The
  // first tokens' joint outcome (a few categories under top_k 3) and each
  // later position's token, with and without drafts.
  const auto &m = weft_test::tiny();
  std::mt19937 rng(4);
  const auto p = prompt_with_repeats(rng, m);
  std::map<std::uint64_t, int> counts[2];
  std::uint64_t accepted = 0;
  for (int side = 0; side < 2; ++side) {
    weft::Executor ex(m, params(side == 1 ? std::optional(lookup()) : std::nullopt));
    auto base = ex.create();
    base.prompt(p);
    weft_test::run_until_idle(ex);
    for (int batch = 0; batch < 25; ++batch) {
      std::vector<weft::Conversation> cs;
      std::vector<weft::Generation> gs;
      for (int i = 0; i < 8; ++i) {
        const auto seed = static_cast<std::uint32_t>(side * 100000 + batch * 8 + i + 1);
        cs.push_back(base.fork());
        gs.push_back(cs.back().generate({.max_tokens = 6,
                                         .sampler = small_alphabet({.temperature = 1.0f, .top_k = 3, .seed = seed}),
                                         .ignore_eos = true}));
      }
      weft_test::run_until_idle(ex);
      for (auto &g : gs) {
        const auto r = g.result();
        EXPECT_EQ(r.tokens.size(), 6u);
        accepted += side == 1 ? r.accepted : 0;
        const std::uint64_t pair = std::uint64_t(r.tokens[0]) * 65536u + std::uint64_t(r.tokens[1]);
        ++counts[side][pair];  // the first two tokens, jointly
        for (std::size_t k = 2; k < r.tokens.size(); ++k) ++counts[side][(std::uint64_t(k) << 40) | std::uint64_t(r.tokens[k])];
      }
      for (auto &c : cs) c.dispose();
    }
  }
  int df = 0;
  const double x2 = chi_square(counts[0], counts[1], df);
  ASSERT_GE(df, 3);
  EXPECT_LT(x2, chi_square_critical(df)) << "df " << df;
  EXPECT_GT(accepted, 40u) << "drafts were verified and kept at this temperature";
}

TEST(Speculative, SaveAndLoadMidGenerationKeepDraftingAndCounts) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(8);
  weft::Executor a(m, params());
  auto c = a.create();
  c.prompt(prompt_with_repeats(rng, m));
  auto g = c.generate({.max_tokens = 40, .sampler = small_alphabet(), .speculative = lookup()});
  const auto mid = weft_test::save_mid_generation(a, c, g, 4, params());
  ASSERT_TRUE(mid.ok);
  EXPECT_EQ(mid.version, 15) << "a generation with a drafter needs state version 15";
  EXPECT_EQ(mid.loaded.tokens, mid.original.tokens);
  EXPECT_EQ(mid.loaded.text, mid.original.text);
  EXPECT_GT(mid.loaded.drafted, 0u) << "the loaded generation drafts on";
  EXPECT_GE(mid.loaded.drafted, mid.loaded.accepted);
}

TEST(Speculative, BadParamsAreRefusedByName) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt(std::vector<weft::Token>{m.bos(), 100, 200});
  auto expect_refused = [&](weft::SpeculativeParams sp, weft::Errc code, const std::string &needle) {
    try {
      c.generate({.speculative = sp});
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const weft::Error &e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto sp = lookup();
  sp.max_draft = 0;
  expect_refused(sp, weft::Errc::out_of_range, "max_draft = 0");
  sp.max_draft = 33;
  expect_refused(sp, weft::Errc::out_of_range, "max_draft = 33 is outside [1, 32]");
  sp = lookup();
  sp.ngram_min = 4;
  sp.ngram_max = 2;
  expect_refused(sp, weft::Errc::out_of_range, "ngram_min = 4 and ngram_max = 2");
  sp = lookup();
  sp.drafter = static_cast<weft::Drafter>(7);
  expect_refused(sp, weft::Errc::invalid_argument, "drafter = 7");
  EXPECT_FALSE(c.generation()) << "nothing was started";
  auto bad = params(lookup());
  bad.speculative.ngram_max = 9;
  try {
    weft::Executor other(m, bad);
    ADD_FAILURE() << "an executor with ngram_max 9";
  } catch (const weft::Error &e) {
    EXPECT_EQ(e.code(), weft::Errc::out_of_range);
    EXPECT_NE(std::string(e.what()).find("ExecutorParams.speculative"), std::string::npos) << e.what();
  }
}
