// Invariants 1-4 and 7 of DESIGN.md on a real llama.cpp context, as property
// tests over seeded random scenarios; each compares weft's logits with an
// independent decode on raw llama.cpp (tests/reference.hpp).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "exec/test_access.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"

using weft_test::logits_tolerance;
using weft_test::nmse;
using weft_test::random_tokens;
using weft_test::run_until_idle;
using weft_test::reference_logits;

namespace {


weft::ExecutorParams small_params(std::uint32_t n_seq_max = 8, std::uint32_t n_batch = 64) {
  return {.n_ctx = 1024, .n_batch = n_batch, .n_seq_max = n_seq_max, .n_threads = 2};
}

void expect_same_logits(const weft::Conversation &c, const std::vector<weft::Token> &history,
                        const std::string &what) {
  const auto &m = weft_test::tiny();
  ASSERT_TRUE(c.has_logits()) << what;
  EXPECT_EQ(c.tokens(), history) << what;
  const double err = nmse(c.logits(), reference_logits(m, history));
  EXPECT_LT(err, logits_tolerance(m)) << what << ": nmse " << err << " vs floor " << weft_test::batch_noise_floor(m);
}

}  // namespace

TEST(Executor, NoiseFloorIsSmall) {
  // Sanity of the reference itself: DESIGN.md measured ~2e-7 on tiny.
  const double floor = weft_test::batch_noise_floor(weft_test::tiny());
  RecordProperty("batch_noise_floor", std::to_string(floor));
  std::printf("llama.cpp batch noise floor on tiny (nmse): %.3g\n", floor);
  EXPECT_LT(floor, 1e-5);
}

// Invariant 1: logits do not depend on which conversations shared the batches.
TEST(Executor, BatchIndependence) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(m, small_params(8, 8u << (rng() % 4)));
    std::vector<weft::Conversation> convs;
    std::vector<std::vector<weft::Token>> hist;
    const int n = 2 + static_cast<int>(rng() % 7);
    for (int i = 0; i < n; ++i) {
      convs.push_back(ex.create());
      hist.push_back(random_tokens(rng, m, 1 + static_cast<int>(rng() % 80), rng() % 2 == 0));
      convs.back().prompt(hist.back());
    }
    run_until_idle(ex, &rng, ex.params().n_batch);
    for (int i = 0; i < n; ++i) expect_same_logits(convs[i], hist[i], "seed " + std::to_string(seed));
  }
}

// Invariant 2: a prompt split into any chunks ends in the same logits.
TEST(Executor, ChunkIndependence) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(100 + seed);
    weft::Executor ex(m, small_params(2, 32));
    auto c = ex.create();
    std::vector<weft::Token> all;
    // Several prompt() calls, some between steps, with random budgets.
    const int parts = 1 + static_cast<int>(rng() % 5);
    for (int p = 0; p < parts; ++p) {
      auto part = random_tokens(rng, m, 1 + static_cast<int>(rng() % 50), p == 0);
      all.insert(all.end(), part.begin(), part.end());
      c.prompt(part);
      if (rng() % 2) ex.step({.max_tokens = 1 + static_cast<std::uint32_t>(rng() % 32)});
    }
    run_until_idle(ex, &rng, 32);
    expect_same_logits(c, all, "seed " + std::to_string(seed));
  }
}

// Invariant 3: fork, then prompt X == fresh conversation with history + X.
TEST(Executor, ForkEquivalence) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 10; ++seed) {
    std::mt19937 rng(200 + seed);
    weft::Executor ex(m, small_params(8, 64));
    auto a = ex.create();
    auto base = random_tokens(rng, m, 5 + static_cast<int>(rng() % 40), true);
    a.prompt(base);
    // Fork sometimes with input still queued, sometimes after decoding part.
    const int mode = static_cast<int>(rng() % 3);
    if (mode == 1) ex.step({.max_tokens = 1 + static_cast<std::uint32_t>(rng() % base.size())});
    if (mode == 2) run_until_idle(ex);
    auto b = a.fork();
    EXPECT_EQ(b.tokens(), base);
    auto xa = random_tokens(rng, m, 1 + static_cast<int>(rng() % 20));
    auto xb = random_tokens(rng, m, 1 + static_cast<int>(rng() % 20));
    a.prompt(xa);
    b.prompt(xb);
    auto c = b.fork();  // a fork of a fork, with queued input
    run_until_idle(ex, &rng, 64);
    auto ha = base, hb = base;
    ha.insert(ha.end(), xa.begin(), xa.end());
    hb.insert(hb.end(), xb.begin(), xb.end());
    expect_same_logits(a, ha, "source, seed " + std::to_string(seed));
    expect_same_logits(b, hb, "fork, seed " + std::to_string(seed));
    expect_same_logits(c, hb, "fork of fork, seed " + std::to_string(seed));
    // The decoded prefix is shared: fewer cells than three private copies.
    if (mode == 2) {
      EXPECT_LT(ex.stats().cells_used, ha.size() + 2 * hb.size());
    }
  }
}

// Invariant 4: prompt A+B, rewind |B|, prompt C == A+C.
TEST(Executor, RewindEquivalence) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(300 + seed);
    weft::Executor ex(m, small_params(4, 32));
    auto conv = ex.create();
    auto a = random_tokens(rng, m, 1 + static_cast<int>(rng() % 40), true);
    auto b = random_tokens(rng, m, 1 + static_cast<int>(rng() % 40));
    conv.prompt(a);
    conv.prompt(b);
    // Rewind after a random amount of decoding: all queued, part, or all decoded.
    const auto total = static_cast<std::uint32_t>(a.size() + b.size());
    const auto decode_first = static_cast<std::uint32_t>(rng() % (total + 1));
    if (decode_first > 0) ex.step({.max_tokens = std::min(decode_first, 32u)});
    if (rng() % 2) run_until_idle(ex);
    conv.rewind(static_cast<std::uint32_t>(b.size()));
    EXPECT_EQ(conv.tokens(), a);
    auto c = random_tokens(rng, m, 1 + static_cast<int>(rng() % 30));
    if (rng() % 3 == 0) {
      // Rewind with nothing new: logits of A's last token come back.
      run_until_idle(ex);
      expect_same_logits(conv, a, "bare rewind, seed " + std::to_string(seed));
    }
    conv.prompt(c);
    run_until_idle(ex, &rng, 32);
    auto ac = a;
    ac.insert(ac.end(), c.begin(), c.end());
    expect_same_logits(conv, ac, "seed " + std::to_string(seed));
    EXPECT_EQ(ex.stats().cells_used, ac.size());
  }
}

// Invariant 7: through injected decode failures every queued token is
// decoded exactly once, and the failure reaches only the conversation hit.
TEST(Executor, NothingLostThroughDecodeFailures) {
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 8; ++seed) {
    std::mt19937 rng(400 + seed);
    weft::Executor ex(m, small_params(6, 32));
    std::uniform_int_distribution<int> coin(0, 3);
    // Transient failures: the first and then a quarter of decode calls fail
    // with "no KV slot".
    std::uint64_t injected = 0;
    weft::detail::set_decode_hook(ex, [&](const llama_batch &) {
      if (injected > 0 && coin(rng) != 0) return 0;
      ++injected;
      return 1;
    });
    std::vector<weft::Conversation> convs;
    std::vector<std::vector<weft::Token>> hist;
    for (int i = 0; i < 5; ++i) {
      convs.push_back(ex.create());
      hist.push_back(random_tokens(rng, m, 1 + static_cast<int>(rng() % 60), true));
      convs.back().prompt(hist.back());
    }
    std::uint64_t decoded = 0;
    for (int step = 0; step < 2000; ++step) {
      for (auto &c : convs) {
        if (c.error()) c.clear_error();  // a failing single conversation is marked; retry it
      }
      const auto r = ex.step();
      decoded += r.tokens_decoded;
      if (r.idle) break;
    }
    std::uint64_t expected = 0;
    for (auto &h : hist) expected += h.size();
    EXPECT_EQ(decoded, expected) << "each token decoded exactly once";
    EXPECT_EQ(ex.stats().decode_failures, injected);
    weft::detail::set_decode_hook(ex, nullptr);
    for (std::size_t i = 0; i < convs.size(); ++i) expect_same_logits(convs[i], hist[i], "seed " + std::to_string(seed));
  }
}

TEST(Executor, PersistentFailureIsolatedToItsConversation) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(7);
  weft::Executor ex(m, small_params(8, 64));
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<weft::Token>> hist;
  for (int i = 0; i < 6; ++i) {
    convs.push_back(ex.create());
    hist.push_back(random_tokens(rng, m, 10 + i, true));
    convs.back().prompt(hist.back());
  }
  // Any batch holding the third conversation's first token fails, fatally.
  const weft::Token poison = hist[2][1];
  weft::detail::set_decode_hook(ex, [&](const llama_batch &b) {
    for (int i = 0; i < b.n_tokens; ++i) {
      if (b.token[i] == poison && b.pos[i] == 1) return -3;
    }
    return 0;
  });
  const auto r = ex.step();
  EXPECT_EQ(r.failed, 1u);
  EXPECT_GT(r.decode_calls, 1u);  // split to find the culprit
  run_until_idle(ex);
  ASSERT_TRUE(convs[2].error().has_value());
  EXPECT_EQ(convs[2].error()->code(), weft::Errc::backend);
  EXPECT_NE(std::string(convs[2].error()->what()).find("returned -3"), std::string::npos);
  EXPECT_EQ(convs[2].n_decoded(), 0u);
  EXPECT_EQ(convs[2].n_queued(), hist[2].size());  // held back, not lost
  for (int i : {0, 1, 3, 4, 5}) expect_same_logits(convs[i], hist[i], "bystander " + std::to_string(i));
  // Once the fault is gone, the conversation recovers.
  weft::detail::set_decode_hook(ex, nullptr);
  convs[2].clear_error();
  run_until_idle(ex);
  expect_same_logits(convs[2], hist[2], "recovered");
}
