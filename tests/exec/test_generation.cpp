// generate(): greedy output against an independent greedy decode, many
// generations per batch, stop strings, cancel, grammars, context limits.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <regex>
#include <thread>

#include "reference.hpp"
#include "weft/executor.hpp"

using weft_test::random_tokens;
using weft_test::run_until_idle;
using weft_test::reference_logits;

namespace {


// Greedy continuation decoded independently on raw llama.cpp, cut where the
// top two logits are closer than the comparison noise allows. `ban_eog`:
// end-of-generation tokens never chosen (as GenerateParams::ignore_eos).
std::vector<weft::Token> reference_greedy(const weft::Model &m, std::vector<weft::Token> history, int n,
                                          bool ban_eog = false) {
  std::vector<weft::Token> out;
  const double tol = weft_test::logits_tolerance(m);
  for (int i = 0; i < n; ++i) {
    auto lg = reference_logits(m, history);
    double sq = 0;
    for (float x : lg) sq += double(x) * x;
    const double sigma = std::sqrt(tol * sq / static_cast<double>(lg.size()));
    if (ban_eog) {
      for (std::size_t t = 0; t < lg.size(); ++t) {
        if (m.is_eog(static_cast<weft::Token>(t))) lg[t] = -INFINITY;
      }
    }
    auto best = std::max_element(lg.begin(), lg.end());
    float second = -INFINITY;
    for (auto it = lg.begin(); it != lg.end(); ++it) {
      if (it != best) second = std::max(second, *it);
    }
    if (*best - second < 10 * sigma) break;  // too close to call
    out.push_back(static_cast<weft::Token>(best - lg.begin()));
    history.push_back(out.back());
  }
  return out;
}

weft::ExecutorParams params(std::uint32_t n_ctx = 1024) {
  return {.n_ctx = n_ctx, .n_batch = 64, .n_seq_max = 8, .n_threads = 2};
}

}  // namespace

TEST(Generation, GreedyMatchesIndependentDecodeWhileBatchedTogether) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(5);
  weft::Executor ex(m, params());
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<weft::Token>> prompts;
  std::vector<weft::Generation> gens;
  for (int i = 0; i < 6; ++i) {
    convs.push_back(ex.create());
    prompts.push_back(random_tokens(rng, m, 3 + static_cast<int>(rng() % 30), true));
    convs.back().prompt(prompts.back());
    gens.push_back(convs.back().generate({.max_tokens = 12}));
  }
  std::uint32_t widest = 0;
  for (int i = 0; i < 1000 && !std::all_of(gens.begin(), gens.end(), [](auto &g) { return g.done(); }); ++i) {
    const auto r = ex.step();
    widest = std::max(widest, r.tokens_sampled);
  }
  EXPECT_EQ(widest, 6u) << "all six sampled in the same step";
  for (int i = 0; i < 6; ++i) {
    const auto r = gens[i].result();
    EXPECT_EQ(r.reason, weft::FinishReason::max_tokens);
    ASSERT_EQ(r.tokens.size(), 12u);
    const auto ref = reference_greedy(m, prompts[i], 12);
    ASSERT_GE(ref.size(), 1u);
    EXPECT_TRUE(std::equal(ref.begin(), ref.end(), r.tokens.begin())) << "conversation " << i;
    std::string pieces;  // mid-conversation text keeps its leading space
    for (auto t : r.tokens) pieces += m.token_piece(t);
    EXPECT_EQ(r.text, pieces);
    // Every sampled token is part of the conversation; the last is decoded next step.
    auto expect = prompts[i];
    expect.insert(expect.end(), r.tokens.begin(), r.tokens.end());
    EXPECT_EQ(convs[i].tokens(), expect);
  }
  run_until_idle(ex);
  for (auto &c : convs) EXPECT_EQ(c.n_queued(), 0u);
}

TEST(Generation, StopStringAcrossTokenBoundary) {
  const auto &m = weft_test::tiny();
  int exercised = 0;
  for (unsigned seed = 1; seed <= 8; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(m, params());
    auto base = ex.create();
    base.prompt(random_tokens(rng, m, 8, true));
    run_until_idle(ex);
    auto probe = base.fork();
    auto g = probe.generate({.max_tokens = 16});
    run_until_idle(ex);
    const auto free_run = g.result();
    // A stop string made of the end of one piece and the start of the next.
    std::string stop;
    std::size_t offset = 0, at = std::string::npos;
    for (std::size_t k = 0; k + 1 < free_run.tokens.size() && at == std::string::npos; ++k) {
      const auto a = m.token_piece(free_run.tokens[k]), b = m.token_piece(free_run.tokens[k + 1]);
      offset += a.size();
      if (a.size() >= 2 && !b.empty()) {
        stop = a.substr(a.size() - 2) + b.substr(0, 1);
        at = free_run.text.find(stop);
      }
    }
    if (at == std::string::npos) continue;  // no usable boundary in this run
    ++exercised;
    std::string streamed;
    auto c = base.fork();
    auto gs = c.generate({.max_tokens = 16, .stop = {stop}, .on_token = [&](weft::Token, std::string_view t) {
                            streamed += t;
                          }});
    run_until_idle(ex);
    const auto r = gs.result();
    EXPECT_EQ(r.reason, weft::FinishReason::stop_string) << "seed " << seed << " stop '" << stop << "'";
    EXPECT_EQ(r.text, free_run.text.substr(0, at));
    EXPECT_EQ(streamed, r.text);
    EXPECT_EQ(streamed.find(stop), std::string::npos);
  }
  EXPECT_GE(exercised, 5);
}

TEST(Generation, CancelLeavesConversationConsistent) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(9);
  weft::Executor ex(m, params());
  auto c = ex.create();
  const auto prompt = random_tokens(rng, m, 10, true);
  c.prompt(prompt);
  auto g = c.generate({.max_tokens = 50});
  for (int i = 0; i < 5; ++i) ex.step();
  g.cancel();
  EXPECT_TRUE(g.done());
  EXPECT_EQ(g.reason(), weft::FinishReason::cancelled);
  EXPECT_FALSE(c.generation().has_value());
  const auto r = g.result();
  EXPECT_GE(r.tokens.size(), 3u);
  EXPECT_LT(r.tokens.size(), 50u);
  run_until_idle(ex);
  auto history = prompt;
  history.insert(history.end(), r.tokens.begin(), r.tokens.end());
  EXPECT_EQ(c.tokens(), history);
  EXPECT_LT(weft_test::nmse(c.logits(), reference_logits(m, history)), weft_test::logits_tolerance(m));
  // It can generate again, and a cancelled handle stays cancelled.
  auto g2 = c.generate({.max_tokens = 3});
  run_until_idle(ex);
  EXPECT_EQ(g2.reason(), weft::FinishReason::max_tokens);
  EXPECT_EQ(g.reason(), weft::FinishReason::cancelled);
}

TEST(Generation, GrammarConstrainsOutput) {
  const auto &m = weft_test::tiny();
  const std::regex json(R"(\{"name": "[a-z]{1,3}"\})");
  for (unsigned seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(m, params());
    auto c = ex.create();
    c.prompt(random_tokens(rng, m, 5, true));
    auto yes_no = c.fork();
    auto g = c.generate({.max_tokens = 40,
                         .sampler = weft::SamplerParams{
                             .temperature = 1.0f,
                             .seed = seed,
                             .grammar = R"(root ::= "{\"name\": \"" [a-z] [a-z]? [a-z]? "\"}")"}});
    auto g2 = yes_no.generate({.max_tokens = 10, .sampler = weft::SamplerParams{.grammar = R"(root ::= "yes" | "no")"}});
    run_until_idle(ex);
    const auto r = g.result();
    EXPECT_EQ(r.reason, weft::FinishReason::end_of_generation) << r.text;
    EXPECT_TRUE(std::regex_match(r.text, json)) << r.text;
    EXPECT_TRUE(g2.text() == "yes" || g2.text() == "no") << g2.text();
    EXPECT_EQ(g2.reason(), weft::FinishReason::end_of_generation);
  }
}

TEST(Generation, IgnoreEosMatchesAGreedyDecodeThatNeverPicksAnEndToken) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(m, params());
    std::vector<weft::Conversation> convs;
    std::vector<std::vector<weft::Token>> prompts;
    std::vector<weft::Generation> gens;
    for (int i = 0; i < 4; ++i) {
      convs.push_back(ex.create());
      prompts.push_back(random_tokens(rng, m, 3 + static_cast<int>(rng() % 20), true));
      convs.back().prompt(prompts.back());
      gens.push_back(convs.back().generate({.max_tokens = 10, .ignore_eos = true}));
    }
    run_until_idle(ex);
    for (int i = 0; i < 4; ++i) {
      const auto r = gens[i].result();
      EXPECT_EQ(r.reason, weft::FinishReason::max_tokens) << "seed " << seed << " conversation " << i;
      ASSERT_EQ(r.tokens.size(), 10u);
      for (auto t : r.tokens) EXPECT_FALSE(m.is_eog(t));
      const auto ref = reference_greedy(m, prompts[i], 10, true);
      ASSERT_GE(ref.size(), 1u);
      EXPECT_TRUE(std::equal(ref.begin(), ref.end(), r.tokens.begin())) << "seed " << seed << " conversation " << i;
    }
  }
}

TEST(Generation, IgnoreEosWhereOnlyAnEndTokenIsLeftIsAnErrorNotAnEnd) {
  // "yes" | "no": once complete, the grammar admits only end-of-generation.
  const auto &m = weft_test::tiny();
  const weft::SamplerParams yes_no{.grammar = R"(root ::= "yes" | "no")"};
  std::mt19937 rng(3);
  weft::Executor ex(m, params());
  auto plain = ex.create();
  plain.prompt(random_tokens(rng, m, 6, true));
  auto ignoring = plain.fork();
  auto g_plain = plain.generate({.max_tokens = 10, .sampler = yes_no});
  auto g_ignoring = ignoring.generate({.max_tokens = 10, .sampler = yes_no, .ignore_eos = true});
  run_until_idle(ex);
  EXPECT_EQ(g_plain.reason(), weft::FinishReason::end_of_generation);
  EXPECT_TRUE(m.is_eog(g_plain.result().tokens.back()));
  const auto r = g_ignoring.result();
  ASSERT_EQ(r.reason, weft::FinishReason::error) << r.text;
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->code(), weft::Errc::invalid_argument);
  EXPECT_TRUE(r.text == "yes" || r.text == "no") << r.text;
  for (auto t : r.tokens) EXPECT_FALSE(m.is_eog(t));
  EXPECT_FALSE(ignoring.error().has_value());  // the conversation goes on
  ignoring.prompt(std::vector<weft::Token>{m.bos()});
  run_until_idle(ex);
  EXPECT_TRUE(ignoring.has_logits());
}

TEST(Generation, CallbacksRunOnTheSteppingThreadAndStreamTheText) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(3);
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt(random_tokens(rng, m, 6, true));
  std::vector<weft::Token> seen;
  std::string text;
  std::thread::id where;
  auto g = c.generate({.max_tokens = 10, .on_token = [&](weft::Token t, std::string_view piece) {
                         seen.push_back(t);
                         text += piece;
                         where = std::this_thread::get_id();
                       }});
  std::thread stepper([&] { run_until_idle(ex); });
  const auto stepper_id = stepper.get_id();
  stepper.join();
  EXPECT_EQ(where, stepper_id);
  EXPECT_EQ(seen, g.result().tokens);
  EXPECT_EQ(text, g.text());
}

TEST(Generation, ThrowingCallbackCancels) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt("Hello there", {.add_bos = true});
  auto g = c.generate({.max_tokens = 10, .on_token = [](weft::Token, std::string_view) { throw 42; }});
  run_until_idle(ex);
  EXPECT_EQ(g.reason(), weft::FinishReason::cancelled);
  EXPECT_EQ(g.n_tokens(), 1u);
}

TEST(Generation, StopsWhenTheContextIsFull) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(4);
  weft::Executor ex(m, {.n_ctx = 256, .n_batch = 64, .n_seq_max = 2, .n_threads = 2});
  const std::uint32_t n_ctx = ex.stats().n_ctx;
  auto c = ex.create();
  c.prompt(random_tokens(rng, m, static_cast<int>(n_ctx) - 4, true));
  auto g = c.generate({.max_tokens = 100});
  run_until_idle(ex);
  EXPECT_EQ(g.reason(), weft::FinishReason::context_full);
  EXPECT_EQ(g.n_tokens(), 4u);
  EXPECT_EQ(c.n_decoded(), n_ctx);
  EXPECT_EQ(ex.cells_free(), 0u);
}

TEST(Generation, WaitForIsBounded) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt("Hi", {.add_bos = true});
  auto g = c.generate({.max_tokens = 2});
  // Nobody steps: the wait must return false after its timeout.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(g.wait_for(std::chrono::milliseconds(20)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
  std::thread stepper([&] { run_until_idle(ex); });
  EXPECT_TRUE(g.wait_for(std::chrono::seconds(30)));
  stepper.join();
}

TEST(Generation, DoneOnlyAfterTheLastCallback) {
  // A waiter that sees done() must also see every callback's effect.
  const auto &m = weft_test::tiny();
  for (int round = 0; round < 5; ++round) {
    weft::Executor ex(m, params());
    auto c = ex.create();
    c.prompt("Count the callbacks.", {.add_bos = true});
    std::atomic<std::size_t> calls{0};
    auto g = c.generate({.max_tokens = 4, .on_token = [&](weft::Token, std::string_view) {
                           std::this_thread::sleep_for(std::chrono::milliseconds(2));  // widen the window
                           ++calls;
                         }});
    ex.start();
    ASSERT_TRUE(g.wait_for(std::chrono::seconds(60)));
    EXPECT_EQ(calls.load(), g.n_tokens());
    ex.stop();
  }
}

// A generating conversation samples from llama.cpp's output in place and holds
// no logits of its own; every way out of a generation mid-way (rewind, cancel,
// fork, save and load) must still leave logits equal to a fresh decode of the
// history, and a greedy continuation equal to an independent one.
TEST(Generation, EditsMidGenerationLeaveLogitsOfAFreshDecode) {
  const auto &m = weft_test::tiny();
  const double tol = weft_test::logits_tolerance(m);
  for (unsigned seed = 1; seed <= 10; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(m, params());
    std::vector<weft::Conversation> convs;
    std::vector<weft::Generation> gens;
    for (int i = 0; i < 3; ++i) {
      convs.push_back(ex.create());
      convs.back().prompt(random_tokens(rng, m, 4 + static_cast<int>(rng() % 12), true));
      gens.push_back(convs.back().generate(
          {.max_tokens = 40, .sampler = weft::SamplerParams{.temperature = 0.8f, .seed = seed}, .ignore_eos = true}));
    }
    const int steps = 2 + static_cast<int>(rng() % 5);
    for (int i = 0; i < steps; ++i) ex.step();
    const int action = static_cast<int>(seed % 5);
    auto &c = convs[rng() % convs.size()];
    std::optional<weft::Conversation> other;
    if (action == 0) {
      c.rewind(1);  // only the queued sampled token: the last decoded one is left without logits
    } else if (action == 1) {
      c.rewind(static_cast<std::uint32_t>(2 + rng() % 3));
    } else if (action == 2) {
      c.generation()->cancel();
    } else if (action == 3) {
      other = c.fork();
    } else {
      other = ex.load(c.save());
    }
    run_until_idle(ex);
    for (auto *conv : {&c, other ? &*other : nullptr}) {
      if (!conv) continue;
      const auto history = conv->tokens();
      ASSERT_TRUE(conv->has_logits()) << "seed " << seed << " action " << action;
      EXPECT_LT(weft_test::nmse(conv->logits(), reference_logits(m, history)), tol)
          << "seed " << seed << " action " << action;
      auto g = conv->generate({.max_tokens = 6, .sampler = weft::SamplerParams{}, .ignore_eos = true});
      run_until_idle(ex);
      const auto ref = reference_greedy(m, history, 6, true);
      const auto got = g.result().tokens;
      ASSERT_EQ(got.size(), 6u) << "seed " << seed;
      EXPECT_TRUE(std::equal(ref.begin(), ref.end(), got.begin())) << "seed " << seed << " action " << action;
    }
  }
}
