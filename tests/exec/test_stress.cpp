// 8 threads issue random operations against a worker-driven executor for a
// bounded time; afterwards every surviving conversation's history must be
// exactly what its own operations imply, and its logits must equal an
// independent single-threaded decode of that history. Run under TSan by the
// tsan preset (label "threads").
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "reference.hpp"
#include "weft/executor.hpp"

using weft_test::random_tokens;

namespace {

struct Tracked {
  weft::Conversation conv;
  std::vector<weft::Token> expect;  // history implied by this thread's operations
  std::optional<weft::Generation> gen;
};

// Folds a finished (or now cancelled) generation into the expected history:
// every sampled token joins the conversation.
void settle(Tracked &t, bool cancel) {
  if (!t.gen) return;
  if (cancel) t.gen->cancel();
  if (!t.gen->done()) return;
  const auto r = t.gen->result();
  t.expect.insert(t.expect.end(), r.tokens.begin(), r.tokens.end());
  t.gen.reset();
}

}  // namespace

TEST(Stress, EightThreadsAgainstAWorker) {
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, {.n_ctx = 4096, .n_batch = 64, .n_seq_max = 32, .n_threads = 2, .events = true});
  ex.start({.budget = {.max_tokens = 32}, .idle_wait = std::chrono::milliseconds(20)});

  constexpr int kThreads = 8;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
  std::mutex shared_mu;
  std::vector<weft::Generation> shared_gens;  // anyone may cancel these
  std::vector<std::vector<Tracked>> owned(kThreads);
  std::atomic<int> ops{0}, refused{0};

  auto worker = [&](int id) {
    std::mt19937 rng(1000 + id);
    auto &mine = owned[id];
    for (int i = 0; i < 2; ++i) mine.push_back({ex.create(), {}, {}});
    for (int n = 0; n < 400 && std::chrono::steady_clock::now() < until; ++n) {
      ++ops;
      if (mine.empty()) mine.push_back({ex.create(), {}, {}});
      auto &t = mine[rng() % mine.size()];
      settle(t, false);
      try {
        switch (rng() % 10) {
          case 0:
          case 1: {  // prompt
            if (t.gen) break;
            const auto tokens = random_tokens(rng, m, 1 + static_cast<int>(rng() % 24), t.expect.empty());
            t.conv.prompt(tokens);
            t.expect.insert(t.expect.end(), tokens.begin(), tokens.end());
            break;
          }
          case 2: {  // generate
            if (t.gen || t.expect.empty()) break;
            t.gen = t.conv.generate({.max_tokens = 1 + static_cast<std::uint32_t>(rng() % 4)});
            std::lock_guard lock(shared_mu);
            shared_gens.push_back(*t.gen);
            break;
          }
          case 3: {  // wait a little for our generation
            if (t.gen) t.gen->wait_for(std::chrono::milliseconds(5));
            break;
          }
          case 4: {  // fork, keeping every conversation resident (<= 32 slots)
            if (mine.size() >= 3) break;
            settle(t, true);
            Tracked child{t.conv.fork(), t.expect, {}};
            mine.push_back(std::move(child));
            break;
          }
          case 5: {  // rewind
            settle(t, true);
            if (t.expect.empty()) break;
            const auto k = 1 + static_cast<std::uint32_t>(rng() % t.expect.size());
            t.conv.rewind(k);
            t.expect.resize(t.expect.size() - k);
            break;
          }
          case 6: {  // dispose now and then
            if (rng() % 3 != 0 || mine.size() < 2) break;
            settle(t, true);
            t.conv.dispose();
            mine.erase(mine.begin() + (&t - mine.data()));
            break;
          }
          case 7: {  // sample when logits are there
            if (!t.gen && t.conv.has_logits()) (void)t.conv.sample();
            break;
          }
          case 8: {  // cancel anyone's generation
            std::lock_guard lock(shared_mu);
            if (!shared_gens.empty()) shared_gens[rng() % shared_gens.size()].cancel();
            break;
          }
          default: {  // read-only
            (void)ex.stats();
            (void)ex.poll_events(8);
            (void)t.conv.n_tokens();
            break;
          }
        }
      } catch (const weft::Error &e) {
        // Allowed refusals: no free slot for a fork, logits not ready yet
        // (a race with the worker), a context that is full.
        ++refused;
        if (e.code() != weft::Errc::out_of_range && e.code() != weft::Errc::invalid_argument) {
          ADD_FAILURE() << "unexpected error: " << e.what();
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (auto &t : threads) t.join();

  // Quiesce: end every generation, let the worker drain, stop it.
  for (auto &mine : owned) {
    for (auto &t : mine) settle(t, true);
  }
  for (int i = 0; i < 2000 && ex.stats().queued_tokens > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ex.stop();
  for (int i = 0; !ex.step().idle; ++i) {
    ASSERT_LT(i, 5000) << "the executor did not drain";
  }
  EXPECT_GE(ops.load(), 5 * kThreads);  // each thread got real work in, even under TSan
  RecordProperty("operations", ops.load());
  RecordProperty("refused", refused.load());

  int checked = 0;
  for (auto &mine : owned) {
    for (auto &t : mine) {
      ASSERT_EQ(t.conv.tokens(), t.expect);
      if (t.expect.empty()) continue;
      ASSERT_TRUE(t.conv.has_logits());
      const double err = weft_test::nmse(t.conv.logits(), weft_test::reference_logits(m, t.expect, 64, 4096));
      EXPECT_LT(err, weft_test::logits_tolerance(m)) << "history of " << t.expect.size();
      ++checked;
    }
  }
  EXPECT_GT(checked, 8);
}
