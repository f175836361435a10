// Sampler: properties checked over seeded random inputs on the tiny model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>
#include <regex>

#include "common.hpp"
#include "core/sampling.hpp"
#include "core/sampling_helpers.hpp"

using weft::SamplerParams;
using weft::Token;
using weft::detail::Sampler;
using weft_test::throws_weft;
using namespace weft_test::sampling;

namespace {

// Every token's piece, computed once.
const std::vector<std::string> &pieces() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> out(n_vocab());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = model().token_piece(static_cast<Token>(i));
    return out;
  }();
  return all;
}

Token find_piece(const std::string &piece) {
  const auto &p = pieces();
  const auto it = std::find(p.begin(), p.end(), piece);
  EXPECT_NE(it, p.end()) << "no token with piece '" << piece << "'";
  return static_cast<Token>(it - p.begin());
}

// A regex for every non-empty prefix of parts[0] parts[1] ...: "a(b(c)?)?".
std::string prefixes(const std::vector<std::string> &parts) {
  std::string out = parts.back();
  for (std::size_t i = parts.size() - 1; i-- > 0;) out = parts[i] + "(" + out + ")?";
  return out;
}

// `rest` everywhere except the listed tokens.
std::vector<float> peaks(std::initializer_list<std::pair<Token, float>> at, float rest = 0.0f) {
  std::vector<float> out(n_vocab(), rest);
  for (auto [t, l] : at) out[static_cast<std::size_t>(t)] = l;
  return out;
}

// Samples and accepts up to `max` tokens from random logits (+ bias); the text, and whether it ended (EOG).
std::pair<std::string, bool> generate(Sampler &s, std::mt19937 &rng, int max, const std::vector<float> &bias,
                                      const std::regex &valid_prefix) {
  std::string text;
  for (int i = 0; i < max; ++i) {
    auto l = normal_logits(rng, 3.0f);
    for (std::size_t k = 0; k < l.size(); ++k) l[k] += bias[k];
    const Token t = s.sample(l);
    s.accept(t);
    if (model().is_eog(t)) return {text, true};
    text += model().token_piece(t);
    EXPECT_TRUE(std::regex_match(text, valid_prefix)) << "'" << text << "' left the language";
  }
  return {text, false};
}

std::vector<Token> draw(Sampler &s, std::mt19937 &rng, int n, float stddev = 1.0f) {
  std::vector<Token> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(s.sample(normal_logits(rng, stddev)));
    s.accept(out.back());
  }
  return out;
}


}  // namespace

TEST(Sampling, GreedyAndTopK1AreArgmax) {
  // top_k/top_p cannot change the argmax, so greedy ignores them; top_k 1 leaves dist one choice.
  Sampler greedy(model(), {.top_k = 5, .top_p = 0.5f});
  Sampler top1(model(), {.temperature = 1.0f, .top_k = 1, .seed = 7});
  for (unsigned seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    const auto l = normal_logits(rng, 3.0f);
    EXPECT_EQ(greedy.sample(l), argmax(l)) << "seed " << seed;
    EXPECT_EQ(top1.sample(l), argmax(l)) << "seed " << seed;
  }
}

TEST(Sampling, BanningEndTokensPicksTheBestOtherTokenOnEveryPath) {
  std::mt19937 rng(17);
  std::vector<Token> eog;
  for (std::size_t t = 0; t < n_vocab(); ++t) {
    if (model().is_eog(static_cast<Token>(t))) eog.push_back(static_cast<Token>(t));
  }
  ASSERT_FALSE(eog.empty());
  for (int i = 0; i < 20; ++i) {
    auto l = normal_logits(rng);
    const Token end = eog[static_cast<std::size_t>(i) % eog.size()];
    l[static_cast<std::size_t>(end)] = 50.0f;  // far above every other token
    auto masked = l;
    for (Token t : eog) masked[static_cast<std::size_t>(t)] = -INFINITY;
    Sampler greedy(model(), {});
    ASSERT_TRUE(greedy.greedy_fast_path());
    EXPECT_EQ(greedy.sample(l), end) << "without the ban the end token wins";
    EXPECT_EQ(greedy.sample(l, true), argmax(masked));
    Sampler penalised(model(), {.repeat_penalty = 1.1f});  // the full chain
    ASSERT_FALSE(penalised.greedy_fast_path());
    EXPECT_EQ(penalised.sample(l, true), argmax(masked));
    // At a temperature the end token would take nearly all the mass.
    Sampler hot(model(), {.temperature = 1.0f, .seed = static_cast<std::uint32_t>(i)});
    for (int k = 0; k < 20; ++k) EXPECT_FALSE(model().is_eog(hot.sample(l, true)));
    EXPECT_EQ(hot.sample(l), end);
  }
  // Only end tokens finite: banned, nothing is left, on every path.
  std::vector<float> only_end(n_vocab(), -INFINITY);
  for (Token t : eog) only_end[static_cast<std::size_t>(t)] = 1.0f;
  for (const SamplerParams &p : {SamplerParams{}, SamplerParams{.repeat_penalty = 1.1f},
                                 SamplerParams{.temperature = 1.0f, .seed = 3}}) {
    Sampler s(model(), p);
    EXPECT_TRUE(model().is_eog(s.sample(only_end)));
    EXPECT_TRUE(
        throws_weft([&] { (void)s.sample(only_end, true); }, weft::Errc::invalid_argument, "every logit is -inf"));
  }
}

TEST(Sampling, SeedsAreReproducibleAndDistinct) {
  // A narrow spread makes the distribution nearly flat over 32000 tokens.
  auto run = [](std::uint32_t seed) {
    Sampler s(model(), {.temperature = 1.0f, .seed = seed});
    std::mt19937 rng(99);
    return draw(s, rng, 50, 0.1f);
  };
  // 0xFFFFFFFF is llama.cpp's "random seed"; weft keeps it reproducible too.
  for (std::uint32_t seed : {1u, 2u, 0xFFFFFFFFu}) EXPECT_EQ(run(seed), run(seed)) << "seed " << seed;
  EXPECT_NE(run(1), run(2));
  EXPECT_NE(run(0xFFFFFFFFu), run(1));
}

TEST(Sampling, CloneContinuesIdenticallyAndIndependently) {
  const SamplerParams p{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.02f, .repeat_penalty = 1.3f,
                        .seed = 9};
  for (unsigned seed : {3u, 4u}) {
    Sampler a(model(), p);
    std::mt19937 rng(seed);
    draw(a, rng, 10, 2.0f);
    Sampler b = a.clone();
    std::mt19937 rng_a(seed + 100), rng_b(seed + 100);
    EXPECT_EQ(draw(a, rng_a, 30, 2.0f), draw(b, rng_b, 30, 2.0f));
    // Advancing the clone leaves the original where it was.
    Sampler c = a.clone();
    std::mt19937 rng_c(seed + 200), rng_a2(seed + 200);
    const auto from_c = draw(c, rng_c, 5, 2.0f);
    EXPECT_EQ(draw(a, rng_a2, 5, 2.0f), from_c);
  }
}

TEST(Sampling, CloneCopiesPenaltyAndGrammarState) {
  const Token one = find_piece("1"), two = find_piece("2"), dot = find_piece(".");
  const SamplerParams p{.repeat_penalty = 2.0f, .grammar = kDigits};
  const auto digits = peaks({{one, 3.1f}, {two, 3.0f}}), dot_first = peaks({{dot, 5.0f}, {one, 4.0f}});

  Sampler a(model(), p);
  ASSERT_EQ(a.sample(digits), one);
  a.accept(one);
  Sampler b = a.clone();
  Sampler fresh(model(), p);
  // A fresh grammar needs a digit first and has no history; the clone has seen "1".
  EXPECT_EQ(fresh.sample(dot_first), one);
  EXPECT_EQ(fresh.sample(digits), one);
  EXPECT_EQ(b.sample(dot_first), dot);
  EXPECT_EQ(b.sample(digits), two);
  b.accept(dot);
  // The clone's grammar is complete; the original's still allows ".".
  EXPECT_TRUE(model().is_eog(b.sample(dot_first)));
  EXPECT_EQ(a.sample(dot_first), dot);
}

TEST(Sampling, TemperatureFrequenciesFollowSoftmax) {
  const std::vector<Token> ids{1000, 2000, 3000};
  const std::vector<float> base{2.0f, 1.0f, 0.0f};
  struct Case {
    SamplerParams p;
    int kept;  // how many of the three survive truncation
  };
  // softmax(2,1,0) = .665/.245/.090: top_k 2, top_p .8 and min_p .3 all keep exactly two.
  const std::vector<Case> cases{{{.temperature = 1.0f}, 3},
                                {{.temperature = 0.5f}, 3},
                                {{.temperature = 1.0f, .top_k = 2}, 2},
                                {{.temperature = 1.0f, .top_p = 0.8f}, 2},
                                {{.temperature = 1.0f, .min_p = 0.3f}, 2}};
  const auto logits = peaks({{ids[0], base[0]}, {ids[1], base[1]}, {ids[2], base[2]}}, -INFINITY);
  constexpr int kDraws = 2000;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    auto p = cases[c].p;
    p.seed = static_cast<std::uint32_t>(11 + c);
    Sampler s(model(), p);
    std::vector<int> count(ids.size(), 0);
    for (int i = 0; i < kDraws; ++i) {
      const Token t = s.sample(logits);
      const auto it = std::find(ids.begin(), ids.end(), t);
      ASSERT_NE(it, ids.end()) << "sampled token " << t << " with logit -inf";
      ++count[static_cast<std::size_t>(it - ids.begin())];
    }
    double z = 0;
    std::vector<double> want(ids.size(), 0.0);
    for (int i = 0; i < cases[c].kept; ++i) z += want[i] = std::exp(base[i] / p.temperature);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      // The standard error of a frequency over 2000 draws is at most sqrt(.25/2000) = .011,
      // so .05 is over 4 sigma: a correct sampler fails with probability < 1e-4.
      EXPECT_NEAR(count[i] / double(kDraws), want[i] / z, 0.05) << "case " << c << " token " << i;
    }
  }
}

TEST(Sampling, PenaltiesSteerGreedyAwayFromRecentTokens) {
  const std::vector<SamplerParams> penalised{
      {.repeat_penalty = 2.0f}, {.frequency_penalty = 1.0f}, {.presence_penalty = 1.0f}};
  for (unsigned seed = 1; seed <= 5; ++seed) {
    std::mt19937 rng(seed);
    auto l = normal_logits(rng);
    const Token a = argmax(l);
    l[a] = -INFINITY;
    const Token b = argmax(l);
    l[a] = l[b] + 0.1f;  // a small margin that any of the penalties overturns
    for (const auto &p : penalised) {
      Sampler s(model(), p);
      ASSERT_EQ(s.sample(l), a);
      s.accept(a);
      EXPECT_EQ(s.sample(l), b) << "seed " << seed;
      Sampler prompted(model(), p);
      prompted.accept_prompt(std::vector<Token>{a});
      EXPECT_EQ(prompted.sample(l), b) << "seed " << seed;
    }
    Sampler off(model(), {});
    off.accept(a);
    EXPECT_EQ(off.sample(l), a);
    // A window of one token forgets `a` once another token is accepted.
    Sampler window(model(), {.repeat_penalty = 2.0f, .penalty_last_n = 1});
    window.accept(a);
    EXPECT_EQ(window.sample(l), b);
    window.accept(b);
    EXPECT_EQ(window.sample(l), a);
  }
}

TEST(Sampling, PromptTokensReachPenaltiesButNotTheGrammar) {
  const Token one = find_piece("1"), two = find_piece("2"), x = find_piece("x");
  Sampler s(model(), {.repeat_penalty = 2.0f, .grammar = kDigits});
  const auto l = peaks({{one, 3.1f}, {two, 3.0f}, {x, 10.0f}});
  ASSERT_EQ(s.sample(l), one);  // "x" is the argmax but the grammar forbids it
  s.accept_prompt(std::vector<Token>{one, x});
  EXPECT_EQ(s.sample(l), two);
  EXPECT_TRUE(throws_weft([&] { s.accept_prompt(std::vector<Token>{one, -5}); }, weft::Errc::out_of_range, "-5"));
}

TEST(Sampling, GrammarKeepsRandomSamplesInTheLanguage) {
  const std::regex digit_prefixes(prefixes({"[0-9]+", "\\."}));
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    Sampler s(model(), {.temperature = 1.0f, .seed = seed, .grammar = kDigits});
    std::mt19937 rng(seed);
    const auto [text, ended] = generate(s, rng, 20, std::vector<float>(n_vocab()), digit_prefixes);
    EXPECT_FALSE(text.empty());
    if (ended) {
      EXPECT_EQ(text.back(), '.') << text;  // the grammar admits EOG only once complete
    }
  }
}

// The grammar checks the unconstrained pick: a sampler with a grammar takes
// the same token as one without whenever the grammar allows that token, and
// only otherwise draws over the masked vocabulary (then in the language).
TEST(Sampling, GrammarKeepsTheUnconstrainedPickWhenItAllowsIt) {
  // Tokens made of digits only: what the grammar admits until the full stop.
  std::vector<Token> digits;
  for (std::size_t i = 0; i < n_vocab(); ++i) {
    const auto &p = pieces()[i];
    if (!p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      digits.push_back(static_cast<Token>(i));
    }
  }
  ASSERT_GE(digits.size(), 10u);
  auto is_digits = [&](Token t) { return std::find(digits.begin(), digits.end(), t) != digits.end(); };
  std::vector<Token> stops;  // "." (a byte-fallback token spells it too)
  for (std::size_t i = 0; i < n_vocab(); ++i) {
    if (pieces()[i] == ".") stops.push_back(static_cast<Token>(i));
  }
  int kept = 0, redrawn = 0;
  for (std::uint32_t seed : {1u, 2u, 3u, 4u}) {
    for (const float temperature : {0.0f, 1.0f}) {
      const int top_k = seed % 2 ? 40 : 0;
      Sampler with(model(), {.temperature = temperature, .top_k = top_k, .seed = seed, .grammar = kDigits});
      Sampler without(model(), {.temperature = temperature, .top_k = top_k, .seed = seed});
      std::mt19937 rng(seed);
      for (int i = 0; i < 30; ++i) {
        auto l = normal_logits(rng, 1.0f);
        // Every other draw digits lead (the free pick is one), else they
        // trail; the full stop never leads, so the grammar stays open.
        for (Token d : digits) l[static_cast<std::size_t>(d)] += i % 2 ? 8.0f : -2.0f;
        for (Token s : stops) l[static_cast<std::size_t>(s)] = -INFINITY;
        auto probe = without.clone();
        const Token free_pick = probe.sample(l);
        const Token t = with.sample(l);
        ASSERT_TRUE(is_digits(t)) << "seed " << seed << " draw " << i << ": '" << pieces()[static_cast<std::size_t>(t)] << "'";
        if (is_digits(free_pick)) {
          ASSERT_EQ(t, free_pick) << "seed " << seed << " draw " << i;
          ++kept;
        } else {
          ++redrawn;
        }
        // Both drew once (a redraw starts from the same RNG position), and
        // both accept the token kept: they stay in step.
        without = std::move(probe);
        with.accept(t);
        without.accept(t);
      }
    }
  }
  EXPECT_GT(kept, 50);
  EXPECT_GT(redrawn, 50);
}

TEST(Sampling, JsonGrammarCompletes) {
  const char *grammar = R"(root ::= "{" ws "\"name\"" ws ":" ws "\"" [a-z]+ "\"" ws "}"
ws ::= [ ]?)";
  // Structural pieces and end-of-generation get +15 (e^15 outweighs ~5000 letter tokens at
  // N(0, 3^2)) so that the unbounded [a-z]+ closes within a few tokens; the rest is random.
  std::vector<float> bias(n_vocab(), 0.0f);
  for (std::size_t i = 0; i < n_vocab(); ++i) {
    const auto &p = pieces()[i];
    const bool structural = !p.empty() && p.find_first_not_of("{}\": ") == std::string::npos;
    if (structural || model().is_eog(static_cast<Token>(i))) bias[i] = 15.0f;
  }
  const std::vector<std::string> parts{"\\{", " ?", "\"", "n", "a", "m", "e", "\"", " ?",
                                       ":",   " ?", "\"", "[a-z]+", "\"", " ?", "\\}"};
  const std::regex prefix(prefixes(parts));
  std::string whole;
  for (const auto &p : parts) whole += p;
  for (std::uint32_t seed : {5u, 6u, 7u}) {
    Sampler s(model(), {.temperature = 1.0f, .seed = seed, .grammar = grammar});
    std::mt19937 rng(seed);
    const auto [text, ended] = generate(s, rng, 200, bias, prefix);
    EXPECT_TRUE(ended) << "seed " << seed << ": no end after 200 tokens: '" << text << "'";
    EXPECT_TRUE(std::regex_match(text, std::regex(whole))) << "seed " << seed << ": '" << text << "'";
  }
}

TEST(Sampling, AcceptRefusesWhatTheGrammarForbidsAndKeepsState) {
  const Token one = find_piece("1"), dot = find_piece(".");
  Sampler s(model(), {.grammar = kDigits});
  EXPECT_TRUE(throws_weft([&] { s.accept(dot); }, weft::Errc::invalid_argument, "not allowed by the grammar"));
  // End-of-generation before the grammar is complete: refused, not a llama.cpp abort.
  EXPECT_TRUE(throws_weft([&] { s.accept(model().eos()); }, weft::Errc::invalid_argument, "grammar"));
  EXPECT_TRUE(throws_weft([&] { s.accept(model().n_vocab()); }, weft::Errc::out_of_range, "32000"));
  const auto l = peaks({{dot, 5.0f}, {one, 1.0f}});
  EXPECT_EQ(s.sample(l), one);  // still at the start: a digit first
  s.accept(one);
  EXPECT_EQ(s.sample(l), dot);
}

TEST(Sampling, GrammarAdmittingNoTokenIsAnError) {
  // The grammar must start with a digit; give every token that starts with one logit -inf.
  std::vector<float> l(n_vocab(), 0.0f);
  for (std::size_t i = 0; i < n_vocab(); ++i) {
    if (!pieces()[i].empty() && std::isdigit(static_cast<unsigned char>(pieces()[i][0]))) l[i] = -INFINITY;
  }
  Sampler s(model(), {.temperature = 1.0f, .grammar = kDigits});
  EXPECT_TRUE(throws_weft([&] { s.sample(l); }, weft::Errc::invalid_argument, "grammar admits no token"));
  l[find_piece("7")] = 0.0f;
  EXPECT_EQ(s.sample(l), find_piece("7"));
}

TEST(Sampling, InvalidParamsNameFieldAndValue) {
  const float nan = std::nanf("");
  const std::vector<std::pair<SamplerParams, std::string>> bad{
      {{.temperature = -1.0f}, "SamplerParams.temperature = -1"},
      {{.temperature = nan}, "SamplerParams.temperature = nan"},
      {{.top_k = -3}, "SamplerParams.top_k = -3"},
      {{.top_p = 0.0f}, "SamplerParams.top_p = 0 is outside (0, 1]"},
      {{.top_p = 1.5f}, "SamplerParams.top_p = 1.5 is outside (0, 1]"},
      {{.top_p = nan}, "SamplerParams.top_p = nan"},
      {{.min_p = 2.0f}, "SamplerParams.min_p = 2 is outside [0, 1]"},
      {{.repeat_penalty = 0.0f}, "SamplerParams.repeat_penalty = 0"},
      {{.frequency_penalty = INFINITY}, "SamplerParams.frequency_penalty = inf"},
      {{.presence_penalty = nan}, "SamplerParams.presence_penalty = nan"},
      {{.penalty_last_n = -2}, "SamplerParams.penalty_last_n = -2"},
      {{.grammar = kDigits, .grammar_root = ""}, "SamplerParams.grammar_root"},
  };
  for (const auto &[p, needle] : bad) {
    SCOPED_TRACE(needle);
    EXPECT_TRUE(throws_weft([&] { weft::detail::validate(p); }, weft::Errc::invalid_argument, needle));
    EXPECT_TRUE(throws_weft([&] { Sampler(model(), p); }, weft::Errc::invalid_argument, needle));
  }
  EXPECT_NO_THROW(weft::detail::validate({.temperature = 0.7f, .top_p = 1.0f, .min_p = 1.0f, .penalty_last_n = -1}));
}

TEST(Sampling, InvalidGrammarQuotesLlamaCpp) {
  EXPECT_TRUE(throws_weft([&] { Sampler(model(), {.grammar = "root ::= [0-9"}); }, weft::Errc::invalid_argument,
                          "failed to parse grammar"));
  EXPECT_TRUE(throws_weft([&] { Sampler(model(), {.grammar = R"(start ::= "a")"}); }, weft::Errc::invalid_argument,
                          "does not contain a 'root' symbol"));
  // The same grammar with its own start rule is fine and constrains sampling.
  Sampler s(model(), {.grammar = R"(start ::= "a")", .grammar_root = "start"});
  std::mt19937 rng(1);
  EXPECT_EQ(model().token_piece(s.sample(normal_logits(rng))), "a");
}

TEST(Sampling, BadLogitsAreRefused) {
  Sampler s(model(), {.temperature = 1.0f});
  std::vector<float> l(n_vocab() - 1, 0.0f);
  EXPECT_TRUE(throws_weft([&] { s.sample(l); }, weft::Errc::invalid_argument, std::to_string(n_vocab() - 1)));
  l.assign(n_vocab() + 5, 0.0f);
  EXPECT_TRUE(throws_weft([&] { s.sample(l); }, weft::Errc::invalid_argument, std::to_string(n_vocab())));
  l.assign(n_vocab(), -INFINITY);
  EXPECT_TRUE(throws_weft([&] { s.sample(l); }, weft::Errc::invalid_argument, "-inf"));
  l.assign(n_vocab(), 0.0f);
  l[77] = std::nanf("");
  EXPECT_TRUE(throws_weft([&] { s.sample(l); }, weft::Errc::invalid_argument, "logits[77] is NaN"));
}
