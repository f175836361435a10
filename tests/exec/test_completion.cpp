// Completion signals: GenerateParams::on_finish on every way a generation
// ends, WorkerParams::on_step, and Executor::n_ctx().
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "reference.hpp"
#include "weft/executor.hpp"

using weft_test::random_tokens;
using weft_test::run_until_idle;

namespace {

weft::ExecutorParams params() { return {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 8, .n_threads = 2}; }

// What one generation's callbacks saw, in order.
struct Seen {
  std::mutex mu;
  std::vector<weft::Token> tokens;  // on_token's
  int finishes = 0;
  bool token_after_finish = false;
  weft::GenerationResult result;  // on_finish's
  bool done_when_finished = false;
  std::thread::id finish_thread;

  weft::GenerateParams hook(weft::GenerateParams p, const weft::Generation *gen_slot) {
    p.on_token = [this](weft::Token t, std::string_view) {
      std::lock_guard lk(mu);
      if (finishes > 0) token_after_finish = true;
      tokens.push_back(t);
    };
    p.on_finish = [this, gen_slot](const weft::GenerationResult &r) {
      std::lock_guard lk(mu);
      ++finishes;
      result = r;
      finish_thread = std::this_thread::get_id();
      done_when_finished = gen_slot->done();
    };
    return p;
  }
};

void expect_finished_once(Seen &s, const weft::Generation &g, weft::FinishReason reason) {
  std::lock_guard lk(s.mu);
  EXPECT_EQ(s.finishes, 1);
  EXPECT_FALSE(s.token_after_finish);
  EXPECT_TRUE(s.done_when_finished);
  EXPECT_EQ(s.result.reason, reason);
  const auto r = g.result();
  EXPECT_EQ(s.result.reason, r.reason);
  EXPECT_EQ(s.result.tokens, r.tokens);
  EXPECT_EQ(s.result.text, r.text);
  EXPECT_EQ(s.tokens, r.tokens);  // every token's callback ran before it
}

}  // namespace

TEST(Completion, OnFinishRunsOnceAfterTheLastTokenForEveryEnding) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(21);
  weft::Executor ex(m, params());
  // Each ending, each with its own generation in one executor.
  auto a = ex.create(), b = ex.create(), c = ex.create(), d = ex.create(), e = ex.create();
  for (auto *conv : {&a, &b, &c, &d, &e}) conv->prompt(random_tokens(rng, m, 12, true));
  Seen sa, sb, sc, sd, se;
  weft::Generation ga, gb, gc, gd, ge;
  ga = a.generate(sa.hook({.max_tokens = 5}, &ga));
  gb = b.generate(sb.hook({.max_tokens = 500}, &gb));
  gc = c.generate(sc.hook({.max_tokens = 500}, &gc));
  // Once "yes" or "no" is out, only an end token is allowed, and it is
  // banned: an error.
  const weft::SamplerParams yes_no{.grammar = R"(root ::= "yes" | "no")"};
  gd = d.generate(sd.hook({.max_tokens = 10, .sampler = yes_no, .ignore_eos = true}, &gd));
  ge = e.generate(se.hook({.max_tokens = 500}, &ge));
  for (int i = 0; i < 8; ++i) ex.step();
  std::thread::id stepper_id;
  std::thread other([&] {
    gb.cancel();   // on a thread that is not the stepper's
    c.rewind(1);   // ends gc (cancelled)
  });
  other.join();
  {
    std::lock_guard lk(sb.mu);
    EXPECT_EQ(sb.finishes, 0) << "runs on the stepping thread, not the caller's";
  }
  std::thread stepper([&] {
    stepper_id = std::this_thread::get_id();
    for (int i = 0; i < 4; ++i) ex.step();
  });
  stepper.join();
  expect_finished_once(sa, ga, weft::FinishReason::max_tokens);
  expect_finished_once(sb, gb, weft::FinishReason::cancelled);
  expect_finished_once(sc, gc, weft::FinishReason::cancelled);
  expect_finished_once(sd, gd, weft::FinishReason::error);
  EXPECT_EQ(sd.result.error->code(), weft::Errc::invalid_argument);
  EXPECT_EQ(sb.finish_thread, stepper_id);
  EXPECT_EQ(sc.finish_thread, stepper_id);
  e.dispose();
  run_until_idle(ex);
  expect_finished_once(se, ge, weft::FinishReason::cancelled);

  // A full context.
  weft::Executor small(m, {.n_ctx = 256, .n_batch = 64, .n_seq_max = 2, .n_threads = 2});
  auto f = small.create();
  f.prompt(random_tokens(rng, m, static_cast<int>(small.n_ctx()) - 4, true));
  Seen sf;
  weft::Generation gf;
  gf = f.generate(sf.hook({.max_tokens = 100, .ignore_eos = true}, &gf));
  run_until_idle(small);
  expect_finished_once(sf, gf, weft::FinishReason::context_full);
}

TEST(Completion, OnFinishOfARunningGenerationRunsWhenTheExecutorGoes) {
  const auto &m = weft_test::tiny();
  Seen s;
  weft::Generation g;
  std::optional<weft::Conversation> outlives;  // so the executor ends it, not a dispose
  {
    weft::Executor ex(m, params());
    outlives = ex.create();
    outlives->prompt("A long reply, please.", {.add_bos = true});
    g = outlives->generate(s.hook({.max_tokens = 100}, &g));
    ex.step();
    ex.step();
    std::lock_guard lk(s.mu);
    EXPECT_EQ(s.finishes, 0);
  }
  expect_finished_once(s, g, weft::FinishReason::cancelled);
}

TEST(Completion, OnFinishWithTheWorkerWakesAWaiterWithoutPolling) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  ex.start({.idle_wait = std::chrono::seconds(30)});  // only new work may wake it
  for (int round = 0; round < 4; ++round) {
    auto c = ex.create();
    c.prompt("Tell me a story.", {.add_bos = true});
    std::mutex mu;
    std::condition_variable cv;
    bool ended = false;
    // Even rounds end at max_tokens; odd ones are cancelled long before it
    // (few tokens either way: this runs under TSan too, ~0.1 s a step).
    auto on_finish = [&](const weft::GenerationResult &) {
      std::lock_guard lk(mu);
      ended = true;
      cv.notify_all();
    };
    auto g = c.generate({.max_tokens = round % 2 == 0 ? 6u : 100000u, .on_finish = on_finish});
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * round));
    if (round % 2 == 1) g.cancel();  // the worker, asleep or not, runs on_finish
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return ended; })) << "round " << round;
    EXPECT_TRUE(g.done());
  }
  ex.stop();
}

TEST(Completion, AThrowingOnFinishIsIgnored) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto a = ex.create(), b = ex.create();
  a.prompt("One", {.add_bos = true});
  b.prompt("Two", {.add_bos = true});
  auto ga = a.generate({.max_tokens = 3, .on_finish = [](const weft::GenerationResult &) { throw 7; }});
  auto gb = b.generate({.max_tokens = 6});
  run_until_idle(ex);
  EXPECT_EQ(ga.reason(), weft::FinishReason::max_tokens);
  EXPECT_EQ(gb.reason(), weft::FinishReason::max_tokens);
  EXPECT_EQ(a.n_tokens(), a.tokens().size());
}

TEST(Completion, OnStepSeesEveryWorkerStep) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(8);
  weft::Executor ex(m, params());
  std::mutex mu;
  std::uint64_t sampled = 0, decoded = 0, steps = 0;
  std::thread::id where;
  std::vector<weft::Generation> gens;
  std::vector<weft::Conversation> convs;
  std::size_t prompted = 0;
  for (int i = 0; i < 5; ++i) {
    convs.push_back(ex.create());
    const auto p = random_tokens(rng, m, 8 + 7 * i, true);
    prompted += p.size();
    convs.back().prompt(p);
    gens.push_back(convs.back().generate({.max_tokens = static_cast<std::uint32_t>(3 + i)}));
  }
  ex.start({.on_step = [&](const weft::StepResult &r) {
    std::lock_guard lk(mu);
    sampled += r.tokens_sampled;
    decoded += r.tokens_decoded;
    ++steps;
    where = std::this_thread::get_id();
  }});
  for (auto &g : gens) ASSERT_TRUE(g.wait_for(std::chrono::seconds(60)));
  ex.stop();
  std::size_t generated = 0;
  for (auto &g : gens) generated += g.n_tokens();
  std::lock_guard lk(mu);
  EXPECT_EQ(sampled, generated);
  const auto st = ex.stats();  // every step was the worker's
  EXPECT_EQ(sampled, st.tokens_sampled);
  EXPECT_EQ(decoded, st.tokens_decoded);
  EXPECT_EQ(steps, st.steps);
  // The prompts and every sampled token, but maybe each generation's last.
  EXPECT_GE(decoded, prompted + generated - gens.size());
  EXPECT_LE(decoded, prompted + generated);
  EXPECT_NE(where, std::this_thread::get_id());
  EXPECT_EQ(ex.stats().worker_errors, 0u);
}

TEST(Completion, NCtxIsTheStatsCellCount) {
  const auto &m = weft_test::tiny();
  for (std::uint32_t asked : {100u, 256u, 1000u}) {
    weft::Executor ex(m, {.n_ctx = asked, .n_batch = 64, .n_seq_max = 2, .n_threads = 2});
    EXPECT_EQ(ex.n_ctx(), ex.stats().n_ctx);
    EXPECT_GE(ex.n_ctx(), asked);
  }
}
