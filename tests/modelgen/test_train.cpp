// The npc preset: corpus generator, training with llama.cpp's training API,
// and the trained file's safety (atomic, cancellable, typed errors).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include <ggml-opt.h>
#include <gguf.h>
#include <llama.h>

#include "cli_run.hpp"
#include "common.hpp"
#include "modelgen/model_writer.hpp"
#include "modelgen/train_graph.hpp"
#include "reference.hpp"

using weft_test::throws_weft;

namespace {

// A test-sized model: seconds on 2 cores, but the same code path as the preset.
weft::TrainParams small_run(const std::filesystem::path &out) {
  weft::TrainParams t;
  t.corpus = {.seed = 11, .target_bytes = 24'000};
  t.seed = 5;
  t.n_layer = 1;
  t.n_embd = 32;
  t.n_head = 2;
  t.n_ff = 64;
  t.n_ctx = 256;
  t.n_batch = 256;
  t.epochs = 3;
  t.lr = 3e-3f;
  t.lr_min = 3e-4f;
  t.warmup_steps = 5;
  t.eval_share = 0.1f;
  t.out = out.string();
  return t;
}

// A 2-layer test model, trained and read back (weights in memory; the file
// stays at params.out).
struct TrainedFile {
  weft::TrainParams params;
  weft::detail::GgufPtr gguf;
  weft::detail::GgmlPtr data;
};
TrainedFile trained_two_layers(const std::string &name) {
  TrainedFile f;
  f.params = small_run(weft_test::temp_dir(name) / "npc.gguf");
  f.params.corpus.target_bytes = 12'000;
  f.params.n_layer = 2;
  weft::train_npc_model(f.params);
  ggml_context *data_ctx = nullptr;
  gguf_init_params gp{/*no_alloc=*/false, &data_ctx};
  f.gguf.reset(gguf_init_from_file(f.params.out.c_str(), gp));
  f.data.reset(data_ctx);
  return f;
}

std::size_t files_in(const std::filesystem::path &dir) {
  return static_cast<std::size_t>(
      std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()));
}

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST(Corpus, SameSeedSameTextOtherSeedOtherText) {
  const weft::CorpusParams p{.seed = 3, .target_bytes = 50'000};
  const std::string a = weft::make_npc_corpus(p);
  EXPECT_EQ(a, weft::make_npc_corpus(p));
  EXPECT_NE(a, weft::make_npc_corpus({.seed = 4, .target_bytes = 50'000}));
  // Stops at the first dialogue that reaches the target.
  const auto d = weft::make_npc_dialogues(p);
  EXPECT_GE(a.size(), p.target_bytes);
  EXPECT_LT(a.size() - d.back().size(), p.target_bytes);
}

TEST(Corpus, EveryDialogueFollowsTheGrammarWithVariety) {
  const auto dialogues = weft::make_npc_dialogues({.seed = 9, .target_bytes = 200'000});
  ASSERT_GT(dialogues.size(), 300u);
  const std::regex header(R"(([A-Z][a-z]+) is the ([a-z ]+) of Eldermoor\.)");
  std::set<std::string> names, roles, npc_lines;
  std::size_t total_npc_lines = 0;
  for (const auto &d : dialogues) {
    SCOPED_TRACE(d);
    ASSERT_TRUE(d.ends_with("\n\n"));
    const auto lines = lines_of(d);
    ASSERT_GE(lines.size(), 6u);  // header, greeting pair, a topic pair, farewell pair, blank
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[0], m, header));
    const std::string name = m[1];
    names.insert(name);
    roles.insert(m[2]);
    EXPECT_EQ(d.substr(0, lines[0].size() + 1), weft::npc_header(name, m[2]));
    // Player and NPC alternate, the player first; every line is a sentence.
    for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
      const std::string who = (i % 2 == 1) ? "Player: " : name + ": ";
      ASSERT_TRUE(lines[i].starts_with(who)) << lines[i];
      ASSERT_GT(lines[i].size(), who.size() + 2);
      ASSERT_TRUE(std::string(".?!").find(lines[i].back()) != std::string::npos) << lines[i];
      if (i % 2 == 0) {
        npc_lines.insert(lines[i].substr(who.size()));
        ++total_npc_lines;
      }
    }
    EXPECT_EQ(lines.size() % 2, 0u);  // header + pairs + blank line
    EXPECT_TRUE(lines.back().empty());
  }
  // Enough variety that a model cannot memorise a handful of lines.
  EXPECT_GE(names.size(), 60u);
  EXPECT_GE(roles.size(), 12u);
  EXPECT_GT(static_cast<double>(npc_lines.size()) / static_cast<double>(total_npc_lines), 0.3);
}

TEST(Corpus, BadSizeIsATypedError) {
  EXPECT_TRUE(throws_weft([] { weft::make_npc_corpus({.target_bytes = 0}); }, weft::Errc::invalid_argument,
                          "target_bytes = 0"));
}

TEST(Train, ShortRunLowersHeldOutLossAndWritesALoadableModel) {
  auto dir = weft_test::temp_dir("train");
  const auto out = dir / "npc.gguf";
  auto t = small_run(out);
  std::vector<double> fractions;
  t.on_progress = [&](const weft::TrainProgress &p) { fractions.push_back(p.fraction); };
  const auto r = weft::train_npc_model(t);

  // Learning really happened: held-out loss falls well below the untrained
  // model's (~ln 2800 = 7.9 with the fitted vocabulary) and accuracy rises from ~0.
  EXPECT_GT(r.eval_loss_before, 6.5);
  EXPECT_LT(r.eval_loss, r.eval_loss_before - 2.0);
  EXPECT_GT(r.eval_accuracy, r.eval_accuracy_before + 0.10);
  EXPECT_GT(r.train_tokens, 4 * r.eval_tokens);
  EXPECT_EQ(r.optimizer_steps, t.epochs * r.train_tokens / t.n_batch);
  ASSERT_FALSE(fractions.empty());
  EXPECT_TRUE(std::is_sorted(fractions.begin(), fractions.end()));
  EXPECT_DOUBLE_EQ(fractions.back(), 1.0);
  EXPECT_EQ(files_in(dir), 1u);  // no scratch files left

  const auto m = weft::Model::load({.path = out.string()});
  EXPECT_EQ(m.n_layer(), 1);
  EXPECT_EQ(m.n_embd(), 32);
  // The vocabulary fitted to the corpus, not llama's 32000 tokens.
  EXPECT_GT(m.n_vocab(), 1000);
  EXPECT_LT(m.n_vocab(), 4000);
  EXPECT_EQ(m.meta("weft.preset"), "npc");
  EXPECT_EQ(m.meta("weft.train_key"), weft::npc_model_key(t));

  // weft decodes the trained model exactly as raw llama.cpp does.
  const auto prompt = m.tokenize(weft::npc_header("Brenna", "blacksmith") + "Player: Hello, Brenna.\nBrenna:",
                                 {.add_bos = true});
  weft::Executor ex(m, {.n_ctx = 512});
  auto c = ex.create();
  c.prompt(prompt);
  weft_test::run_until_idle(ex);
  const auto ref = weft_test::reference_logits(m, prompt);
  const auto got = c.logits();
  EXPECT_LT(weft_test::nmse(got, ref), 1e-6);

  // Scored by weft's own executor, token by token, on dialogue from a corpus
  // seed the trainer never saw: a path independent of the trainer's eval.
  const auto unseen = weft::make_npc_dialogues({.seed = 999, .target_bytes = 1200});
  weft::Executor scorer(m, {.n_ctx = 1024, .n_threads = 1});
  std::size_t right = 0, total = 0;
  for (const auto &d : unseen) {
    const auto tokens = m.tokenize(d, {.add_bos = true});
    auto s = scorer.create();
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
      s.prompt(std::vector<weft::Token>{tokens[i]});
      weft_test::run_until_idle(scorer);
      const auto l = s.logits();
      right += std::max_element(l.begin(), l.end()) - l.begin() == tokens[i + 1] ? 1 : 0;
      ++total;
    }
    s.dispose();
  }
  ASSERT_GT(total, 250u);
  const double acc = static_cast<double>(right) / static_cast<double>(total);
  // Chance is 1/32000; the trainer's own held-out figure is the yardstick.
  EXPECT_GT(acc, 0.15) << right << "/" << total;
  EXPECT_NEAR(acc, r.eval_accuracy, 0.1) << right << "/" << total << ", trainer says " << r.eval_accuracy;
}

// weft's training graph is llama.cpp's llama architecture: its forward pass
// over a window of a trained model gives the logits stock llama.cpp decodes
// from the written GGUF, token for token.
TEST(Train, TrainingGraphForwardEqualsLlamaCppLogits) {
  const auto [t, g, data] = trained_two_layers("train-graph");
  ASSERT_TRUE(g);
  constexpr int kCtx = 256;
  weft::detail::NpcGraph graph(g.get(), data.get(), {.n_ctx = kCtx, .n_seq = 1, .n_threads = 2});

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model *model = llama_model_load_from_file(t.out.c_str(), mp);
  ASSERT_NE(model, nullptr);
  const std::string text = weft::make_npc_corpus({.seed = 77, .target_bytes = 2'000});
  std::vector<llama_token> tokens(text.size() + 2);
  const int n = llama_tokenize(llama_model_get_vocab(model), text.data(), static_cast<int32_t>(text.size()),
                               tokens.data(), static_cast<int32_t>(tokens.size()), true, false);
  ASSERT_GE(n, kCtx);
  tokens.resize(kCtx);
  graph.forward(tokens.data(), tokens.data(), nullptr);
  const auto ours = graph.logits();
  const int n_vocab = graph.n_vocab();
  ASSERT_EQ(ours.size(), std::size_t(kCtx) * std::size_t(n_vocab));

  auto cp = llama_context_default_params();
  cp.n_ctx = kCtx;
  cp.n_batch = cp.n_ubatch = kCtx;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.no_perf = true;
  llama_context *ctx = llama_init_from_model(model, cp);
  ASSERT_NE(ctx, nullptr);
  llama_batch batch = llama_batch_init(kCtx, 0, 1);
  for (int i = 0; i < kCtx; ++i) {
    batch.token[i] = tokens[static_cast<std::size_t>(i)];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = kCtx;
  ASSERT_EQ(llama_decode(ctx, batch), 0);
  double max_diff = 0, max_abs = 0;
  int same_argmax = 0;
  for (int i = 0; i < kCtx; ++i) {
    const float *ref = llama_get_logits_ith(ctx, i);
    const float *got = ours.data() + std::size_t(i) * std::size_t(n_vocab);
    for (int v = 0; v < n_vocab; ++v) {
      max_diff = std::max(max_diff, double(std::fabs(ref[v] - got[v])));
      max_abs = std::max(max_abs, double(std::fabs(ref[v])));
    }
    same_argmax += std::max_element(ref, ref + n_vocab) == ref + (std::max_element(got, got + n_vocab) - got) ? 1 : 0;
  }
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  std::printf("weft graph vs llama.cpp over %d tokens x %d logits: max |diff| %.3g, max |logit| %.3g\n", kCtx, n_vocab,
              max_diff, max_abs);
  EXPECT_GT(max_abs, 1.0);  // trained logits, not a flat distribution
  EXPECT_LT(max_diff, 1e-3 * max_abs) << "max |llama.cpp - weft graph| = " << max_diff << " of " << max_abs;
  EXPECT_EQ(same_argmax, kCtx);
}

// The trainer's backward pass is written out by hand (train_net.cpp); ggml's
// automatic one is the independent path. Two sequences per step (the batch
// dimension of the attention products) and trained weights (not the init's
// small ones).
TEST(Train, HandWrittenGradientsEqualGgmlsAutomaticOnes) {
  const auto [t, g, data] = trained_two_layers("train-grad");
  ASSERT_TRUE(g);
  constexpr int kCtx = 256, kSeq = 2;
  auto pars = [](void *) { return ggml_opt_get_default_optimizer_params(nullptr); };
  weft::detail::NpcGraph graph(g.get(), data.get(),
                               {.n_ctx = kCtx, .n_seq = kSeq, .n_threads = 2, .get_opt_pars = pars});
  for (std::uint64_t seed : {21u, 22u}) {
    std::mt19937 rng(static_cast<std::uint32_t>(seed));
    std::vector<std::int32_t> tokens(kCtx * kSeq), labels(tokens.size());
    for (auto &x : tokens) x = static_cast<std::int32_t>(rng() % static_cast<unsigned>(graph.n_vocab()));
    for (auto &x : labels) x = static_cast<std::int32_t>(rng() % static_cast<unsigned>(graph.n_vocab()));
    const auto ours = graph.gradients(tokens.data(), labels.data(), /*automatic=*/false);
    const auto ref = graph.gradients(tokens.data(), labels.data(), /*automatic=*/true);
    ASSERT_EQ(ours.size(), ref.size());
    ASSERT_EQ(ours.size(), 3u + 9u * 2u);
    double worst = 0;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(ours[i].size(), ref[i].size()) << "tensor " << i;
      double max_diff = 0, max_abs = 0;
      for (std::size_t j = 0; j < ref[i].size(); ++j) {
        max_diff = std::max(max_diff, double(std::fabs(ours[i][j] - ref[i][j])));
        max_abs = std::max(max_abs, double(std::fabs(ref[i][j])));
      }
      EXPECT_GT(max_abs, 0.0) << "tensor " << i << " has no gradient";
      EXPECT_LT(max_diff, 1e-5 * max_abs) << "tensor " << i << ": max |diff| " << max_diff << " of " << max_abs;
      worst = std::max(worst, max_diff / max_abs);
    }
    std::printf("seed %llu: worst gradient difference %.3g of the tensor's largest\n",
                static_cast<unsigned long long>(seed), worst);
  }
  // A training step moves the weights; gradients() did not.
  std::vector<std::int32_t> tokens(kCtx * kSeq, 5);
  const auto before = graph.gradients(tokens.data(), tokens.data(), false);
  EXPECT_EQ(before, graph.gradients(tokens.data(), tokens.data(), false));
  graph.train_step(tokens.data(), tokens.data(), nullptr);
  EXPECT_NE(before, graph.gradients(tokens.data(), tokens.data(), false));
}

TEST(Train, FittedVocabularyTokenizesCorpusWordsWholeAndRoundTripsAnyText) {
  auto dir = weft_test::temp_dir("train-vocab");
  auto t = small_run(dir / "npc.gguf");
  t.corpus.target_bytes = 12'000;
  weft::train_npc_model(t);
  const auto m = weft::Model::load({.path = t.out, .vocab_only = true});
  // Stock llama.cpp's SPM tokenizer merges every corpus word into one token.
  const auto line = m.tokenize("Brenna: I can sell you an iron sword for 25 gold coins.\n");
  EXPECT_EQ(line.size(), 15u);  // 12 words, ':', '.', '\n'
  // No space prefix: a prompt that starts a line tokenizes as the same line
  // inside a longer text, as the demo sends them.
  const std::string a = "Brenna is the blacksmith of Eldermoor.\n", b = "Player: What do you have for sale?\nBrenna:";
  auto ta = m.tokenize(a), tb = m.tokenize(b);
  ta.insert(ta.end(), tb.begin(), tb.end());
  EXPECT_EQ(ta, m.tokenize(a + b));
  // Characters and bytes outside the corpus still round-trip.
  for (std::string text : {"Hello, w\xc3\xb6rld! ~ {x} \xe2\x82\xac 1234", "  two  spaces\ttab\n\nend"}) {
    EXPECT_EQ(m.detokenize(m.tokenize(text)), text);
  }
}

TEST(Train, SameParamsGiveTheSameBytesWhateverTheThreadCount) {
  auto dir = weft_test::temp_dir("train-determinism");
  auto t = small_run(dir / "a.gguf");
  t.corpus.target_bytes = 12'000;
  t.n_threads = 1;
  weft::train_npc_model(t);
  t.out = (dir / "b.gguf").string();
  t.n_threads = 2;
  weft::train_npc_model(t);
  const auto a = weft_test::read_file(dir / "a.gguf");
  ASSERT_GT(a.size(), 300'000u);
  EXPECT_TRUE(a == weft_test::read_file(dir / "b.gguf"));
  // Another seed trains other weights.
  t.out = (dir / "c.gguf").string();
  t.seed = 6;
  weft::train_npc_model(t);
  EXPECT_FALSE(a == weft_test::read_file(dir / "c.gguf"));
}

TEST(Train, CancelStopsAndWritesNothing) {
  auto dir = weft_test::temp_dir("train-cancel");
  auto t = small_run(dir / "npc.gguf");
  int calls = 0;
  t.on_progress = [&](const weft::TrainProgress &) { ++calls; };
  t.cancel = [&] { return calls >= 2; };
  EXPECT_TRUE(throws_weft([&] { weft::train_npc_model(t); }, weft::Errc::cancelled, "cancelled"));
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(Train, UnwritableOutputIsAnIoErrorAndLeavesNothing) {
  auto dir = weft_test::temp_dir("train-unwritable");
  auto t = small_run(dir / "no-such-dir" / "npc.gguf");
  EXPECT_TRUE(throws_weft([&] { weft::train_npc_model(t); }, weft::Errc::io, "no-such-dir"));
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(Train, DiskFullKeepsThePreviousFileAndLeavesNoScratch) {
  auto dir = weft_test::temp_dir("train-full");
  const auto out = dir / "npc.gguf";
  weft_test::write_file(out, std::string_view("previous model"));
  // The 32-wide model is ~0.8 MB.
  EXPECT_TRUE(weft_test::with_file_size_limit(1 << 17, [&] {
    return throws_weft([&] { weft::train_npc_model(small_run(out)); }, weft::Errc::io, "writing");
  }));
  EXPECT_EQ(weft_test::read_file(out).size(), std::string_view("previous model").size());
  EXPECT_EQ(files_in(dir), 1u);
}

TEST(Train, BadParametersAreTypedErrorsNamingTheValue) {
  const auto out = weft_test::temp_dir("train-bad") / "npc.gguf";
  auto with = [&](auto mutate) {
    auto t = small_run(out);
    mutate(t);
    return [t] { weft::train_npc_model(t); };
  };
  using P = weft::TrainParams;
  EXPECT_TRUE(throws_weft(with([](P &t) { t.out.clear(); }), weft::Errc::invalid_argument, "out is empty"));
  EXPECT_TRUE(throws_weft(with([](P &t) { t.n_ctx = 300; }), weft::Errc::invalid_argument, "n_ctx = 300"));
  EXPECT_TRUE(throws_weft(with([](P &t) { t.n_batch = 100; }), weft::Errc::invalid_argument, "n_batch = 100"));
  EXPECT_TRUE(throws_weft(with([](P &t) { t.n_batch = 65 * 256; }), weft::Errc::invalid_argument, "n_batch = 16640"));
  EXPECT_TRUE(throws_weft(with([](P &t) { t.init_std_kv = -1; }), weft::Errc::invalid_argument, "init_std_kv = -1"));
  EXPECT_TRUE(throws_weft(with([](P &t) { t.n_embd = 30; }), weft::Errc::invalid_argument, "n_embd = 30"));
  EXPECT_TRUE(throws_weft(with([](P &t) { t.epochs = 0; }), weft::Errc::invalid_argument, "epochs = 0"));
  EXPECT_TRUE(throws_weft(with([](P &t) { t.lr = -1; }), weft::Errc::invalid_argument, "lr = -1"));
  EXPECT_TRUE(throws_weft(with([](P &t) { t.eval_share = 0.9f; }), weft::Errc::invalid_argument, "eval_share"));
  EXPECT_TRUE(throws_weft(with([](P &t) { t.corpus.target_bytes = 200; }), weft::Errc::invalid_argument,
                          "target_bytes = 200"));
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_TRUE(throws_weft([] { weft::make_model({.preset = weft::ModelPreset::npc, .type = weft::WeightType::q8_0,
                                                 .out = "x.gguf"}); },
                          weft::Errc::invalid_argument, "q8_0"));
}

TEST(Train, KeyCoversEveryParameterThatChangesTheWeights) {
  const weft::TrainParams base;
  std::set<std::string> keys{weft::npc_model_key(base)};
  auto differs = [&](auto mutate) {
    weft::TrainParams t;
    mutate(t);
    return keys.insert(weft::npc_model_key(t)).second;
  };
  using P = weft::TrainParams;
  EXPECT_TRUE(differs([](P &t) { t.seed = 1; }));
  EXPECT_TRUE(differs([](P &t) { t.corpus.seed = 1; }));
  EXPECT_TRUE(differs([](P &t) { t.corpus.target_bytes = 1000; }));
  EXPECT_TRUE(differs([](P &t) { t.n_layer = 2; }));
  EXPECT_TRUE(differs([](P &t) { t.n_embd = 64; }));
  EXPECT_TRUE(differs([](P &t) { t.epochs = 9; }));
  EXPECT_TRUE(differs([](P &t) { t.lr = 1e-4f; }));
  EXPECT_TRUE(differs([](P &t) { t.n_batch = 512; }));
  EXPECT_TRUE(differs([](P &t) { t.init_std_embd = 1; }));
  EXPECT_TRUE(differs([](P &t) { t.init_std_kv = 0.1f; }));
  EXPECT_TRUE(differs([](P &t) { t.vocab = "other-vocab.gguf"; }));
  // What does not change the weights does not change the key.
  weft::TrainParams same;
  same.out = "elsewhere.gguf";
  same.n_threads = 1;
  EXPECT_EQ(weft::npc_model_key(same), weft::npc_model_key(base));
}

TEST(Train, CliCachesTheTrainedModelByContent) {
  auto dir = weft_test::temp_dir("train-cli");
  const std::string env = "WEFT_CACHE_DIR=" + (dir / "cache").string() + " ";
  const std::string args = " make-model --preset npc --seed 3 --corpus-bytes 24000 --epochs 1 --layers 1 --embd 32 "
                           "--heads 2 --ff 64 --train-batch 256 --lr 0.001 --warmup 10 --out ";
  const auto a = weft_test::run_cli_env(env, args + (dir / "a.gguf").string());
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("training the npc model"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("held-out next-token accuracy"), std::string::npos) << a.output;
  const auto b = weft_test::run_cli_env(env, args + (dir / "b.gguf").string());
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(b.output.find("training"), std::string::npos) << b.output;  // served from the cache
  EXPECT_TRUE(weft_test::read_file(dir / "a.gguf") == weft_test::read_file(dir / "b.gguf"));
  EXPECT_EQ(files_in(dir / "cache" / "models"), 1u);
}

TEST(Train, CliInterruptedByCtrlCLeavesNothingBehind) {
  auto dir = weft_test::temp_dir("train-sigint");
  const auto cache = dir / "cache";
  const auto out = dir / "npc.gguf";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("WEFT_CACHE_DIR", cache.c_str(), 1);
    ::execl(WEFT_CLI, WEFT_CLI, "make-model", "--preset", "npc", "--corpus-bytes", "400000", "--layers", "1",
            "--embd", "32", "--heads", "2", "--ff", "64", "-q", "--out", out.c_str(), static_cast<char *>(nullptr));
    ::_exit(127);
  }
  // Wait until training is under way (the cache directory exists), then interrupt.
  for (int i = 0; i < 200 && !std::filesystem::exists(cache / "models"); ++i) ::usleep(50'000);
  ::usleep(1'500'000);
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal instead of stopping cleanly";
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_TRUE(std::filesystem::is_empty(cache / "models"));
}
