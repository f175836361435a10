// Embeddings and memories from several game threads while the worker
// generates: every text embedded once, the same text to the same vector,
// memories searched and saved while they fill; for TSan (label threads).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "common.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"
#include "weft/memory.hpp"

namespace {

const char *const kLines[] = {"the smith sells swords", "wolves in the north", "the mayor owes gold",
                              "bread at the market",    "a key under the anvil", "the guard sleeps at night"};

TEST(EmbedThreads, GameThreadsEmbedAndRememberWhileTheWorkerGenerates) {
  const auto &m = weft_test::tiny();
  weft::ExecutorParams p{.n_ctx = 1024, .n_batch = 64, .n_seq_max = 4, .n_threads = 2};
  p.embedder = weft::EmbedderParams{
      .model = weft::Model::load({.path = std::string(WEFT_TEST_MODELS) + "/embed.gguf"}), .n_ctx = 64, .n_seq_max = 4};
  weft::Executor ex(m, p);
  std::mt19937 rng(1);
  std::vector<weft::Conversation> convs;
  std::vector<weft::Generation> gens;
  for (int i = 0; i < 3; ++i) {
    convs.push_back(ex.create());
    convs.back().prompt(weft_test::random_tokens(rng, m, 16, true));
    gens.push_back(convs.back().generate({.max_tokens = 40, .ignore_eos = true}));
  }
  ex.start({.budget = {.max_tokens = 16}});
  weft::Memory shared;
  convs[0].set_memory(shared);
  std::mutex mu;
  std::map<std::string, std::vector<std::vector<float>>> seen;
  std::atomic<int> searches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 r(static_cast<unsigned>(t) + 10);
      for (int i = 0; i < 12; ++i) {
        const std::string text = kLines[r() % std::size(kLines)];
        auto e = ex.embed({text});
        shared.add(ex, text, std::to_string(t));
        auto s = shared.search(ex, kLines[r() % std::size(kLines)], 2);
        ASSERT_TRUE(e.wait_for(std::chrono::seconds(30)));
        ASSERT_FALSE(e.error());
        ASSERT_TRUE(s.wait_for(std::chrono::seconds(30)));
        if (!s.hits().empty()) searches.fetch_add(1);
        if (i % 4 == 0) convs[0].save();  // the memory travels, read while others add to it
        std::lock_guard lock(mu);
        seen[text].push_back(e.vector(0));
      }
    });
  }
  for (auto &t : threads) t.join();
  for (auto &g : gens) EXPECT_TRUE(g.wait_for(std::chrono::seconds(60)));
  for (int i = 0; i < 3000 && shared.pending() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ex.stop();
  EXPECT_EQ(shared.size(), 36u);
  EXPECT_EQ(shared.pending(), 0u);
  EXPECT_EQ(shared.missing(), 0u);
  EXPECT_GT(searches.load(), 0);
  EXPECT_EQ(ex.stats().texts_embedded, 36u * 2 + 36u);
  // The same text gives the same vector within what batching does (the
  // floor test_embeddings measures, ~7e-11 here).
  for (const auto &[text, vs] : seen) {
    for (const auto &v : vs) EXPECT_LT(weft_test::nmse(v, vs.front()), 1e-9) << text;
  }
  for (const auto &g : gens) EXPECT_EQ(g.n_tokens(), 40u);
}

}  // namespace
