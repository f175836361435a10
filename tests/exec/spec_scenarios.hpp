// Speculative decoding tests' shared parts: executors, a small alphabet
// that makes replies repeat, and the greedy scenarios (many conversations,
// random budgets, rewinds with stop strings, forks) that compare an
// executor that drafts with one that does not.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "reference.hpp"
#include "weft/executor.hpp"

namespace spec_test {

using weft_test::random_tokens;
using weft_test::reference_logits;

inline weft::ExecutorParams params(std::optional<weft::SpeculativeParams> spec = std::nullopt) {
  weft::ExecutorParams p{.n_ctx = 1024, .n_batch = 64, .n_seq_max = 8, .n_threads = 2};
  if (spec) p.speculative = *spec;
  return p;
}

inline weft::SpeculativeParams lookup(bool adaptive = false, std::uint32_t max_draft = 8) {
  return {.drafter = weft::Drafter::lookup, .max_draft = max_draft, .ngram_max = 3, .ngram_min = 1, .adaptive = adaptive};
}

// A handful of tokens far above the rest: replies over a small alphabet
// repeat themselves, so lookup drafts often and is both right and wrong (the
// model's own logits still choose among them).
inline weft::SamplerParams small_alphabet(weft::SamplerParams sp = {}) {
  for (weft::Token t : {300, 301, 302, 303, 304}) sp.logit_bias.push_back({t, 30.0f});
  return sp;
}

// A prompt whose middle repeats: lookup has something to copy.
inline std::vector<weft::Token> prompt_with_repeats(std::mt19937 &rng, const weft::Model &m) {
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
inline void run_gens(weft::Executor &ex, std::vector<weft::Generation> &gens, std::mt19937 &rng) {
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
inline int compare(const weft::Model &m, const Outcome &a, const Outcome &b, const std::string &what) {
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

inline Outcome outcome(weft::Executor &ex, weft::Conversation &c, const weft::Generation &g,
                const std::vector<weft::Token> &context) {
  Outcome o{g.result(), context, {}, {}};
  weft_test::run_until_idle(ex);
  o.after = c.tokens();
  if (c.has_logits()) o.logits = c.logits();
  return o;
}

struct ScenarioCounts {
  std::uint64_t drafted = 0, accepted = 0;
  int parted = 0, compared = 0;  // generations compared, and of those parted at a near-tie
};

// `seeds` scenarios of 2-6 conversations: each generation's SpeculativeParams
// from `pick` (nullopt: none), on an executor made with `spec_params`,
// against the same generation on an executor that drafts nothing: tokens,
// text, conversation tokens, logprobs and final logits.
inline ScenarioCounts run_greedy_scenarios(
    const weft::Model &m, const weft::ExecutorParams &spec_params, unsigned seeds,
    const std::function<std::optional<weft::SpeculativeParams>(std::mt19937 &)> &pick) {
  ScenarioCounts n_out;
  std::uint64_t &drafted = n_out.drafted, &accepted = n_out.accepted;
  int &parted = n_out.parted, &compared = n_out.compared;
  for (unsigned seed = 1; seed <= seeds; ++seed) {
    std::mt19937 rng(seed);
    const int n = 2 + static_cast<int>(rng() % 5);
    weft::Executor plain(m, params()), spec(m, spec_params);
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
      g.speculative = pick(rng);
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
  return n_out;
}

}  // namespace spec_test
