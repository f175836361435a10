// The npc-draft preset: npc's drafter for speculative decoding. It must share
// npc's vocabulary token for token (a drafter's tokens are the target's), be
// smaller, and load in stock llama.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>

#include <llama.h>

#include "cli_run.hpp"
#include "common.hpp"
#include "reference.hpp"

using weft_test::throws_weft;

namespace {

struct LlamaModelFree {
  void operator()(llama_model *m) const { llama_model_free(m); }
};
using LlamaModelPtr = std::unique_ptr<llama_model, LlamaModelFree>;

LlamaModelPtr load_in_llama(const std::string &path) {
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  return LlamaModelPtr(llama_model_load_from_file(path.c_str(), mp));
}

// A preset's parameters cut to a test-sized run (a small corpus, one epoch,
// a short warm-up) but keeping the preset's shape, so the file has the
// preset's layers and width.
weft::TrainParams test_sized(weft::ModelPreset preset, const std::filesystem::path &out) {
  weft::TrainParams t = weft::npc_train_params(preset);
  t.corpus = {.seed = 11, .target_bytes = 24'000};
  t.seed = 5;
  t.epochs = 1;
  t.warmup_steps = 5;
  t.eval_share = 0.1f;
  t.out = out.string();
  return t;
}

}  // namespace

TEST(NpcDraft, ParamsAreNpcsWithASmallerShape) {
  const weft::TrainParams npc = weft::npc_train_params(weft::ModelPreset::npc);
  const weft::TrainParams draft = weft::npc_train_params(weft::ModelPreset::npc_draft);
  EXPECT_EQ(weft::npc_model_key(npc), weft::npc_model_key(weft::TrainParams{}));  // npc is the defaults
  EXPECT_EQ(draft.preset, weft::ModelPreset::npc_draft);
  EXPECT_GE(draft.n_layer, 1);
  EXPECT_LE(draft.n_layer, 2);
  EXPECT_LT(draft.n_embd, npc.n_embd);
  EXPECT_EQ(draft.n_embd / draft.n_head, npc.n_embd / npc.n_head);  // the same head size
  // The same corpus, vocabulary and context: only the model is smaller.
  EXPECT_EQ(draft.corpus.seed, npc.corpus.seed);
  EXPECT_EQ(draft.corpus.target_bytes, npc.corpus.target_bytes);
  EXPECT_EQ(draft.vocab, npc.vocab);
  EXPECT_EQ(draft.n_ctx, npc.n_ctx);
  EXPECT_EQ(draft.eval_share, npc.eval_share);

  const weft::ModelShape s = weft::preset_shape(weft::ModelPreset::npc_draft);
  EXPECT_EQ(s.n_layer, draft.n_layer);
  EXPECT_EQ(s.n_embd, draft.n_embd);
  EXPECT_EQ(s.n_ff, draft.n_ff);
  EXPECT_EQ(s.default_type, weft::WeightType::f32);
  EXPECT_STREQ(weft::preset_name(weft::ModelPreset::npc_draft), "npc-draft");
  EXPECT_EQ(weft::parse_preset("npc-draft"), weft::ModelPreset::npc_draft);

  // A draft never shares a cache key with an npc trained to the same shape.
  weft::TrainParams npc_shaped = draft;
  npc_shaped.preset = weft::ModelPreset::npc;
  EXPECT_NE(weft::npc_model_key(npc_shaped), weft::npc_model_key(draft));
}

TEST(NpcDraft, OnlyTrainedPresetsTrain) {
  EXPECT_TRUE(throws_weft([] { weft::npc_train_params(weft::ModelPreset::tiny); }, weft::Errc::invalid_argument,
                          "tiny"));
  auto t = test_sized(weft::ModelPreset::npc_draft, weft_test::temp_dir("draft-bad") / "x.gguf");
  t.preset = weft::ModelPreset::small;
  EXPECT_TRUE(throws_weft([&] { weft::train_npc_model(t); }, weft::Errc::invalid_argument, "TrainParams.preset"));
  EXPECT_TRUE(throws_weft([] { weft::make_model({.preset = weft::ModelPreset::npc_draft, .type = weft::WeightType::q8_0,
                                                 .out = "x.gguf"}); },
                          weft::Errc::invalid_argument, "npc-draft"));
  EXPECT_TRUE(throws_weft([] { weft::make_model({.preset = weft::ModelPreset::npc_draft,
                                                 .arch = weft::ModelArch::gemma3, .out = "x.gguf"}); },
                          weft::Errc::invalid_argument, "arch = gemma3"));
}

// The draft's tokens are npc's: the same count, and every token's text, score
// and attributes, the same special tokens, the same tokenization of corpus text.
TEST(NpcDraft, HasNpcsVocabularyAndLoadsInLlamaCpp) {
  const auto dir = weft_test::temp_dir("npc-draft");
  const auto draft_params = test_sized(weft::ModelPreset::npc_draft, dir / "draft.gguf");
  auto npc_params = test_sized(weft::ModelPreset::npc, dir / "npc.gguf");
  // npc's shape is beside the point here (its vocabulary is); keep it cheap.
  npc_params.n_layer = 1;
  npc_params.n_embd = 32;
  npc_params.n_head = 2;
  npc_params.n_ff = 64;
  const auto r = weft::train_npc_model(draft_params);
  EXPECT_LT(r.eval_loss, r.eval_loss_before - 1.0);  // it learned, even in one short epoch
  weft::train_npc_model(npc_params);

  const auto draft = load_in_llama(draft_params.out);
  const auto npc = load_in_llama(npc_params.out);
  ASSERT_TRUE(draft);
  ASSERT_TRUE(npc);
  EXPECT_EQ(llama_model_n_layer(draft.get()), weft::preset_shape(weft::ModelPreset::npc_draft).n_layer);
  EXPECT_EQ(llama_model_n_embd(draft.get()), weft::preset_shape(weft::ModelPreset::npc_draft).n_embd);
  const llama_vocab *dv = llama_model_get_vocab(draft.get());
  const llama_vocab *nv = llama_model_get_vocab(npc.get());
  ASSERT_EQ(llama_vocab_n_tokens(dv), llama_vocab_n_tokens(nv));
  EXPECT_GT(llama_vocab_n_tokens(dv), 1000);
  EXPECT_EQ(llama_vocab_type(dv), llama_vocab_type(nv));
  for (llama_token t = 0; t < llama_vocab_n_tokens(dv); ++t) {
    ASSERT_STREQ(llama_vocab_get_text(dv, t), llama_vocab_get_text(nv, t)) << "token " << t;
    ASSERT_EQ(llama_vocab_get_score(dv, t), llama_vocab_get_score(nv, t)) << "token " << t;
    ASSERT_EQ(llama_vocab_get_attr(dv, t), llama_vocab_get_attr(nv, t)) << "token " << t;
  }
  EXPECT_EQ(llama_vocab_bos(dv), llama_vocab_bos(nv));
  EXPECT_EQ(llama_vocab_eos(dv), llama_vocab_eos(nv));
  EXPECT_EQ(llama_vocab_eot(dv), llama_vocab_eot(nv));
  EXPECT_EQ(llama_vocab_nl(dv), llama_vocab_nl(nv));
  EXPECT_EQ(llama_vocab_pad(dv), llama_vocab_pad(nv));
  EXPECT_EQ(llama_vocab_get_add_bos(dv), llama_vocab_get_add_bos(nv));
  EXPECT_EQ(llama_vocab_get_add_eos(dv), llama_vocab_get_add_eos(nv));

  // weft loads it, records what it is, and tokenizes as npc does; stock
  // llama_decode runs it to finite logits.
  const auto m = weft::Model::load({.path = draft_params.out});
  const auto n = weft::Model::load({.path = npc_params.out});
  EXPECT_EQ(m.meta("weft.preset"), "npc-draft");
  EXPECT_EQ(m.meta("general.name"), "weft-npc-draft-seed5");
  EXPECT_EQ(m.meta("weft.train_key"), weft::npc_model_key(draft_params));
  EXPECT_EQ(n.meta("weft.preset"), "npc");
  const std::string text = weft::make_npc_corpus({.seed = 77, .target_bytes = 2'000});
  const auto tokens = m.tokenize(text, {.add_bos = true});
  EXPECT_EQ(tokens, n.tokenize(text, {.add_bos = true}));
  const auto logits = weft_test::reference_logits(m, tokens);
  ASSERT_EQ(logits.size(), static_cast<std::size_t>(llama_vocab_n_tokens(dv)));
  for (float l : logits) ASSERT_TRUE(std::isfinite(l));
}

TEST(NpcDraft, CliTrainsTheDraftShapeAndCachesItByContent) {
  auto dir = weft_test::temp_dir("npc-draft-cli");
  const std::string env = "WEFT_CACHE_DIR=" + (dir / "cache").string() + " ";
  const std::string args = " make-model --preset npc-draft --seed 3 --corpus-bytes 24000 --epochs 1 --warmup 5 --out ";
  const auto a = weft_test::run_cli_env(env, args + (dir / "a.gguf").string());
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("training the npc-draft model"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("2 layers x 64 wide"), std::string::npos) << a.output;
  const auto b = weft_test::run_cli_env(env, args + (dir / "b.gguf").string());
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(b.output.find("training"), std::string::npos) << b.output;  // served from the cache
  EXPECT_TRUE(weft_test::read_file(dir / "a.gguf") == weft_test::read_file(dir / "b.gguf"));
  const auto models = dir / "cache" / "models";
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(models), std::filesystem::directory_iterator()), 1);
  const auto cached = std::filesystem::directory_iterator(models)->path().filename().string();
  EXPECT_TRUE(cached.starts_with("npc-draft-")) << cached;
  const auto m = weft::Model::load({.path = (dir / "a.gguf").string()});
  EXPECT_EQ(m.n_layer(), 2);
  EXPECT_EQ(m.meta("weft.preset"), "npc-draft");

  // An option given overrides the draft's value; the rest stay the draft's.
  const auto c = weft_test::run_cli_env(env, " make-model --preset npc-draft --no-cache -q --corpus-bytes 24000 "
                                             "--epochs 1 --warmup 5 --layers 1 --out " + (dir / "c.gguf").string());
  ASSERT_EQ(c.status, 0) << c.output;
  const auto mc = weft::Model::load({.path = (dir / "c.gguf").string()});
  EXPECT_EQ(mc.n_layer(), 1);
  EXPECT_EQ(mc.n_embd(), 64);
}
