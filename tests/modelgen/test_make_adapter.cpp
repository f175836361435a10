// weft::make_adapter: the files load in raw llama.cpp (llama_adapter_lora_init,
// llama_set_adapter_cvec) and change the logits by a measured amount.
#include <gguf.h>
#include <gtest/gtest.h>
#include <llama.h>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "cli_run.hpp"
#include "modelgen/model_writer.hpp"
#include "reference.hpp"
#include "weft/make_adapter.hpp"

using weft_test::throws_weft;

namespace {

namespace fs = std::filesystem;

fs::path adapter(const fs::path &dir, const std::string &name, weft::AdapterKind kind, std::uint64_t seed = 1,
                 const std::string &base = weft_test::tiny_path()) {
  const auto path = dir / name;
  weft::make_adapter({.base = base, .out = path.string(), .kind = kind, .seed = seed});
  return path;
}

// A llama-architecture model like tiny (FFN 256) but `n_layer` deep and
// `n_embd` wide.
fs::path other_model(const fs::path &dir, const std::string &name, int n_layer, int n_embd) {
  const auto path = dir / name;
  weft::detail::write_random_model({.shape = {n_layer, n_embd, 4, 2, 256, 512, false, weft::WeightType::f32},
                                    .type = weft::WeightType::f32,
                                    .preset = "adapter-test",
                                    .seed = 5,
                                    .out = path.string()});
  return path;
}

// Last-token logits of `tokens` decoded on a fresh raw context, after `setup`
// (which sets adapters on it) has run.
template <class Setup>
std::vector<float> raw_logits(const weft::Model &m, const std::vector<weft::Token> &tokens, Setup &&setup) {
  auto p = llama_context_default_params();
  p.n_ctx = 256;
  p.n_batch = p.n_ubatch = 64;
  p.n_seq_max = 1;
  p.n_threads = p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(m.impl()->model, p);
  EXPECT_NE(ctx, nullptr);
  setup(ctx);
  std::vector<llama_token> toks(tokens.begin(), tokens.end());
  EXPECT_EQ(llama_decode(ctx, llama_batch_get_one(toks.data(), static_cast<int32_t>(toks.size()))), 0);
  const float *l = llama_get_logits_ith(ctx, -1);
  std::vector<float> out(l, l + m.n_vocab());
  llama_free(ctx);
  return out;
}

std::vector<float> base_logits(const weft::Model &m, const std::vector<weft::Token> &tokens) {
  return raw_logits(m, tokens, [](llama_context *) {});
}

std::vector<weft::Token> prompt(const weft::Model &m) {
  std::mt19937 rng(17);
  return weft_test::random_tokens(rng, m, 24, /*bos=*/true);
}

// How far `x` is from `base`: mean |Δlogit| over the vocabulary, relative to
// the spread (std over the vocabulary) of the base logits; and whether the
// top token changed.
struct Effect {
  double mean_abs = 0, spread = 0;
  bool top_changed = false;
  double ratio() const { return mean_abs / spread; }
};

Effect effect(const std::vector<float> &x, const std::vector<float> &base) {
  Effect e;
  double mean = 0;
  for (float v : base) mean += v;
  mean /= double(base.size());
  for (std::size_t i = 0; i < base.size(); ++i) {
    e.mean_abs += std::abs(double(x[i]) - double(base[i]));
    e.spread += (double(base[i]) - mean) * (double(base[i]) - mean);
  }
  e.mean_abs /= double(base.size());
  e.spread = std::sqrt(e.spread / double(base.size()));
  e.top_changed = std::max_element(x.begin(), x.end()) - x.begin() != std::max_element(base.begin(), base.end()) -
                                                                        base.begin();
  return e;
}

void report(const char *what, const Effect &e) {
  std::printf("[ effect   ] %s: mean |dlogit| %.4f, base logit std %.4f, ratio %.3f, top token %s\n", what,
              e.mean_abs, e.spread, e.ratio(), e.top_changed ? "changed" : "same");
}

// The directions of a control vector file, concatenated from layer 1 as
// llama_set_adapter_cvec takes them (common_control_vector_load_one's reading).
std::vector<float> read_cvec(const fs::path &path, int n_embd, int n_layer) {
  ggml_context *data = nullptr;
  gguf_context *g = gguf_init_from_file(path.c_str(), {/*no_alloc=*/false, &data});
  EXPECT_NE(g, nullptr);
  EXPECT_STREQ(gguf_get_val_str(g, gguf_find_key(g, "general.architecture")), "controlvector");
  EXPECT_STREQ(gguf_get_val_str(g, gguf_find_key(g, "controlvector.model_hint")), "llama");
  EXPECT_EQ(gguf_get_val_i32(g, gguf_find_key(g, "controlvector.layer_count")), n_layer - 1);
  EXPECT_EQ(gguf_get_n_tensors(g), n_layer - 1);
  std::vector<float> out(static_cast<std::size_t>(n_embd) * static_cast<std::size_t>(n_layer - 1));
  for (int l = 1; l < n_layer; ++l) {
    const ggml_tensor *t = ggml_get_tensor(data, fmt::format("direction.{}", l).c_str());
    EXPECT_NE(t, nullptr) << "direction." << l;
    if (t == nullptr) continue;
    EXPECT_EQ(t->type, GGML_TYPE_F32);
    EXPECT_EQ(ggml_n_dims(t), 1);
    EXPECT_EQ(t->ne[0], n_embd);
    std::memcpy(out.data() + static_cast<std::size_t>(n_embd) * static_cast<std::size_t>(l - 1), t->data,
                ggml_nbytes(t));
  }
  gguf_free(g);
  ggml_free(data);
  return out;
}

}  // namespace

TEST(MakeAdapter, SameSeedSameBytesOtherSeedOtherBytes) {
  const auto dir = weft_test::temp_dir("adapter-seed");
  for (auto kind : {weft::AdapterKind::lora, weft::AdapterKind::control_vector}) {
    const std::string k = kind == weft::AdapterKind::lora ? "lora" : "cvec";
    SCOPED_TRACE(k);
    const auto a = weft_test::read_file(adapter(dir, k + "-a.gguf", kind, 3));
    const auto b = weft_test::read_file(adapter(dir, k + "-b.gguf", kind, 3));
    const auto c = weft_test::read_file(adapter(dir, k + "-c.gguf", kind, 4));
    ASSERT_GT(a.size(), 100u);
    EXPECT_TRUE(a == b);
    EXPECT_EQ(a.size(), c.size());
    EXPECT_FALSE(a == c);
  }
}

TEST(MakeAdapter, LoraLoadsInLlamaCppAndChangesLogits) {
  const auto dir = weft_test::temp_dir("adapter-lora");
  const auto path = adapter(dir, "lora.gguf", weft::AdapterKind::lora);
  const auto model = weft::Model::load({.path = weft_test::tiny_path()});
  llama_adapter_lora *lora = llama_adapter_lora_init(model.impl()->model, path.c_str());
  ASSERT_NE(lora, nullptr);
  char buf[64];
  ASSERT_GT(llama_adapter_meta_val_str(lora, "adapter.lora.alpha", buf, sizeof buf), 0);
  EXPECT_EQ(std::stof(buf), 16.0f);

  const auto tokens = prompt(model);
  const auto base = base_logits(model, tokens);
  auto with_scale = [&](float scale) {
    return raw_logits(model, tokens,
                      [&](llama_context *ctx) { ASSERT_EQ(llama_set_adapters_lora(ctx, &lora, 1, &scale), 0); });
  };
  const Effect full = effect(with_scale(1.0f), base);
  report("tiny LoRA, scale 1", full);
  // Measured (seed 1, default strength 0.5): ratio 0.55 at scale 1, top
  // token changed. Visible, not destructive: between a tenth of the logits'
  // own spread and the 1.13 of logits unrelated to the base.
  EXPECT_GT(full.ratio(), 0.1);
  EXPECT_LT(full.ratio(), 1.0);
  // To first order the effect is linear in the scale (measured 0.51).
  EXPECT_NEAR(effect(with_scale(0.05f), base).mean_abs / effect(with_scale(0.1f), base).mean_abs, 0.5, 0.1);
  // Scale 0 is no adapter at all.
  EXPECT_TRUE(with_scale(0.0f) == base);
  llama_adapter_lora_free(lora);
}

TEST(MakeAdapter, LoraForTinyIsRefusedByModelsOfAnotherShape) {
  const auto dir = weft_test::temp_dir("adapter-shape");
  const auto path = adapter(dir, "lora.gguf", weft::AdapterKind::lora);
  // Narrower (shapes differ) and shallower (blk.1 missing): llama.cpp returns
  // null, and does not abort.
  for (auto [layers, embd] : {std::pair{2, 32}, std::pair{1, 64}}) {
    SCOPED_TRACE(fmt::format("{} layers, {} wide", layers, embd));
    const auto other = other_model(dir, fmt::format("other-{}-{}.gguf", layers, embd), layers, embd);
    const auto m = weft::Model::load({.path = other.string()});
    EXPECT_EQ(llama_adapter_lora_init(m.impl()->model, path.c_str()), nullptr);
  }
  // llama.cpp checks names and shapes only: the same LoRA loads on a deeper
  // model of tiny's width (its extra blocks get no adapter). Telling such
  // models apart is the caller's job.
  {
    const auto deeper = weft::Model::load({.path = other_model(dir, "deeper.gguf", 3, 64).string()});
    llama_adapter_lora *l = llama_adapter_lora_init(deeper.impl()->model, path.c_str());
    EXPECT_NE(l, nullptr);
    llama_adapter_lora_free(l);
  }
  // A control vector of the wrong width is refused by llama_set_adapter_cvec.
  const auto cvec = read_cvec(adapter(dir, "cvec.gguf", weft::AdapterKind::control_vector), 64, 2);
  const auto narrow = weft::Model::load({.path = (dir / "other-2-32.gguf").string()});
  raw_logits(narrow, prompt(narrow), [&](llama_context *ctx) {
    EXPECT_NE(llama_set_adapter_cvec(ctx, cvec.data(), cvec.size(), 64, 1, 1), 0);
  });
}

TEST(MakeAdapter, ControlVectorReadsBackAndItsLayerRangeMatters) {
  const auto dir = weft_test::temp_dir("adapter-cvec");
  // tiny has 2 layers, so one direction: a 4-layer model shows ranges.
  const auto base_path = other_model(dir, "deep.gguf", 4, 64);
  const auto path = adapter(dir, "cvec.gguf", weft::AdapterKind::control_vector, 1, base_path.string());
  const auto cvec = read_cvec(path, 64, 4);
  const auto model = weft::Model::load({.path = base_path.string()});
  const auto tokens = prompt(model);
  const auto base = base_logits(model, tokens);
  auto with_range = [&](int first, int last) {
    return raw_logits(model, tokens, [&](llama_context *ctx) {
      ASSERT_EQ(llama_set_adapter_cvec(ctx, cvec.data(), cvec.size(), 64, first, last), 0);
    });
  };
  const auto all = with_range(1, 3);
  const Effect e = effect(all, base);
  report("4-layer cvec, layers 1-3", e);
  report("4-layer cvec, layer 1", effect(with_range(1, 1), base));
  // Measured: 0.50 with every layer, 0.32 with layer 1 alone.
  EXPECT_GT(e.ratio(), 0.1);
  EXPECT_LT(e.ratio(), 1.0);
  EXPECT_FALSE(with_range(1, 1) == all);
  EXPECT_FALSE(with_range(2, 3) == all);
  EXPECT_FALSE(with_range(1, 1) == with_range(3, 3));
  EXPECT_GT(effect(with_range(1, 1), base).mean_abs, 0);
  // A range past the model's layers applies nothing.
  EXPECT_TRUE(with_range(4, 10) == base);

  // And on tiny itself: the one direction changes the logits.
  const auto tiny = weft::Model::load({.path = weft_test::tiny_path()});
  const auto tcvec = read_cvec(adapter(dir, "tiny-cvec.gguf", weft::AdapterKind::control_vector), 64, 2);
  const auto ttokens = prompt(tiny);
  const Effect te = effect(raw_logits(tiny, ttokens, [&](llama_context *ctx) {
    ASSERT_EQ(llama_set_adapter_cvec(ctx, tcvec.data(), tcvec.size(), 64, 1, 1), 0);
  }), base_logits(tiny, ttokens));
  report("tiny cvec", te);  // measured 0.50
  EXPECT_GT(te.ratio(), 0.1);
  EXPECT_LT(te.ratio(), 1.0);
}

TEST(MakeAdapter, BadInputIsTypedAndLeavesNothing) {
  const auto dir = weft_test::temp_dir("adapter-bad");
  const auto out = (dir / "a.gguf").string();
  const auto tiny = weft_test::tiny_path();
  using P = weft::MakeAdapterParams;
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = (dir / "missing.gguf").string(), .out = out}); },
                          weft::Errc::not_found, "missing.gguf"));
  const auto junk = dir / "junk.gguf";
  weft_test::write_file(junk, std::string_view("this is not a GGUF file"));
  for (auto kind : {weft::AdapterKind::lora, weft::AdapterKind::control_vector}) {
    EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = junk.string(), .out = out, .kind = kind}); },
                            weft::Errc::corrupt, "junk.gguf"));
  }
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = tiny, .out = out, .rank = 0}); },
                          weft::Errc::invalid_argument, "rank 0"));
  // tiny's attn_k is 64x32: rank 33 is more than it has.
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = tiny, .out = out, .rank = 33}); },
                          weft::Errc::invalid_argument, "exceeds 32"));
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = tiny, .out = out, .targets = {"attn_q", "attn_x"}}); },
                          weft::Errc::invalid_argument, "'attn_x'"));
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = tiny, .out = out, .targets = {}}); },
                          weft::Errc::invalid_argument, "no LoRA targets"));
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = tiny, .out = out, .strength = NAN}); },
                          weft::Errc::invalid_argument, "strength"));
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = tiny, .out = out, .alpha = 0}); },
                          weft::Errc::invalid_argument, "alpha 0"));
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = tiny, .out = ""}); }, weft::Errc::invalid_argument,
                          "out"));
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = tiny, .out = (dir / "no-dir" / "a.gguf").string()}); },
                          weft::Errc::io, "cannot create"));
  // An adapter is not a base.
  const auto lora = adapter(weft_test::temp_dir("adapter-bad-base"), "lora.gguf", weft::AdapterKind::lora);
  EXPECT_TRUE(throws_weft([&] { weft::make_adapter(P{.base = lora.string(), .out = out}); },
                          weft::Errc::invalid_argument, "is an adapter"));
  // Nothing but the junk file was written.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(MakeAdapter, DiskFullLeavesThePreviousFile) {
  // A file-size limit makes write() fail as a full disk would (EFBIG).
  const auto dir = weft_test::temp_dir("adapter-full");
  const auto out = dir / "a.gguf";
  weft_test::write_file(out, std::string_view("previous adapter"));
  EXPECT_TRUE(weft_test::with_file_size_limit(16 << 10, [&] {
    return throws_weft([&] { weft::make_adapter({.base = weft_test::tiny_path(), .out = out.string()}); },
                       weft::Errc::io, "writing");
  }));
  EXPECT_EQ(weft_test::read_file(out).size(), std::string_view("previous adapter").size());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(MakeAdapter, CliWritesTheLibrarysBytesAndReportsTypedErrors) {
  const auto dir = weft_test::temp_dir("adapter-cli");
  const auto ok = weft_test::run_cli(fmt::format("make-adapter --base {} --kind cvec --seed 9 -q --out {}",
                                                 weft_test::tiny_path(), (dir / "cli.gguf").string()));
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_TRUE(weft_test::read_file(dir / "cli.gguf") ==
              weft_test::read_file(adapter(dir, "lib.gguf", weft::AdapterKind::control_vector, 9)));
  const auto bad = weft_test::run_cli(fmt::format("make-adapter --base {} --rank 0 --out {}", weft_test::tiny_path(),
                                                  (dir / "bad.gguf").string()));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("weft: error (invalid_argument): LoRA rank 0"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(dir / "bad.gguf"));
}

// The defaults' effect on the small preset (30 layers, 576 wide, q8_0): run
// with WEFT_SMALL_MODEL=<small.gguf> (e.g. build/release/models/small.gguf).
TEST(MakeAdapter, EffectOnSmall) {
  const char *small = std::getenv("WEFT_SMALL_MODEL");
  if (small == nullptr) GTEST_SKIP() << "set WEFT_SMALL_MODEL to a small-preset GGUF to measure";
  const auto dir = weft_test::temp_dir("adapter-small");
  const auto model = weft::Model::load({.path = small});
  const auto tokens = prompt(model);
  const auto base = base_logits(model, tokens);
  const auto lpath = adapter(dir, "lora.gguf", weft::AdapterKind::lora, 1, small);
  llama_adapter_lora *lora = llama_adapter_lora_init(model.impl()->model, lpath.c_str());
  ASSERT_NE(lora, nullptr);
  float scale = 1.0f;
  const Effect le = effect(raw_logits(model, tokens, [&](llama_context *ctx) {
    llama_set_adapters_lora(ctx, &lora, 1, &scale);
  }), base);
  report("small LoRA, scale 1", le);
  const int n_layer = model.n_layer(), n_embd = model.n_embd();
  const auto cvec = read_cvec(adapter(dir, "cvec.gguf", weft::AdapterKind::control_vector, 1, small), n_embd,
                              n_layer);
  const Effect ce = effect(raw_logits(model, tokens, [&](llama_context *ctx) {
    llama_set_adapter_cvec(ctx, cvec.data(), cvec.size(), n_embd, 1, n_layer - 1);
  }), base);
  report("small cvec, all layers", ce);
  // Measured (small seed 1): LoRA 0.34, control vector 0.65.
  EXPECT_GT(le.ratio(), 0.1);
  EXPECT_LT(le.ratio(), 1.0);
  EXPECT_GT(ce.ratio(), 0.1);
  EXPECT_LT(ce.ratio(), 1.0);
  llama_adapter_lora_free(lora);
}
