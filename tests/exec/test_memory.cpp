// weft::Memory: retrieval among a generated corpus, search against a brute
// force of its own, persistence (on its own, in a conversation's state, in
// snapshots and through spill), and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"
#include "weft/memory.hpp"
#include "weft/train.hpp"
#include "state/state_codec.hpp"
#include <cstring>

namespace {

const weft::Model &memory_embed_model() {
  static const weft::Model m = weft::Model::load({.path = std::string(WEFT_TEST_MODELS) + "/embed.gguf"});
  return m;
}

weft::ExecutorParams params_with_embedder() {
  weft::ExecutorParams p;
  p.n_ctx = 1024;
  p.n_batch = 128;
  p.n_seq_max = 4;
  p.n_threads = 2;
  p.embedder = weft::EmbedderParams{.model = memory_embed_model(), .n_ctx = 256, .n_seq_max = 16};
  return p;
}

// The NPC corpus's lines (dialogue headers and turns), seeded.
std::vector<std::string> corpus_lines(std::uint64_t seed, std::size_t n) {
  std::vector<std::string> out;
  for (const auto &d : weft::make_npc_dialogues({.seed = seed, .target_bytes = 40'000})) {
    std::istringstream in(d);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && out.size() < n) out.push_back(line);
    }
  }
  return out;
}

void drain(weft::Executor &ex, const weft::Memory &m) {
  for (int i = 0; i < 2000 && m.pending() > 0; ++i) ex.step();
  ASSERT_EQ(m.pending(), 0u);
}

// Facts planted among 300 corpus lines; each query is a few of the fact's
// words, in another order. The model is random weights, so what it knows is
// words (questions that share only one rare word with the fact found it
// first 3 times in 12): the planted fact must come first for most queries
// and within the top 3 for every one, over several corpora.
TEST(Memory, RetrievalFindsThePlantedFactsAmongCorpusLines) {
  const std::vector<std::pair<std::string, std::string>> facts = {
      {"Brenna hid the moonstone under the old mill.", "moonstone under the mill"},
      {"The ferryman owes seventeen gold crowns to the widow.", "ferryman owes crowns"},
      {"A dragon sleeps beneath the frozen lighthouse.", "dragon beneath the frozen lighthouse"},
      {"The apothecary brews violet tonic every Tuesday.", "apothecary violet tonic"},
  };
  weft::Executor ex(weft_test::tiny(), params_with_embedder());
  int first = 0, total = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    weft::Memory mem;
    std::mt19937 rng(static_cast<unsigned>(seed));
    auto lines = corpus_lines(seed, 300);
    std::vector<std::uint64_t> planted;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i % 75 == 37) planted.push_back(mem.add(ex, facts[planted.size()].first, "planted"));
      mem.add(ex, lines[i]);
    }
    drain(ex, mem);
    ASSERT_EQ(mem.size(), lines.size() + facts.size());
    for (std::size_t f = 0; f < facts.size(); ++f) {
      auto s = mem.search(ex, facts[f].second, 3);
      for (int i = 0; i < 100 && !s.ready(); ++i) ex.step();
      ASSERT_TRUE(s.ready());
      const auto hits = s.hits();
      ASSERT_EQ(hits.size(), 3u);
      const auto at = std::find_if(hits.begin(), hits.end(), [&](auto &h) { return h.id == planted[f]; });
      EXPECT_NE(at, hits.end()) << "seed " << seed << ": '" << facts[f].second << "' found '" << hits[0].text << "'";
      first += at == hits.begin() ? 1 : 0;
      ++total;
      if (at != hits.end()) EXPECT_EQ(at->metadata, "planted");
      EXPECT_GE(hits[0].score, hits[1].score);
      EXPECT_GE(hits[1].score, hits[2].score);
    }
  }
  std::printf("memory: the planted fact first for %d of %d queries\n", first, total);
  EXPECT_GE(first * 4, total * 3);
}

// search() against a brute force written here: every entry scored with
// cosine_similarity, sorted by (score desc, id asc).
TEST(Memory, SearchEqualsABruteForceOverRandomStores) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g;
    const std::size_t dims = 1 + rng() % 48, n = rng() % 300, k = rng() % 12;
    weft::Memory mem;
    std::vector<std::pair<std::uint64_t, std::vector<float>>> all;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<float> v(dims);
      for (auto &x : v) x = g(rng);
      // Some duplicates, for ties.
      if (i > 0 && rng() % 10 == 0) v = all[rng() % all.size()].second;
      all.emplace_back(mem.add("t" + std::to_string(i), v), v);
      if (rng() % 15 == 0 && !all.empty()) {
        const std::size_t j = rng() % all.size();
        ASSERT_TRUE(mem.remove(all[j].first));
        all.erase(all.begin() + static_cast<std::ptrdiff_t>(j));
      }
    }
    std::vector<float> q(dims);
    for (auto &x : q) x = g(rng);
    std::vector<std::pair<float, std::uint64_t>> want;
    for (auto &[id, v] : all) want.emplace_back(weft::cosine_similarity(q, v), id);
    std::sort(want.begin(), want.end(), [](auto &a, auto &b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    want.resize(std::min(want.size(), k));
    const auto hits = mem.search(q, k);
    ASSERT_EQ(hits.size(), want.size()) << "seed " << seed;
    for (std::size_t i = 0; i < hits.size(); ++i) {
      EXPECT_EQ(hits[i].id, want[i].second) << "seed " << seed << " rank " << i;
      EXPECT_EQ(hits[i].score, want[i].first);
    }
  }
}

TEST(Memory, SurvivesSaveLoadOnItsOwnAndQueuedEmbeddingsComeBackMissing) {
  weft::Executor ex(weft_test::tiny(), params_with_embedder());
  weft::Memory mem;
  const auto a = mem.add(ex, "the baker sells bread at dawn", "day=1");
  const auto b = mem.add(ex, "wolves were seen in the north forest", "day=2");
  drain(ex, mem);
  const auto c = mem.add(ex, "the mayor owes three gold coins", "day=3");  // still queued at the save
  const auto bytes = mem.save();
  auto loaded = weft::Memory::load(bytes);
  EXPECT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded.missing(), 1u);
  EXPECT_EQ(loaded.get(a)->vector, mem.get(a)->vector);
  EXPECT_EQ(loaded.get(b)->metadata, "day=2");
  EXPECT_TRUE(loaded.get(c)->vector.empty());
  EXPECT_EQ(loaded.embed_missing(ex), 1u);
  drain(ex, loaded);
  drain(ex, mem);
  // The two copies of c were decoded in one batch, as two sequences: equal
  // within what batching does to llama.cpp's pooled output (test_embeddings
  // measures that floor at about 7e-11 here).
  EXPECT_LT(weft_test::nmse(loaded.get(c)->vector, mem.get(c)->vector), 1e-9);
  // Ids go on from where the saved store stopped.
  EXPECT_EQ(loaded.add("x", std::vector<float>(ex.embedding_size(), 1.0f)), c + 1);
}

// Attached to a conversation: saved with it, in snapshots and through spill.
TEST(Memory, TravelsWithItsConversationThroughSaveSnapshotsAndSpill) {
  auto p = params_with_embedder();
  p.n_seq_max = 1;  // a second conversation parks the first
  weft::Executor ex(weft_test::tiny(), p);
  std::mt19937 rng(3);
  auto conv = ex.create();
  weft::Memory mem;
  mem.add(ex, "Brenna sold a silver sword to the player", "day=4");
  mem.add(ex, "the player promised to bring iron ore", "day=5");
  drain(ex, mem);
  conv.set_memory(mem);
  conv.prompt(weft_test::random_tokens(rng, weft_test::tiny(), 24, true));
  auto other = ex.create();
  other.prompt(weft_test::random_tokens(rng, weft_test::tiny(), 24, true));
  weft_test::run_until_idle(ex);
  EXPECT_GT(ex.stats().parks, 0u);
  ASSERT_TRUE(conv.memory());
  EXPECT_EQ(conv.memory()->save(), mem.save()) << "after spill";

  const auto state = conv.save();
  EXPECT_EQ(state[8], 14) << "a conversation with a memory is state version 14";
  weft::Executor ex2(weft_test::tiny(), params_with_embedder());
  auto back = ex2.load(state);
  ASSERT_TRUE(back.memory());
  EXPECT_EQ(back.memory()->save(), mem.save());
  const auto q = mem.get(1)->vector;
  EXPECT_EQ(back.memory()->search(q, 1)[0].text, "Brenna sold a silver sword to the player");
  // The loaded store is the loaded conversation's own, not the original's.
  back.memory()->add("another", std::vector<float>(ex.embedding_size(), 0.5f));
  EXPECT_EQ(mem.size(), 2u);

  const auto snapshot = ex.save_all();
  auto restored = ex2.load_all(snapshot);
  ASSERT_EQ(restored.size(), 2u);
  ASSERT_TRUE(restored.at(conv.id()).memory());
  EXPECT_EQ(restored.at(conv.id()).memory()->save(), mem.save());
  EXPECT_FALSE(restored.at(other.id()).memory());
  // Without a memory the state stays at the older version.
  EXPECT_LT(other.save()[8], 14);
  // A fork shares the store.
  auto child = conv.fork();
  child.memory()->add("shared", std::vector<float>(ex.embedding_size(), 0.25f));
  EXPECT_EQ(mem.size(), 3u);
}

TEST(Memory, DamagedBytesAndWrongUseAreRefusedByName) {
  using weft::Errc;
  weft::Memory mem;
  mem.add("a", {1, 0, 0});
  mem.add("b", {0, 1, 0}, "meta");
  const auto good = mem.save();
  EXPECT_TRUE(weft_test::throws_weft([&] { weft::Memory::load(std::vector<std::uint8_t>(good.begin(), good.end() - 9)); },
                                     Errc::corrupt));
  for (std::size_t i = 8; i < good.size(); i += 7) {
    auto bad = good;
    bad[i] ^= 0x5a;
    EXPECT_TRUE(weft_test::throws_weft([&] { weft::Memory::load(bad); }, Errc::corrupt)) << "byte " << i;
  }
  EXPECT_TRUE(weft_test::throws_weft([&] { weft::Memory::load(std::vector<std::uint8_t>{1, 2, 3}); }, Errc::corrupt,
                                     "WEFTMEM"));
  {
    // An intact store of another format version (its checksum made anew).
    auto other = good;
    other[8] = 2;
    const auto crc = weft::detail::crc32(std::span<const std::uint8_t>(other).first(other.size() - 4));
    std::memcpy(other.data() + other.size() - 4, &crc, 4);
    EXPECT_TRUE(weft_test::throws_weft([&] { weft::Memory::load(other); }, Errc::incompatible, "format version 2"));
  }
  EXPECT_TRUE(weft_test::throws_weft([&] { mem.add("c", {1, 0}); }, Errc::invalid_argument, "2 floats in a store of width 3"));
  EXPECT_TRUE(weft_test::throws_weft([&] { mem.search(std::vector<float>{1, 0}, 1); }, Errc::invalid_argument,
                                     "width 3"));
  EXPECT_FALSE(mem.remove(99));
  EXPECT_EQ(mem.size(), 2u);
  // An executor without an embedder, and one whose embedder differs from the store's.
  weft::ExecutorParams plain;
  plain.n_threads = 2;
  weft::Executor none(weft_test::tiny(), plain);
  EXPECT_TRUE(weft_test::throws_weft([&] { mem.add(none, "x"); }, Errc::invalid_argument, "no embedder"));
  weft::Executor a(weft_test::tiny(), params_with_embedder());
  weft::Memory filled;
  filled.add(a, "from the embed model");
  auto own = params_with_embedder();
  own.embedder->model.reset();  // the executor's own model instead
  weft::Executor b(weft_test::tiny(), own);
  EXPECT_TRUE(weft_test::throws_weft([&] { filled.add(b, "x"); }, Errc::incompatible, "another model"));
  EXPECT_EQ(filled.size(), 1u);
}

TEST(Memory, RecallPromptListsTheHitsInTheSystemTurn) {
  const std::vector<weft::MemoryHit> hits = {{1, 0.9f, "the baker owes you bread", ""},
                                             {2, 0.5f, "wolves roam the north", ""}};
  const std::vector<weft::ChatMessage> recent = {{"user", "Any news?"}};
  const auto p = weft::recall_prompt(weft_test::tiny(), "You are Brenna.", hits, recent, "You remember:", "chatml");
  const auto want = weft_test::tiny().apply_chat_template(
      std::vector<weft::ChatMessage>{{"system", "You are Brenna.\n\nYou remember:\n- the baker owes you bread\n- wolves roam the north"},
                                     {"user", "Any news?"}},
      true, "chatml");
  EXPECT_EQ(p, want);
  EXPECT_EQ(weft::recall_prompt(weft_test::tiny(), "", {}, recent, "x", "chatml"),
            weft_test::tiny().apply_chat_template(recent, true, "chatml"));
}

}  // namespace
