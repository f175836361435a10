// Invariant 6 (spill transparency) and the parking tiers: RAM, disk,
// recompute, and a disk that cannot be written.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "exec/test_access.hpp"
#include "core/file_io.hpp"
#include "state/state_codec.hpp"
#include "reference.hpp"
#include "state/state_fixture.hpp"
#include "weft/executor.hpp"

using weft_test::random_tokens;
using weft_test::run_until_idle;
using weft_test::reference_logits;
using weft_test::throws_weft;

using namespace state_test;

// Invariant 6: 64 conversations over 4 slots and a small cache behave like a
// cache that holds everything, through random interleavings.
TEST(Spill, TransparencyOverRandomInterleavings) {
  const auto &m = weft_test::tiny();
  struct Tier {
    const char *name;
    weft::SpillParams spill;
  };
  const auto spill_dir = weft_test::temp_dir("spill");
  const Tier tiers[] = {
      {"ram", {}},
      {"ram+disk", {.ram_bytes = 256 << 10, .disk_dir = spill_dir.string()}},
      {"recompute", {.ram_bytes = 0}},
  };
  for (const auto &tier : tiers) {
    for (unsigned seed = 1; seed <= 2; ++seed) {
      SCOPED_TRACE(std::string(tier.name) + " seed " + std::to_string(seed));
      std::mt19937 rng(seed * 77);
      auto small_p = params(512, 4);
      small_p.spill = tier.spill;
      weft::Executor small(m, small_p);
      weft::Executor big(m, params(16384, 64));
      std::vector<std::pair<weft::Conversation, weft::Conversation>> convs;  // (small, big)
      for (int i = 0; i < 64; ++i) convs.emplace_back(small.create(), big.create());
      // Act on a pair only when neither runs a generation, so both sides
      // see the same history (their generations may end on other steps).
      auto settle = [&](weft::Conversation &s, weft::Conversation &b) {
        for (int i = 0; i < 1000 && (s.generation() || b.generation()); ++i) {
          small.step();
          big.step();
        }
        ASSERT_FALSE(s.generation() || b.generation());
      };
      for (int op = 0; op < 300; ++op) {
        auto &[s, b] = convs[rng() % convs.size()];
        settle(s, b);
        switch (rng() % 8) {
          case 0:
          case 1:
          case 2: {
            if (s.n_tokens() > 120) break;
            const auto t = random_tokens(rng, m, 1 + static_cast<int>(rng() % 12), s.n_tokens() == 0);
            s.prompt(t);
            b.prompt(t);
            break;
          }
          case 3: {
            if (s.n_tokens() == 0 || s.n_tokens() > 120) break;
            s.generate({.max_tokens = 2});
            b.generate({.max_tokens = 2});
            break;
          }
          case 4: {
            if (s.n_tokens() == 0) break;
            const auto k = 1 + static_cast<std::uint32_t>(rng() % s.n_tokens());
            s.rewind(k);
            b.rewind(k);
            break;
          }
          case 5: {
            if (convs.size() >= 80) break;
            auto sf = s.fork();
            auto bf = b.fork();
            convs.emplace_back(sf, bf);
            break;
          }
          case 6: {  // save and load back in place
            auto s2 = small.load(s.save());
            auto b2 = big.load(b.save());
            s.dispose();
            b.dispose();
            s = s2;
            b = b2;
            break;
          }
          default: {
            const int k = 1 + static_cast<int>(rng() % 4);
            for (int i = 0; i < k; ++i) {
              small.step();
              big.step();
            }
          }
        }
      }
      // Generations may differ only if greedy ties differ; they are compared
      // below through the histories, which must match.
      for (auto &[s, b] : convs) {
        if (!s.disposed()) settle(s, b);
      }
      run_until_idle(small);
      run_until_idle(big);
      const auto st = small.stats();
      EXPECT_GT(st.parks, 0u) << "the scenario must actually spill";
      int compared = 0;
      for (auto &[s, b] : convs) {
        if (s.disposed()) continue;
        ASSERT_EQ(s.tokens(), b.tokens());
        if (s.n_tokens() == 0) continue;
        // Parked ones keep their logits; resident or not, they must match.
        ASSERT_EQ(s.has_logits(), b.has_logits());
        if (!s.has_logits()) continue;
        EXPECT_LT(weft_test::nmse(s.logits(), b.logits()), weft_test::logits_tolerance(m));
        ++compared;
      }
      EXPECT_GT(compared, 40);
      RecordProperty(std::string(tier.name) + "_parks", static_cast<int>(st.parks));
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(spill_dir)) << "spill files are removed with the executor";
}

TEST(Spill, TiersAreUsedInOrderAndCounted) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(21);
  const auto dir = weft_test::temp_dir("tiers");
  auto p = params(1024, 2);
  p.spill = {.ram_bytes = 1, .disk_dir = dir.string()};  // RAM too small: disk
  weft::Executor ex(m, p);
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<weft::Token>> hist;
  for (int i = 0; i < 5; ++i) {
    convs.push_back(ex.create());
    hist.push_back(random_tokens(rng, m, 40, true));
    convs.back().prompt(hist.back());
    run_until_idle(ex);
  }
  auto st = ex.stats();
  EXPECT_EQ(st.resident + st.parked_disk, 5u);
  EXPECT_EQ(st.parked_disk, 3u);
  EXPECT_GT(st.disk_bytes, 0u);
  EXPECT_EQ(st.ram_bytes, 0u);
  EXPECT_EQ(convs[0].residency(), weft::Residency::disk);
  // Prompting a parked one restores it; its logits match a fresh decode.
  const auto x = random_tokens(rng, m, 5);
  convs[0].prompt(x);
  run_until_idle(ex);
  EXPECT_EQ(convs[0].residency(), weft::Residency::resident);
  hist[0].insert(hist[0].end(), x.begin(), x.end());
  expect_logits_of(convs[0], hist[0], "restored from disk");
  EXPECT_GT(ex.stats().restores, 0u);
  // Explicit hints.
  EXPECT_TRUE(convs[0].park());
  EXPECT_NE(convs[0].residency(), weft::Residency::resident);
  convs[0].prefetch();
  ex.step();
  EXPECT_EQ(convs[0].residency(), weft::Residency::resident);
}

TEST(Spill, UnwritableDiskDegradesToRecompute) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(22);
  std::vector<std::string> warnings;
  std::mutex mu;
  weft::set_log_sink([&](weft::LogLevel, std::string_view l) {
    std::lock_guard lock(mu);
    warnings.emplace_back(l);
  });
  auto p = params(1024, 1);
  p.spill = {.ram_bytes = 0, .disk_dir = "/proc/weft-cannot-write-here"};
  weft::Executor ex(m, p);
  auto a = ex.create();
  auto b = ex.create();
  const auto ha = random_tokens(rng, m, 30, true), hb = random_tokens(rng, m, 30, true);
  a.prompt(ha);
  run_until_idle(ex);
  b.prompt(hb);  // needs the only slot: a is parked, but disk fails
  run_until_idle(ex);
  weft::set_log_sink(nullptr);
  EXPECT_EQ(a.residency(), weft::Residency::recompute);
  EXPECT_EQ(ex.stats().parked_recompute, 1u);
  EXPECT_TRUE(a.has_logits());  // tokens and logits stay while parked
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(std::any_of(warnings.begin(), warnings.end(),
                            [](auto &w) { return w.find("spill to disk failed") != std::string::npos; }));
  }
  a.prompt(random_tokens(rng, m, 3));  // back it comes, by re-decoding
  run_until_idle(ex);
  EXPECT_GE(ex.stats().recomputes, 1u);
  auto full = ha;
  const auto t = a.tokens();
  expect_logits_of(a, t, "recomputed");
  EXPECT_TRUE(std::equal(ha.begin(), ha.end(), t.begin()));
}
