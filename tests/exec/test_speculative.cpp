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

#include "reference.hpp"
#include "weft/executor.hpp"

using weft_test::random_tokens;
using weft_test::reference_logits;

namespace {

weft::ExecutorParams params(std::optional<weft::SpeculativeParams> spec = std::nullopt) {
  weft::ExecutorParams p{.n_ctx = 1024, .n_batch = 64, .n_seq_max = 8, .n_threads = 2};
  if (spec) p.speculative = *spec;
  return p;
}

weft::SpeculativeParams lookup(bool adaptive = false, std::uint32_t max_draft = 8) {
  return {.drafter = weft::Drafter::lookup, .max_draft = max_draft, .ngram_max = 3, .ngram_min = 1, .adaptive = adaptive};
}

// A handful of tokens far above the rest: replies over a small alphabet
// repeat themselves, so lookup drafts often and is both right and wrong (the
// model's own logits still choose among them).
weft::SamplerParams small_alphabet(weft::SamplerParams sp = {}) {
  for (weft::Token t : {300, 301, 302, 303, 304}) sp.logit_bias.push_back({t, 30.0f});
  return sp;
}

// A prompt whose middle repeats: lookup has something to copy.
std::vector<weft::Token> prompt_with_repeats(std::mt19937 &rng, const weft::Model &m) {
  auto p = random_tokens(rng, m, 4 + static_cast<int>(rng() % 12), true);
  const std::size_t from = 1 + rng() % (p.size() - 1);
  const std::vector<weft::Token> again(p.begin() + static_cast<std::ptrdiff_t>(from), p.end());
  p.insert(p.end(), again.begin(), again.end());
  auto tail = random_tokens(rng, m, 2 + static_cast<int>(rng() % 6));
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

struct Outcome {
  weft::GenerationResult result;
  std::vector<weft::Token> context;  // the conversation's tokens before the generation
  std::vector<weft::Token> after;    // ...and after it (and one more step)
  std::vector<float> logits;         // its logits then
};

// Steps both executors with random token budgets until `gens` are done.
void run_gens(weft::Executor &ex, std::vector<weft::Generation> &gens, std::mt19937 &rng) {
  const std::uint32_t sizes[] = {0, 2, 5, 16};
  for (int i = 0; i < 5000; ++i) {
    if (std::all_of(gens.begin(), gens.end(), [](auto &g) { return g.done(); })) break;
    const std::uint32_t cap = sizes[rng() % 4];
    weft::StepBudget b;
    if (cap > 0) b.max_tokens = cap;
    const auto r = ex.step(b);
    EXPECT_LE(r.tokens_decoded, cap > 0 ? cap : 64u) << "drafts stay within the step's token budget";
    EXPECT_LE(r.drafts_accepted, r.tokens_drafted);
  }
  for (auto &g : gens) EXPECT_TRUE(g.done());
}

// `a` (no drafts) and `b` (drafts) agree: the same tokens, or tokens that
// part where the independent decode has the two choices within noise
// (the batch shapes differ, so the kernels' rounding does too).
int compare(const weft::Model &m, const Outcome &a, const Outcome &b, const std::string &what) {
  const auto &ta = a.result.tokens, &tb = b.result.tokens;
  EXPECT_EQ(a.context, b.context) << what;
  std::size_t j = 0;
  while (j < ta.size() && j < tb.size() && ta[j] == tb[j]) ++j;
  if (j == ta.size() && j == tb.size()) {
    EXPECT_EQ(a.result.reason, b.result.reason) << what;
    EXPECT_EQ(a.result.text, b.result.text) << what;
    EXPECT_EQ(a.after, b.after) << what;
    EXPECT_EQ(a.result.logprobs.size(), b.result.logprobs.size()) << what;
    for (std::size_t i = 0; i < a.result.logprobs.size() && i < b.result.logprobs.size(); ++i) {
      EXPECT_NEAR(a.result.logprobs[i].logprob, b.result.logprobs[i].logprob, 1e-3) << what << " token " << i;
    }
    if (!a.logits.empty() || !b.logits.empty()) {
      EXPECT_LE(weft_test::nmse(b.logits, a.logits), weft_test::logits_tolerance(m)) << what << ": final logits";
    }
    return 0;
  }
  if (j == ta.size() || j == tb.size()) {
    ADD_FAILURE() << what << ": one ended at " << j << " (" << weft::finish_reason_name(a.result.reason) << " / "
                  << weft::finish_reason_name(b.result.reason) << ")";
    return 1;
  }
  auto ctx = a.context;
  ctx.insert(ctx.end(), ta.begin(), ta.begin() + static_cast<std::ptrdiff_t>(j));
  const auto lg = reference_logits(m, ctx);
  double sq = 0;
  for (float x : lg) sq += double(x) * x;
  const double sigma = std::sqrt(weft_test::logits_tolerance(m) * sq / static_cast<double>(lg.size()));
  EXPECT_LT(std::abs(lg[ta[j]] - lg[tb[j]]), 10 * sigma)
      << what << ": token " << j << " differs (" << ta[j] << " vs " << tb[j] << ") where the model does not tie";
  return 1;
}

Outcome outcome(weft::Executor &ex, weft::Conversation &c, const weft::Generation &g,
                const std::vector<weft::Token> &context) {
  Outcome o{g.result(), context, {}, {}};
  weft_test::run_until_idle(ex);
  o.after = c.tokens();
  if (c.has_logits()) o.logits = c.logits();
  return o;
}

}  // namespace

TEST(Speculative, GreedyTokensAreThoseWithoutDraftsOverRandomScenarios) {
  const auto &m = weft_test::tiny();
  std::uint64_t drafted = 0, accepted = 0;
  int parted = 0, compared = 0;
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    const int n = 2 + static_cast<int>(rng() % 5);
    weft::Executor plain(m, params()), spec(m, params());
    std::vector<weft::Conversation> ca, cb;
    std::vector<weft::GenerateParams> gp;
    for (int i = 0; i < n; ++i) {
      const auto p = prompt_with_repeats(rng, m);
      ca.push_back(plain.create());
      cb.push_back(spec.create());
      ca.back().prompt(p);
      cb.back().prompt(p);
      weft::GenerateParams g{.max_tokens = 4 + static_cast<std::uint32_t>(rng() % 40)};
      g.logprobs = rng() % 3 == 0;
      if (rng() % 3 != 0) g.sampler = small_alphabet();
      // Mixed drafters: some draft, some do not, some cap their drafts low.
      if (rng() % 4 != 0) g.speculative = lookup(rng() % 4 == 0, 1 + static_cast<std::uint32_t>(rng() % 12));
      gp.push_back(g);
    }
    const std::uint64_t drafted_before = drafted, accepted_before = accepted;
    std::mt19937 ra(seed * 7), rb(seed * 13);
    std::vector<bool> apart(static_cast<std::size_t>(n), false);  // parted at a near-tie: not compared further
    for (int phase = 0; phase < 3; ++phase) {
      std::vector<weft::Generation> ga, gb;
      std::vector<std::vector<weft::Token>> ctx_a, ctx_b;
      std::vector<weft::Conversation> fa(static_cast<std::size_t>(n)), fb(static_cast<std::size_t>(n));
      std::vector<int> who;
      for (int i = 0; i < n; ++i) {
        if (apart[static_cast<std::size_t>(i)]) continue;
        weft::GenerateParams g = gp[static_cast<std::size_t>(i)];
        weft::Conversation *a = &ca[i], *b = &cb[i];
        if (phase == 1) {
          // Rewound into the last reply, then a stop string from the middle of
          // what it said: generations that end inside a draft.
          const auto drop = static_cast<std::uint32_t>(std::min<std::size_t>(a->n_tokens() - 1, rng() % 6));
          a->rewind(drop);
          b->rewind(drop);
          g.max_tokens = 6 + static_cast<std::uint32_t>(rng() % 40);
        } else if (phase == 2) {
          fa[static_cast<std::size_t>(i)] = a->fork();  // forks share the prefix cells
          fb[static_cast<std::size_t>(i)] = b->fork();
          a = &fa[static_cast<std::size_t>(i)];
          b = &fb[static_cast<std::size_t>(i)];
        }
        ctx_a.push_back(a->tokens());
        ctx_b.push_back(b->tokens());
        gb.push_back(b->generate(g));
        g.speculative = weft::SpeculativeParams{};  // the plain executor drafts nothing
        ga.push_back(a->generate(g));
        who.push_back(i);
      }
      run_gens(plain, ga, ra);
      run_gens(spec, gb, rb);
      for (std::size_t k = 0; k < who.size(); ++k) {
        const int i = who[k];
        weft::Conversation &a = phase == 2 ? fa[static_cast<std::size_t>(i)] : ca[i];
        weft::Conversation &b = phase == 2 ? fb[static_cast<std::size_t>(i)] : cb[i];
        const Outcome oa = outcome(plain, a, ga[k], ctx_a[k]), ob = outcome(spec, b, gb[k], ctx_b[k]);
        const int p = compare(m, oa, ob, "seed " + std::to_string(seed) + " phase " + std::to_string(phase) +
                                             " conv " + std::to_string(i));
        parted += p;
        if (p != 0) apart[static_cast<std::size_t>(i)] = true;
        ++compared;
        EXPECT_EQ(oa.result.drafted, 0u);
        drafted += ob.result.drafted;
        accepted += ob.result.accepted;
        if (!gp[static_cast<std::size_t>(i)].speculative) {
          EXPECT_EQ(ob.result.drafted, 0u);
        }
      }
      if (phase == 0) {
        // Phase 1 stops where the plain run's text had a piece in its middle.
        for (std::size_t k = 0; k < who.size(); ++k) {
          const int i = who[k];
          const auto text = ga[k].result().text;
          auto &g = gp[static_cast<std::size_t>(i)];
          g.stop.clear();
          if (text.size() >= 6) g.stop.push_back(text.substr(text.size() / 2, 3));
        }
      }
    }
    const auto sa = plain.stats(), sb = spec.stats();
    EXPECT_EQ(sa.tokens_drafted, 0u);
    EXPECT_EQ(sb.tokens_drafted, drafted - drafted_before) << "the executor counts what its generations drafted";
    EXPECT_EQ(sb.drafts_accepted, accepted - accepted_before);
  }
  std::cout << "drafted " << drafted << ", kept " << accepted << "; " << parted << " of " << compared
            << " generations parted at a near-tie\n";
  // Coverage, not tolerance: the scenarios must verify many drafts both ways.
  EXPECT_GT(drafted, 150u) << "lookup drafted";
  EXPECT_GT(accepted, 50u) << "drafts were kept";
  EXPECT_GT(drafted - accepted, 30u) << "drafts were rejected";
  EXPECT_LE(parted, compared / 10) << "near-ties are rare";
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
