// The background worker, wall-clock budgets, hard deadlines and the event
// queue (issue: threads and frames).
#include <gtest/gtest.h>

#include <future>
#include <sys/resource.h>

#include <map>
#include <random>
#include <thread>

#include "exec/test_access.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"

using weft_test::random_tokens;
using weft_test::reference_logits;

namespace {

weft::ExecutorParams params(std::uint32_t n_batch = 64, std::uint32_t n_ubatch = 0) {
  return {.n_ctx = 1024, .n_batch = n_batch, .n_ubatch = n_ubatch, .n_seq_max = 8, .n_threads = 2};
}

void expect_logits_of(const weft::Conversation &c, const std::vector<weft::Token> &history) {
  const auto &m = weft_test::tiny();
  ASSERT_TRUE(c.has_logits());
  ASSERT_EQ(c.tokens(), history);
  EXPECT_LT(weft_test::nmse(c.logits(), reference_logits(m, history)), weft_test::logits_tolerance(m));
}

template <class Fn>
bool throws_weft_invalid(Fn &&fn) {
  return static_cast<bool>(weft_test::throws_weft(std::forward<Fn>(fn), weft::Errc::invalid_argument));
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

TEST(Worker, GeneratesWhileOtherThreadsPromptAndWait) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(1);
  weft::Executor ex(m, params());
  ex.start();
  EXPECT_TRUE(ex.running());
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<weft::Token>> hist;
  std::vector<weft::Generation> gens;
  for (int i = 0; i < 4; ++i) {
    convs.push_back(ex.create());
    hist.push_back(random_tokens(rng, m, 20 + 10 * i, true));
    convs.back().prompt(hist.back());
    gens.push_back(convs.back().generate({.max_tokens = 6}));
  }
  for (auto &g : gens) ASSERT_TRUE(g.wait_for(std::chrono::seconds(60)));
  // The worker decodes each final token too; wait for that, bounded.
  for (int i = 0; i < 600 && ex.stats().queued_tokens > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ex.stop();
  EXPECT_FALSE(ex.running());
  for (std::size_t i = 0; i < convs.size(); ++i) {
    auto h = hist[i];
    const auto r = gens[i].result();
    h.insert(h.end(), r.tokens.begin(), r.tokens.end());
    expect_logits_of(convs[i], h);
  }
}

// With a worker, a load's KV data goes in at the worker's next boundary; a
// prompt right after the load (before that boundary) once claimed a slot of
// its own, the import then took another, and the first stayed held by a
// conversation long gone: slots leaked and a dangling holder was read.
TEST(Worker, PromptRightAfterLoadHoldsOneSlot) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(7);
  auto p = params();
  p.n_seq_max = 4;
  weft::Executor ex(m, p);
  const auto history = random_tokens(rng, m, 40, true);
  std::vector<std::uint8_t> bytes;
  {
    auto src = ex.create();
    src.prompt(history);
    ex.step();
    bytes = src.save();
  }
  ex.start();
  // More rounds than slots: each leaked slot would be gone for good.
  for (int round = 0; round < 12; ++round) {
    auto c = ex.load(bytes);
    const auto more = random_tokens(rng, m, 5, false);
    c.prompt(more);
    auto g = c.generate({.max_tokens = 2});
    ASSERT_TRUE(g.wait_for(std::chrono::seconds(60))) << "round " << round;
    ASSERT_EQ(g.reason(), weft::FinishReason::max_tokens) << "round " << round;
    for (int i = 0; i < 600 && ex.stats().queued_tokens > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto h = history;
    h.insert(h.end(), more.begin(), more.end());
    const auto r = g.result();
    h.insert(h.end(), r.tokens.begin(), r.tokens.end());
    expect_logits_of(c, h);
    EXPECT_EQ(ex.stats().slots_used, 1u) << "round " << round << ": only this conversation holds a slot";
    c.dispose();
  }
  ex.stop();
  ex.step();  // the last dispose is settled at a boundary
  EXPECT_EQ(ex.stats().slots_used, 0u);
}

TEST(Worker, SleepsWhenIdleAndWakesOnWork) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  // An idle wait far longer than the test waits: finishing at all proves
  // the new work woke the worker (robust to a loaded machine).
  ex.start({.idle_wait = std::chrono::milliseconds(120000)});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double cpu0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  // A spinning worker would burn ~0.4 s of CPU here.
  EXPECT_LT(cpu_seconds() - cpu0, 0.05);
  // New work wakes it long before idle_wait runs out.
  auto c = ex.create();
  c.prompt("Wake up, worker.", {.add_bos = true});
  auto g = c.generate({.max_tokens = 2});
  EXPECT_TRUE(g.wait_for(std::chrono::seconds(60)));
  ex.stop();
}

TEST(Worker, StopHandsBackQueuedWork) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(2);
  weft::Executor ex(m, params(16));
  auto c = ex.create();
  const auto h = random_tokens(rng, m, 600, true);
  ex.start({.budget = {.max_tokens = 8}});
  c.prompt(h);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ex.stop();
  ex.stop();  // idempotent
  const auto queued = c.n_queued();
  EXPECT_EQ(c.n_decoded() + queued, h.size());  // nothing lost at the hand-back
  while (!ex.step().idle) {
  }
  expect_logits_of(c, h);
  EXPECT_TRUE(throws_weft_invalid([&] { ex.start({.idle_wait = std::chrono::milliseconds(0)}); }));
  // A budget every step would refuse is refused up front, not in a silent loop.
  EXPECT_TRUE(throws_weft_invalid([&] { ex.start({.budget = {.max_time = std::chrono::microseconds(0)}}); }));
  EXPECT_TRUE(throws_weft_invalid([&] { ex.start({.budget = {.max_tokens = 17}}); }));
  EXPECT_FALSE(ex.running());
}

TEST(Worker, DestructorStopsTheWorker) {
  const auto &m = weft_test::tiny();
  weft::Generation g;
  {
    weft::Executor ex(m, params());
    auto c = ex.create();
    c.prompt("Never finished.", {.add_bos = true});
    g = c.generate({.max_tokens = 1000});
    ex.start();
  }
  EXPECT_TRUE(g.done());
}

TEST(Budget, MaxTimeSizesTheBatchWithinLimits) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(4);
  weft::Executor ex(m, params(256));
  auto c = ex.create();
  c.prompt(random_tokens(rng, m, 900, true));
  for (int i = 0; i < 6; ++i) ex.step({.max_tokens = 16u << (i % 4)});  // teach the cost model
  EXPECT_GE(ex.stats().cost_model_samples, 6u);
  const auto tiny_step = ex.step({.max_time = std::chrono::microseconds(1)});
  EXPECT_GE(tiny_step.tokens_decoded, 1u);
  EXPECT_LT(tiny_step.tokens_decoded, 256u);
  const auto big_step = ex.step({.max_time = std::chrono::seconds(100)});
  EXPECT_EQ(big_step.tokens_decoded, 256u);  // never more than n_batch
  const auto capped = ex.step({.max_tokens = 10, .max_time = std::chrono::seconds(100)});
  EXPECT_EQ(capped.tokens_decoded, 10u);
  EXPECT_TRUE(throws_weft_invalid([&] { ex.step({.max_time = std::chrono::microseconds(0)}); }));
}

// Invariant 7 under hard deadlines: abort at every micro-batch position.
TEST(Deadline, AbortAtEveryMicroBatchLosesNothing) {
  const auto &m = weft_test::tiny();
  for (int abort_at = 0; abort_at < 8; ++abort_at) {
    std::mt19937 rng(50 + abort_at);
    weft::Executor ex(m, params(64, 8));  // a full step is 8 micro-batches
    std::vector<weft::Conversation> convs;
    std::vector<std::vector<weft::Token>> hist;
    for (int i = 0; i < 3; ++i) {
      convs.push_back(ex.create());
      hist.push_back(random_tokens(rng, m, 10 + static_cast<int>(rng() % 40), true));
      convs.back().prompt(hist.back());
    }
    int call = 0;
    bool abort_now = false;
    weft::detail::set_decode_hook(ex, [&](const llama_batch &) {
      abort_now = call++ == abort_at;
      return 0;
    });
    weft::detail::set_abort_hook(ex, [&] { return abort_now; });
    const auto far = std::chrono::steady_clock::now() + std::chrono::hours(1);
    const auto r = ex.step({.deadline = far});
    EXPECT_TRUE(r.deadline_hit) << "abort at " << abort_at;
    EXPECT_EQ(r.tokens_decoded, static_cast<std::uint32_t>(8 * abort_at)) << "kept what finished before";
    EXPECT_EQ(r.failed, 0u);
    std::uint64_t decoded = r.tokens_decoded;
    weft::detail::set_abort_hook(ex, nullptr);
    for (int i = 0; i < 100; ++i) {
      const auto s = ex.step({.deadline = far});
      decoded += s.tokens_decoded;
      if (s.idle) break;
    }
    std::uint64_t total = 0;
    for (auto &h : hist) total += h.size();
    EXPECT_EQ(decoded, total) << "every token decoded exactly once";
    for (std::size_t i = 0; i < convs.size(); ++i) expect_logits_of(convs[i], hist[i]);
    for (auto &cv : convs) {
      // The cache holds exactly the history: nothing stale from the abort.
      const auto &core = weft::detail::TestAccess::core(ex);
      std::lock_guard lock(core.mu);
      const auto &conv = *core.convs.all.at(cv.id());
      EXPECT_EQ(llama_memory_seq_pos_max(llama_get_memory(core.ctx), conv.kv.seq),
                static_cast<llama_pos>(conv.n_decoded()) - 1);
    }
  }
}

TEST(Deadline, PassedDeadlineDecodesNothing) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt("Too late.", {.add_bos = true});
  const auto r = ex.step({.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1)});
  EXPECT_TRUE(r.deadline_hit);
  EXPECT_EQ(r.tokens_decoded, 0u);
  EXPECT_EQ(c.n_queued(), c.n_tokens());
  EXPECT_EQ(ex.stats().deadline_stops, 1u);
}

TEST(Events, TokensFinishAndErrorsArriveInOrder) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(6);
  auto p = params();
  p.events = true;
  weft::Executor ex(m, p);
  auto a = ex.create();
  auto b = ex.create();
  a.prompt(random_tokens(rng, m, 12, true));
  b.prompt(random_tokens(rng, m, 9, true));
  auto ga = a.generate({.max_tokens = 5});
  auto gb = b.generate({.max_tokens = 3});
  while (!ex.step().idle) {
  }
  std::map<std::uint64_t, std::vector<weft::Token>> tokens;
  std::map<std::uint64_t, std::string> text;
  std::map<std::uint64_t, int> finished;
  for (const auto &ev : ex.poll_events()) {
    if (ev.kind == weft::EventKind::token) {
      EXPECT_EQ(finished[ev.conversation], 0) << "no token after finished";
      tokens[ev.conversation].push_back(ev.token);
      text[ev.conversation] += ev.text;
    } else if (ev.kind == weft::EventKind::finished) {
      ++finished[ev.conversation];
      EXPECT_EQ(ev.reason, weft::FinishReason::max_tokens);
    }
  }
  EXPECT_EQ(tokens[a.id()], ga.result().tokens);
  EXPECT_EQ(tokens[b.id()], gb.result().tokens);
  EXPECT_EQ(text[a.id()], ga.text());
  EXPECT_EQ(finished[a.id()], 1);
  EXPECT_EQ(finished[b.id()], 1);
  EXPECT_TRUE(ex.poll_events().empty());

  // A failing decode posts an error event for that conversation only.
  weft::detail::set_decode_hook(ex, [](const llama_batch &) { return -3; });
  a.prompt(random_tokens(rng, m, 4));
  ex.step();
  const auto evs = ex.poll_events();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].kind, weft::EventKind::error);
  EXPECT_EQ(evs[0].conversation, a.id());
  ASSERT_TRUE(evs[0].error.has_value());
  EXPECT_EQ(evs[0].error->code(), weft::Errc::backend);
}

// A game thread polls events every frame while a worker samples (at
// temperature 0.7 over 32,000 tokens that took ~0.5 ms a conversation, under
// the executor's state lock: poll_events() waited 5-12.7 ms). The queue has
// its own lock now: with the stepping thread parked inside the sampling
// phase, holding the state lock, a poll still returns.
TEST(Events, PollingDoesNotWaitForSampling) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(9);
  auto p = params(256);
  p.events = true;
  weft::Executor ex(m, p);
  auto c = ex.create();
  c.prompt(random_tokens(rng, m, 8, true));
  std::promise<void> entered, release;
  auto released = release.get_future().share();
  bool first = true;  // touched only on the stepping thread
  weft::detail::set_sample_hook(ex, [&] {
    if (!first) return;
    first = false;
    entered.set_value();
    released.wait_for(std::chrono::seconds(30));  // bounded even if the test fails
  });
  auto g = c.generate({.max_tokens = 3});
  std::thread stepper([&] {
    for (int i = 0; i < 50 && !g.done(); ++i) ex.step();
  });
  ASSERT_EQ(entered.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  auto polled = std::async(std::launch::async, [&] { return ex.poll_events(); });
  const auto status = polled.wait_for(std::chrono::seconds(5));
  release.set_value();
  stepper.join();
  EXPECT_EQ(status, std::future_status::ready) << "poll_events() waited for the sampling phase";
  polled.get();
  EXPECT_TRUE(g.done());
  EXPECT_EQ(g.reason(), weft::FinishReason::max_tokens);
}

TEST(Events, CapacityDropsOldestAndCounts) {
  const auto &m = weft_test::tiny();
  auto p = params();
  p.events = true;
  p.events_capacity = 4;
  weft::Executor ex(m, p);
  auto c = ex.create();
  c.prompt("Count the dropped events.", {.add_bos = true});
  auto g = c.generate({.max_tokens = 10});
  while (!ex.step().idle) {
  }
  const auto evs = ex.poll_events();
  ASSERT_EQ(evs.size(), 4u);  // 10 tokens + 1 finished, 7 dropped
  EXPECT_EQ(ex.stats().events_dropped, 7u);
  EXPECT_EQ(evs.back().kind, weft::EventKind::finished);
  EXPECT_EQ(g.n_tokens(), 10u);  // results stay complete
}

TEST(Deadline, FirstMicroBatchAlwaysCompletes) {
  // A deadline that passes during the first micro-batch: that one is kept
  // (progress every step), the next ones are not started.
  const auto &m = weft_test::tiny();
  std::mt19937 rng(7);
  weft::Executor ex(m, params(64, 8));
  auto c = ex.create();
  c.prompt(random_tokens(rng, m, 40, true));
  // The first llama_decode starts before the deadline and ends after it,
  // whatever the machine's speed: the hook holds it past the deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  weft::detail::set_decode_hook(ex, [&](const llama_batch &) {
    std::this_thread::sleep_until(deadline + std::chrono::milliseconds(10));
    return 0;
  });
  const auto r = ex.step({.deadline = deadline});
  EXPECT_TRUE(r.deadline_hit);
  EXPECT_EQ(r.tokens_decoded, 8u);
  EXPECT_EQ(c.n_decoded(), 8u);
}

