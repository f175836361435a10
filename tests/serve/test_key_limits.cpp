// weft serve's limits per API key (tools/weft/serve/key_limits.cpp): streams
// held and given back, the 60 s token window and its Retry-After, keys apart,
// admit_tokens (embeddings: the window only),
// on a clock the test moves; and many threads admitting and charging at once.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "serve/api_error.hpp"
#include "serve/key_limits.hpp"

namespace {

using namespace weft_cli::serve;
using namespace std::chrono_literals;
using Clock = KeyLimits::Clock;

// The 429 admit() throws, or nullopt when it admitted.
std::optional<ApiError> refusal(KeyLimits &l, const std::string &key, Clock::time_point now) {
  try {
    auto lease = l.admit(key, now);
    return std::nullopt;
  } catch (const ApiError &e) {
    return e;
  }
}

TEST(ServeKeyLimits, StreamsAreHeldUntilTheLeaseGoes) {
  KeyLimits l({.max_streams = 2});
  const auto t = Clock::now();
  std::optional<KeyLimits::Lease> a(l.admit("A", t)), b(l.admit("A", t));
  EXPECT_EQ(l.streams("A"), 2u);
  const auto e = refusal(l, "A", t);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 429);
  EXPECT_EQ(e->type, "rate_limit_error");
  EXPECT_EQ(e->code, "too_many_streams");
  EXPECT_EQ(e->retry_after_s, 1);
  EXPECT_NE(std::string(e->what()).find("runs 2 generations on this server, its limit (--key-max-streams 2)"),
            std::string::npos) << e->what();
  EXPECT_FALSE(refusal(l, "B", t)) << "another key has its own streams";
  a.reset();
  EXPECT_EQ(l.streams("A"), 1u);
  EXPECT_FALSE(refusal(l, "A", t));
  // A moved lease holds one slot, not two.
  KeyLimits::Lease moved = std::move(*b);
  b.reset();
  EXPECT_EQ(l.streams("A"), 1u);
  moved = KeyLimits::Lease();
  EXPECT_EQ(l.streams("A"), 0u);
}

TEST(ServeKeyLimits, TokensLeaveTheWindowAfterSixtySeconds) {
  KeyLimits l({.tokens_per_minute = 100});
  const auto t0 = Clock::now();
  {
    auto lease = l.admit("A", t0);
    lease.charge(30, t0);
    lease.charge(50, t0 + 10s);
  }
  EXPECT_EQ(l.tokens_in_window("A", t0 + 10s), 80u);
  // Under the limit: admitted, and that run may cross it.
  {
    auto lease = l.admit("A", t0 + 20s);
    lease.charge(40, t0 + 20s);
  }
  EXPECT_EQ(l.tokens_in_window("A", t0 + 20s), 120u);
  // 120 >= 100: refused until the first 30 leave (at t0 + 60 s: 90 < 100).
  auto e = refusal(l, "A", t0 + 25s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "rate_limit_exceeded");
  EXPECT_EQ(e->retry_after_s, 35);
  EXPECT_NE(std::string(e->what()).find("used 120 tokens in the last 60 s on this server, its limit "
                                        "(--key-tokens-per-minute 100); retry in 35.0 s"),
            std::string::npos) << e->what();
  e = refusal(l, "A", t0 + 59500ms);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->retry_after_s, 1) << "rounded up, never 0";
  EXPECT_FALSE(refusal(l, "B", t0 + 25s)) << "another key has its own window";
  EXPECT_FALSE(refusal(l, "A", t0 + 60s));
  EXPECT_EQ(l.tokens_in_window("A", t0 + 60s), 90u);
  // Both early charges gone: only the 40 remain.
  EXPECT_EQ(l.tokens_in_window("A", t0 + 70s), 40u);
  EXPECT_EQ(l.tokens_in_window("A", t0 + 80s), 0u);
}

TEST(ServeKeyLimits, RetryAfterWaitsForAsManyChargesAsNeeded) {
  KeyLimits l({.tokens_per_minute = 10});
  const auto t0 = Clock::now();
  {
    auto lease = l.admit("A", t0);
    for (int i = 0; i < 5; ++i) lease.charge(4, t0 + std::chrono::seconds(i));  // 20 tokens by t0 + 4 s
  }
  // Under 10 once three charges have left: the third leaves at t0 + 62 s.
  const auto e = refusal(l, "A", t0 + 5s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->retry_after_s, 57);
  EXPECT_TRUE(refusal(l, "A", t0 + 61s));
  EXPECT_FALSE(refusal(l, "A", t0 + 62s));
}

// An embeddings request: the token window only, no stream slot.
TEST(ServeKeyLimits, AdmitTokensChecksTheWindowAndTakesNoStream) {
  KeyLimits l({.max_streams = 1, .tokens_per_minute = 100});
  const auto t0 = Clock::now();
  auto lease = l.admit("A", t0);  // the key's one stream, held
  EXPECT_NO_THROW(l.admit_tokens("A", t0)) << "a held stream does not stop an embedding";
  EXPECT_NO_THROW(l.admit_tokens("B", t0)) << "a key never seen";
  l.charge("A", 60, t0);
  EXPECT_EQ(l.streams("A"), 1u);
  EXPECT_NO_THROW(l.admit_tokens("A", t0 + 1s));
  l.charge("A", 60, t0 + 1s);  // 120: the request that crossed the limit ran
  EXPECT_EQ(l.tokens_in_window("A", t0 + 1s), 120u);
  try {
    l.admit_tokens("A", t0 + 2s);
    FAIL() << "admitted over the limit";
  } catch (const ApiError &e) {
    EXPECT_EQ(e.status, 429);
    EXPECT_EQ(e.code, "rate_limit_exceeded");
    EXPECT_EQ(e.retry_after_s, 58);
  }
  // Generations see the same window.
  lease = KeyLimits::Lease();
  const auto e = refusal(l, "A", t0 + 2s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "rate_limit_exceeded");
  EXPECT_NO_THROW(l.admit_tokens("A", t0 + 60s));
  EXPECT_EQ(l.streams("A"), 0u);
}

TEST(ServeKeyLimits, NoLimitsAdmitEverything) {
  KeyLimits l({});
  const auto t = Clock::now();
  std::vector<KeyLimits::Lease> held;
  for (int i = 0; i < 100; ++i) {
    held.push_back(l.admit("A", t));
    held.back().charge(1'000'000, t);
  }
  EXPECT_EQ(l.streams("A"), 100u);
  EXPECT_EQ(l.tokens_in_window("A", t), 0u) << "nothing is counted without a token limit";
}

TEST(ServeKeyLimits, ThreadsAdmitAndChargeAtOnce) {
  // 8 threads of 4 keys each admit and release; never more than the limit
  // held per key, and every slot comes back.
  constexpr std::uint32_t kMax = 3;
  KeyLimits l({.max_streams = kMax, .tokens_per_minute = 1u << 30});
  std::atomic<int> held[4] = {};
  std::atomic<int> over{0}, admitted{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int i = 0; i < 2000; ++i) {
        const int k = static_cast<int>(rng() % 4);
        try {
          auto lease = l.admit(std::string(1, static_cast<char>('a' + k)), Clock::now());
          if (++held[k] > static_cast<int>(kMax)) ++over;
          ++admitted;
          lease.charge(1, Clock::now());
          --held[k];
        } catch (const ApiError &) {
          ++refused;
        }
      }
    });
  for (auto &th : threads) th.join();
  EXPECT_EQ(over.load(), 0);
  EXPECT_EQ(admitted.load() + refused.load(), 16000);
  std::uint64_t tokens = 0;
  for (const char *k : {"a", "b", "c", "d"}) {
    EXPECT_EQ(l.streams(k), 0u) << k;
    tokens += l.tokens_in_window(k, Clock::now());
  }
  EXPECT_EQ(tokens, static_cast<std::uint64_t>(admitted.load()));
}

}  // namespace
