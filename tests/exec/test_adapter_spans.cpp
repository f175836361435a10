// AdapterSpans (exec/adapter_spans): the setting each position was decoded
// under, against a plain per-position model.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "exec/adapter_spans.hpp"

// AdapterSpans against a plain vector of one setting per position, over
// seeded random records, rewinds and removes.
TEST(AdapterSpans, MatchesAPerPositionModel) {
  using weft::detail::AdapterConfig;
  using weft::detail::AdapterConfigPtr;
  std::vector<AdapterConfigPtr> cfgs{nullptr};
  for (std::uint64_t k = 1; k <= 3; ++k) {
    auto c = std::make_shared<AdapterConfig>();
    c->key = k;
    c->canon = {k};
    cfgs.push_back(c);
  }
  for (std::uint32_t seed = 1; seed <= 50; ++seed) {
    std::mt19937 rng(seed);
    weft::detail::AdapterSpans spans;
    std::vector<const AdapterConfig *> model;  // setting of each recorded position
    AdapterConfigPtr current = cfgs[rng() % cfgs.size()];
    for (int op = 0; op < 60; ++op) {
      const auto n = static_cast<std::uint32_t>(model.size());
      switch (rng() % 5) {
        case 0:
        case 1: {  // decode k positions at the end, or re-decode some recorded ones
          const std::uint32_t p = n == 0 || rng() % 3 != 0 ? n : static_cast<std::uint32_t>(rng() % n);
          const auto k = static_cast<std::uint32_t>(1 + rng() % 9);
          const std::uint32_t run = spans.run(p, k, current);
          ASSERT_GE(run, 1u);
          const AdapterConfigPtr &cfg = spans.at(p, current);
          for (std::uint32_t i = p; i < p + run; ++i) {
            const AdapterConfig *want = i < n ? model[i] : current.get();
            ASSERT_TRUE(weft::detail::same_adapters(want, cfg.get())) << "seed " << seed << " op " << op;
          }
          // The run stops at a change (or at k).
          if (run < k) {
            const std::uint32_t i = p + run;
            const AdapterConfig *next = i < n ? model[i] : current.get();
            ASSERT_FALSE(weft::detail::same_adapters(next, cfg.get()));
          }
          spans.record(p, run, cfg);
          for (std::uint32_t i = n; i < p + run; ++i) model.push_back(cfg.get());
          break;
        }
        case 2:
          current = cfgs[rng() % cfgs.size()];
          break;
        case 3: {
          const std::uint32_t to = n == 0 ? 0 : static_cast<std::uint32_t>(rng() % (n + 1));
          spans.truncate(to);
          model.resize(std::min<std::size_t>(model.size(), to));
          break;
        }
        case 4: {
          if (n == 0) break;
          const std::uint32_t a = static_cast<std::uint32_t>(rng() % n);
          const std::uint32_t b = a + static_cast<std::uint32_t>(rng() % (n - a + 1));
          spans.erase(a, b);
          model.erase(model.begin() + a, model.begin() + b);
          break;
        }
      }
      ASSERT_EQ(spans.end(), model.size());
      for (std::uint32_t i = 0; i < model.size(); ++i) {
        ASSERT_TRUE(weft::detail::same_adapters(spans.at(i, current).get(), model[i]))
            << "seed " << seed << " op " << op << " position " << i;
      }
      // Stored compactly: no two neighbouring spans alike, none when all base.
      const auto &v = spans.spans();
      for (std::size_t i = 1; i < v.size(); ++i) {
        ASSERT_LT(v[i - 1].start, v[i].start);
        ASSERT_FALSE(weft::detail::same_adapters(v[i - 1].cfg.get(), v[i].cfg.get()));
      }
    }
  }
}
