// Executor::embed against llama.cpp's own pooled output of each text decoded
// alone, whatever the steps batched it with; its budgets and turns; bad input.
#include <gtest/gtest.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"

namespace {

using weft_test::nmse;

const weft::Model &embed_model() {
  static const weft::Model m = weft::Model::load({.path = std::string(WEFT_TEST_MODELS) + "/embed.gguf"});
  return m;
}

const char *const kWords[] = {"the",   "blacksmith", "sells", "silver", "swords", "to",     "travellers", "at",
                              "dawn",  "river",      "gate",  "mayor",  "owes",   "three",  "gold",       "coins",
                              "wolf",  "forest",     "north", "bread",  "baker",  "market", "key",        "hidden",
                              "under", "anvil",      "song",  "tavern", "night",  "guard"};

std::string random_text(std::mt19937 &rng, int min_words, int max_words) {
  const int n = std::uniform_int_distribution<int>(min_words, max_words)(rng);
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ' ';
    s += kWords[rng() % std::size(kWords)];
  }
  return s;
}

std::vector<weft::Token> embed_tokens_of(const weft::Model &m, const std::string &text) {
  std::vector<weft::Token> tok(text.size() + 8);
  const int n = llama_tokenize(m.impl()->vocab, text.data(), static_cast<int32_t>(text.size()), tok.data(),
                               static_cast<int32_t>(tok.size()), true, false);
  tok.resize(static_cast<std::size_t>(std::max(n, 0)));
  return tok;
}

// llama.cpp's pooled, L2-normalised embedding of each group of texts decoded
// together in one batch on a fresh context (a group of one: the text alone).
std::vector<std::vector<float>> reference_embeddings(const weft::Model &m, const std::vector<std::string> &texts,
                                                     enum llama_pooling_type pooling) {
  auto p = weft_test::reference_context_params();
  p.n_ctx = 512;
  p.n_batch = 512;
  p.n_ubatch = 512;
  p.n_seq_max = 16;
  p.kv_unified = true;
  p.embeddings = true;
  p.pooling_type = pooling;
  p.n_threads = 2;
  p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(m.impl()->model, p);
  EXPECT_NE(ctx, nullptr);
  llama_batch batch = llama_batch_init(512, 0, 1);
  for (std::size_t j = 0; j < texts.size(); ++j) {
    const auto tok = embed_tokens_of(m, texts[j]);
    for (std::size_t i = 0; i < tok.size(); ++i) {
      const int k = batch.n_tokens++;
      batch.token[k] = tok[i];
      batch.pos[k] = static_cast<llama_pos>(i);
      batch.n_seq_id[k] = 1;
      batch.seq_id[k][0] = static_cast<llama_seq_id>(j);
      batch.logits[k] = 1;
    }
  }
  EXPECT_EQ(llama_decode(ctx, batch), 0);
  const auto n_embd = static_cast<std::size_t>(llama_model_n_embd_out(m.impl()->model));
  std::vector<std::vector<float>> out;
  for (std::size_t j = 0; j < texts.size(); ++j) {
    const float *e = llama_get_embeddings_seq(ctx, static_cast<llama_seq_id>(j));
    std::vector<float> v(e, e + n_embd);
    double s = 0;
    for (float x : v) s += double(x) * x;
    for (float &x : v) x = static_cast<float>(x / std::sqrt(s));
    out.push_back(std::move(v));
  }
  llama_batch_free(batch);
  llama_free(ctx);
  return out;
}

// What batching alone does to llama.cpp's pooled output here: the largest
// nmse of a text decoded beside up to 7 others against it decoded alone.
double embedding_noise_floor(const weft::Model &m, enum llama_pooling_type pooling) {
  std::mt19937 rng(99);
  double worst = 0;
  for (int s = 0; s < 6; ++s) {
    std::vector<std::string> texts;
    for (int i = 0; i < 8; ++i) texts.push_back(random_text(rng, 1, 24));
    const auto together = reference_embeddings(m, texts, pooling);
    for (std::size_t j = 0; j < texts.size(); ++j) {
      worst = std::max(worst, nmse(together[j], reference_embeddings(m, {texts[j]}, pooling)[0]));
    }
  }
  return worst;
}

weft::ExecutorParams params_with(std::optional<weft::Model> model, weft::Pooling pooling = weft::Pooling::model) {
  weft::ExecutorParams p;
  p.n_ctx = 1024;
  p.n_batch = 64;
  p.n_seq_max = 8;
  p.n_threads = 2;
  p.embedder = weft::EmbedderParams{.model = std::move(model), .pooling = pooling, .n_ctx = 512, .n_seq_max = 8};
  return p;
}

// Seeded scenarios: texts queued in random groups at random steps, beside
// generating conversations, under random token budgets; every vector equals
// the text's own, decoded alone by llama.cpp.
void check_against_reference(const std::optional<weft::Model> &embedder, const weft::Model &ref_model,
                             enum llama_pooling_type pooling) {
  const double tol = std::max(8.0 * embedding_noise_floor(ref_model, pooling), 1e-10);
  double worst = 0;
  for (unsigned seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    weft::Executor ex(weft_test::tiny(), params_with(embedder));
    std::vector<weft::Conversation> convs;
    for (int i = 0; i < 3; ++i) {
      convs.push_back(ex.create());
      convs.back().prompt(weft_test::random_tokens(rng, weft_test::tiny(), 20, true));
      convs.back().generate({.max_tokens = 12, .ignore_eos = true});
    }
    std::vector<std::pair<std::vector<std::string>, weft::Embedding>> queued;
    for (int step = 0; step < 400; ++step) {
      if (queued.size() < 8 && rng() % 3 == 0) {
        std::vector<std::string> texts;
        const int n = 1 + static_cast<int>(rng() % 4);
        for (int i = 0; i < n; ++i) texts.push_back(random_text(rng, 1, 30));
        queued.emplace_back(texts, ex.embed(texts));
      }
      const auto r = ex.step({.max_tokens = 1 + static_cast<std::uint32_t>(rng() % 64)});
      if (r.idle && queued.size() >= 8) break;
    }
    for (auto &[texts, e] : queued) {
      ASSERT_TRUE(e.done()) << "seed " << seed;
      ASSERT_FALSE(e.error()) << e.error()->what();
      ASSERT_EQ(e.n_done(), texts.size());
      for (std::size_t j = 0; j < texts.size(); ++j) {
        const auto want = reference_embeddings(ref_model, {texts[j]}, pooling)[0];
        const auto got = e.vector(j);
        ASSERT_EQ(got.size(), want.size());
        const double d = nmse(got, want);
        worst = std::max(worst, d);
        EXPECT_LE(d, tol) << "seed " << seed << " text '" << texts[j] << "'";
      }
    }
  }
  std::printf("embeddings: worst nmse %.3g, tolerance %.3g\n", worst, tol);
}

TEST(Embeddings, EqualLlamaCppsPooledOutputOfEachTextAloneWhateverTheBatch) {
  check_against_reference(embed_model(), embed_model(), LLAMA_POOLING_TYPE_MEAN);
}

TEST(Embeddings, TheExecutorsOwnModelPooledWhenNoEmbeddingModelIsGiven) {
  check_against_reference(std::nullopt, weft_test::tiny(), LLAMA_POOLING_TYPE_MEAN);
}

TEST(Embeddings, ReportTheirWidthAndAreUnitLength) {
  weft::Executor ex(weft_test::tiny(), params_with(embed_model()));
  EXPECT_EQ(ex.embedding_size(), static_cast<std::uint32_t>(embed_model().n_embd()));
  auto e = ex.embed({"the baker", "a wolf in the forest"});
  EXPECT_EQ(e.n_tokens(0), embed_tokens_of(embed_model(), "the baker").size());
  e.wait_for(std::chrono::milliseconds(0));
  weft_test::run_until_idle(ex);
  ASSERT_TRUE(e.done());
  for (const auto &v : e.vectors()) {
    double s = 0;
    for (float x : v) s += double(x) * x;
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  const auto st = ex.stats();
  EXPECT_EQ(st.texts_embedded, 2u);
  EXPECT_GT(st.embed_tokens, 2u);
  EXPECT_EQ(st.embed_pending, 0u);
  EXPECT_EQ(st.embed_tokens, e.n_tokens(0) + e.n_tokens(1));
}

// Texts longer than every step's token budget, beside conversations that
// want the whole budget: the texts go one per turn, every other step at
// worst, and no conversation goes two steps without a token.
TEST(Embeddings, TakeTurnsWithConversationsThatFillEveryBudget) {
  std::mt19937 rng(5);
  weft::Executor ex(weft_test::tiny(), params_with(embed_model()));
  std::vector<weft::Conversation> convs;
  std::vector<weft::Generation> gens;
  for (int i = 0; i < 4; ++i) {
    convs.push_back(ex.create());
    convs.back().prompt(weft_test::random_tokens(rng, weft_test::tiny(), 8, true));
    gens.push_back(convs.back().generate({.max_tokens = 200, .ignore_eos = true}));
  }
  // Until every conversation generates: the prompts go in first.
  for (int i = 0; i < 40 && std::any_of(gens.begin(), gens.end(), [](auto &g) { return g.n_tokens() == 0; }); ++i) {
    ex.step({.max_tokens = 4});
  }
  std::vector<std::string> texts;
  for (int i = 0; i < 6; ++i) texts.push_back(random_text(rng, 12, 16));  // > 4 tokens each
  auto e = ex.embed(texts);
  std::vector<std::size_t> last(convs.size());
  for (std::size_t i = 0; i < convs.size(); ++i) last[i] = gens[i].n_tokens();
  int steps = 0, quiet_max = 0;
  std::vector<int> quiet(convs.size(), 0);
  while (!e.done() && steps < 100) {
    ex.step({.max_tokens = 4});
    ++steps;
    for (std::size_t i = 0; i < convs.size(); ++i) {
      const std::size_t n = gens[i].n_tokens();
      quiet[i] = n > last[i] ? 0 : quiet[i] + 1;
      quiet_max = std::max(quiet_max, quiet[i]);
      last[i] = n;
    }
  }
  ASSERT_TRUE(e.done());
  EXPECT_FALSE(e.error());
  // 6 texts, each its own turn, every other step.
  EXPECT_LE(steps, 12);
  // 4 conversations on 4 tokens a step: each gets one every step but the turns'.
  EXPECT_LE(quiet_max, 2);
}

// Under a time budget no text fits: every text goes as a turn that takes
// its step alone, and the conversations still never sit out two steps running.
TEST(Embeddings, ATurnThatFillsATimeBudgetTakesItsStepAloneNeverTwoRunning) {
  std::mt19937 rng(12);
  weft::Executor ex(weft_test::tiny(), params_with(embed_model()));
  std::vector<weft::Generation> gens;
  std::vector<weft::Conversation> convs;
  for (int i = 0; i < 3; ++i) {
    convs.push_back(ex.create());
    convs.back().prompt(weft_test::random_tokens(rng, weft_test::tiny(), 8, true));
    gens.push_back(convs.back().generate({.max_tokens = 500, .ignore_eos = true}));
  }
  for (int i = 0; i < 8; ++i) ex.step();  // the prompts in; the cost model has seen one-token steps
  std::vector<std::string> texts;
  for (int i = 0; i < 5; ++i) texts.push_back(random_text(rng, 30, 40));
  auto e = ex.embed(texts);
  int steps = 0, alone = 0, zero_run = 0, zero_max = 0;
  while (!e.done() && steps < 100) {
    // Far below one text's decode, above nothing: the conversations fit one token.
    const auto r = ex.step({.max_time = std::chrono::microseconds(1500)});
    ++steps;
    alone += r.tokens_embedded > 0 && r.tokens_decoded == 0 ? 1 : 0;
    zero_run = r.tokens_decoded == 0 ? zero_run + 1 : 0;
    zero_max = std::max(zero_max, zero_run);
  }
  ASSERT_TRUE(e.done());
  EXPECT_FALSE(e.error());
  EXPECT_LE(zero_max, 1) << "the conversations sat out " << zero_max << " steps running";
  EXPECT_LE(steps, 2 * 5 + 2);
  std::printf("embeddings: 5 texts in %d steps, %d of them alone\n", steps, alone);
  for (auto &g : gens) g.cancel();
}

TEST(Embeddings, ATimeBudgetSpreadsTextsOverSteps) {
  weft::Executor ex(weft_test::tiny(), params_with(embed_model()));
  std::mt19937 rng(8);
  std::vector<std::string> texts;
  for (int i = 0; i < 40; ++i) texts.push_back(random_text(rng, 20, 30));
  auto e = ex.embed(texts);
  int steps = 0;
  // A budget well below one decode of all 40 texts.
  while (!e.done() && steps < 400) {
    ex.step({.max_time = std::chrono::microseconds(300)});
    ++steps;
  }
  ASSERT_TRUE(e.done());
  EXPECT_FALSE(e.error());
  EXPECT_GT(ex.stats().embed_decodes, 2u) << "40 texts in " << steps << " steps";
}

TEST(Embeddings, CancelDropsWhatIsNotEmbeddedAndDestroyEndsThePending) {
  std::optional<weft::Executor> ex(std::in_place, weft_test::tiny(), params_with(embed_model()));
  auto a = ex->embed({"the mayor owes gold"});
  a.cancel();
  ASSERT_TRUE(a.done());
  ASSERT_TRUE(a.error());
  EXPECT_EQ(a.error()->code(), weft::Errc::cancelled);
  weft_test::run_until_idle(*ex);
  EXPECT_EQ(a.n_done(), 0u);
  EXPECT_EQ(ex->stats().texts_embedded, 0u);
  auto b = ex->embed({"the guard at the gate"});
  ex.reset();
  EXPECT_TRUE(b.wait_for(std::chrono::milliseconds(1000)));
  ASSERT_TRUE(b.error());
  EXPECT_EQ(b.error()->code(), weft::Errc::disposed);
}

TEST(Embeddings, TheWorkerEmbedsWithoutAnyoneStepping) {
  weft::Executor ex(weft_test::tiny(), params_with(embed_model()));
  ex.start();
  auto e = ex.embed({"song of the tavern", "the wolf of the north"});
  EXPECT_TRUE(e.wait_for(std::chrono::seconds(20)));
  EXPECT_EQ(e.n_done(), 2u);
  EXPECT_EQ(ex.stats().texts_embedded, 2u) << "counted before the vectors are handed out";
  ex.stop();
}

TEST(Embeddings, BadInputIsRefusedByName) {
  using weft::Errc;
  {
    weft::ExecutorParams p;
    p.n_threads = 2;
    weft::Executor ex(weft_test::tiny(), p);
    EXPECT_TRUE(weft_test::throws_weft([&] { ex.embed({"x"}); }, Errc::invalid_argument, "no embedder"));
    EXPECT_EQ(ex.embedding_size(), 0u);
  }
  auto p = params_with(embed_model());
  p.embedder->n_ctx = 4;
  EXPECT_TRUE(weft_test::throws_weft([&] { weft::Executor(weft_test::tiny(), p); }, Errc::invalid_argument,
                                     "EmbedderParams.n_ctx = 4"));
  p = params_with(embed_model());
  p.embedder->n_seq_max = 0;
  EXPECT_TRUE(weft_test::throws_weft([&] { weft::Executor(weft_test::tiny(), p); }, Errc::invalid_argument,
                                     "EmbedderParams.n_seq_max = 0"));
  p = params_with(embed_model());
  p.embedder->n_ctx = 16;
  weft::Executor ex(weft_test::tiny(), p);
  EXPECT_TRUE(weft_test::throws_weft([&] { ex.embed({}); }, Errc::invalid_argument, "no texts"));
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "gold ";
  EXPECT_TRUE(weft_test::throws_weft([&] { ex.embed({"short", long_text}); }, Errc::out_of_range,
                                     "text 1 has"));
  EXPECT_TRUE(weft_test::throws_weft([&] { ex.embed_tokens({{1, 2}, {}}); }, Errc::invalid_argument, "input 1"));
  EXPECT_TRUE(weft_test::throws_weft([&] { ex.embed_tokens({{1, embed_model().n_vocab()}}); }, Errc::out_of_range,
                                     std::to_string(embed_model().n_vocab())));
  // Nothing refused was queued; the executor goes on.
  EXPECT_EQ(ex.stats().embed_pending, 0u);
  auto ok = ex.embed_tokens({{1, 5, 9}});
  weft_test::run_until_idle(ex);
  EXPECT_EQ(ok.n_done(), 1u);
  EXPECT_TRUE(weft_test::throws_weft([&] { ok.vector(1); }, Errc::out_of_range, "1 inputs"));
  EXPECT_TRUE(weft_test::throws_weft([&] { weft::cosine_similarity(std::vector<float>{1, 2}, std::vector<float>{1}); },
                                     Errc::invalid_argument, "2 and 1"));
}

}  // namespace
