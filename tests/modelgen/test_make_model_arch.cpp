// weft::make_model's model families (weft::ModelArch): each file loads in stock
// llama.cpp as its architecture, has the family's property (sliding window,
// hybrid, recurrent, experts), decodes to finite logits that do not depend on
// how the prompt is chunked, and is deterministic in its seed.
#include <gguf.h>
#include <gtest/gtest.h>
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <memory>
#include <random>

#include "cli_run.hpp"
#include "common.hpp"

using weft_test::throws_weft;

namespace {

namespace fs = std::filesystem;
using weft::ModelArch;

struct ModelFree {
  void operator()(llama_model *m) const { llama_model_free(m); }
};
using ModelPtr = std::unique_ptr<llama_model, ModelFree>;
struct GgufFree {
  void operator()(gguf_context *g) const { gguf_free(g); }
};

constexpr ModelArch kArches[] = {ModelArch::llama, ModelArch::gemma3, ModelArch::lfm2, ModelArch::mamba,
                                 ModelArch::moe};

struct Make {
  ModelArch arch = ModelArch::llama;
  std::uint64_t seed = 1;
  std::optional<weft::WeightType> type;
  std::optional<weft::ModelShape> shape;
  std::optional<int> window;
};

fs::path make(const fs::path &dir, const std::string &name, const Make &m) {
  const auto path = dir / name;
  weft::make_model({.preset = weft::ModelPreset::tiny,
                    .seed = m.seed,
                    .type = m.type,
                    .shape = m.shape,
                    .arch = m.arch,
                    .sliding_window = m.window,
                    .out = path.string()});
  return path;
}

ModelPtr load(const fs::path &path) {
  auto mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  // Plain CPU kernels: the pinned llama.cpp's AMX matmul crashes on quantised
  // weights (src/core/model.cpp, llama.cpp issue 20824).
  mp.use_extra_bufts = false;
  return ModelPtr(llama_model_load_from_file(path.string().c_str(), mp));
}

std::string meta(const llama_model *m, const std::string &key) {
  char buf[256] = {};
  return llama_model_meta_val_str(m, key.c_str(), buf, sizeof buf) < 0 ? std::string() : std::string(buf);
}

// BOS and n - 1 seeded random ordinary tokens.
std::vector<llama_token> prompt(const llama_model *m, int n, std::uint32_t seed = 5) {
  const llama_vocab *v = llama_model_get_vocab(m);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<llama_token> tok(3, llama_vocab_n_tokens(v) - 1);
  std::vector<llama_token> t{llama_vocab_bos(v)};
  while (static_cast<int>(t.size()) < n) t.push_back(tok(rng));
  return t;
}

// The last token's logits with the prompt decoded on a fresh context, in
// chunks that end at each of `cuts` (then the rest).
std::vector<float> last_logits(llama_model *m, const std::vector<llama_token> &tokens, std::vector<int> cuts = {}) {
  auto p = llama_context_default_params();
  p.n_ctx = 256;
  p.n_batch = p.n_ubatch = 64;
  p.n_seq_max = 1;
  p.n_threads = p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(m, p);
  EXPECT_NE(ctx, nullptr);
  if (ctx == nullptr) return {};
  cuts.push_back(static_cast<int>(tokens.size()));
  int start = 0;
  for (int end : cuts) {
    std::vector<llama_token> part(tokens.begin() + start, tokens.begin() + end);
    EXPECT_EQ(llama_decode(ctx, llama_batch_get_one(part.data(), static_cast<int32_t>(part.size()))), 0);
    start = end;
  }
  const float *l = llama_get_logits_ith(ctx, -1);
  std::vector<float> out(l, l + llama_vocab_n_tokens(llama_model_get_vocab(m)));
  llama_free(ctx);
  return out;
}

double max_abs_diff(const std::vector<float> &a, const std::vector<float> &b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

// Logits are finite and not flat (the model depends on its input).
::testing::AssertionResult finite_and_varied(const std::vector<float> &l) {
  if (l.empty()) return ::testing::AssertionFailure() << "no logits";
  for (float x : l) {
    if (!std::isfinite(x)) return ::testing::AssertionFailure() << "non-finite logit " << x;
  }
  const auto [lo, hi] = std::minmax_element(l.begin(), l.end());
  if (!(*hi - *lo > 1e-4f)) return ::testing::AssertionFailure() << "flat logits " << *lo << " .. " << *hi;
  return ::testing::AssertionSuccess();
}

// The family's own property, checked through llama.cpp's public API.
void expect_family(const llama_model *m, ModelArch arch, int window) {
  const bool swa = arch == ModelArch::gemma3, hybrid = arch == ModelArch::lfm2, recurrent = arch == ModelArch::mamba;
  EXPECT_EQ(llama_model_n_swa(m), swa ? window : 0);
  EXPECT_EQ(llama_model_is_hybrid(m), hybrid);
  EXPECT_EQ(llama_model_is_recurrent(m), recurrent);
  EXPECT_EQ(meta(m, "llama.expert_count"), arch == ModelArch::moe ? "4" : "");
  EXPECT_EQ(meta(m, "llama.expert_used_count"), arch == ModelArch::moe ? "2" : "");
  EXPECT_EQ(meta(m, "weft.arch"), arch == ModelArch::llama ? "" : weft::model_arch_name(arch));
}

const char *gguf_arch(ModelArch a) { return a == ModelArch::moe ? "llama" : weft::model_arch_name(a); }

class MakeModelArch : public ::testing::TestWithParam<ModelArch> {};

std::string arch_test_name(const ::testing::TestParamInfo<ModelArch> &info) {
  return weft::model_arch_name(info.param);
}

}  // namespace

namespace weft {
// gtest names the parameter in test listings.
inline void PrintTo(ModelArch a, std::ostream *os) { *os << model_arch_name(a); }
}  // namespace weft

TEST_P(MakeModelArch, TinyLoadsDecodesFiniteAndChunkingDoesNotMatter) {
  const ModelArch arch = GetParam();
  const auto dir = weft_test::temp_dir(std::string("arch-") + weft::model_arch_name(arch));
  const auto model = load(make(dir, "m.gguf", {.arch = arch}));
  ASSERT_TRUE(model) << "stock llama.cpp did not load the " << weft::model_arch_name(arch) << " file";
  EXPECT_EQ(meta(model.get(), "general.architecture"), gguf_arch(arch));
  EXPECT_EQ(llama_model_n_layer(model.get()), weft::preset_shape(weft::ModelPreset::tiny).n_layer);
  expect_family(model.get(), arch, weft::kDefaultSlidingWindow);

  const auto tokens = prompt(model.get(), 40);
  const auto whole = last_logits(model.get(), tokens);
  ASSERT_TRUE(finite_and_varied(whole));
  // The chunking tolerance of Decode.ChunkedPromptMatchesOneBatch (CPU
  // kernels' batch-shape noise): recurrent states and the sliding-window
  // cache carry across decode calls exactly.
  for (const auto &cuts : {std::vector<int>{17}, std::vector<int>{1, 23}}) {
    const auto chunked = last_logits(model.get(), tokens, cuts);
    const double err = weft_test::nmse(chunked, whole);
    const auto [lo, hi] = std::minmax_element(whole.begin(), whole.end());
    std::printf("%s, cuts at %d..: nmse %.3g, max |diff| %.3g, logits in [%.3g, %.3g]\n", weft::model_arch_name(arch),
                cuts.front(), err, max_abs_diff(chunked, whole), double(*lo), double(*hi));
    EXPECT_LT(err, 1e-5);
  }
  // Another prompt, other logits; and the state carries across chunks: a
  // change at position 1 still reaches the last token decoded after a cut.
  EXPECT_GT(weft_test::nmse(last_logits(model.get(), prompt(model.get(), 40, 6)), whole), 1e-6);
  auto changed = tokens;
  changed[1] = changed[1] == 100 ? 101 : 100;
  const double reach = weft_test::nmse(last_logits(model.get(), changed, {17}), whole);
  std::printf("%s: token 1 changed, last logits nmse %.3g\n", weft::model_arch_name(arch), reach);
  EXPECT_GT(reach, 1e-6);
}

TEST_P(MakeModelArch, SameSeedSameBytesOtherSeedOtherBytes) {
  const ModelArch arch = GetParam();
  const auto dir = weft_test::temp_dir(std::string("arch-seed-") + weft::model_arch_name(arch));
  const auto a = weft_test::read_file(make(dir, "a.gguf", {.arch = arch, .seed = 3}));
  const auto b = weft_test::read_file(make(dir, "b.gguf", {.arch = arch, .seed = 3}));
  const auto c = weft_test::read_file(make(dir, "c.gguf", {.arch = arch, .seed = 4}));
  ASSERT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c);
}

// Another shape (3 layers, 1 KV head, FFN 128, tied output) in q8_0 and q4_0:
// the row-quantised matrices (3-D experts included) load and decode.
TEST_P(MakeModelArch, OtherShapeQuantisedLoadsAndDecodes) {
  const ModelArch arch = GetParam();
  const auto dir = weft_test::temp_dir(std::string("arch-shape-") + weft::model_arch_name(arch));
  const weft::ModelShape shape{3, 64, 4, 1, 128, 512, true, weft::WeightType::f32};
  for (auto type : {weft::WeightType::q8_0, weft::WeightType::q4_0}) {
    SCOPED_TRACE(weft::weight_type_name(type));
    const auto path = make(dir, std::string(weft::weight_type_name(type)) + ".gguf",
                           {.arch = arch,
                            .type = type,
                            .shape = shape,
                            .window = arch == ModelArch::gemma3 ? 8 : std::optional<int>()});
    const auto model = load(path);
    ASSERT_TRUE(model);
    EXPECT_EQ(llama_model_n_layer(model.get()), 3);
    EXPECT_EQ(llama_model_n_ctx_train(model.get()), 512);
    expect_family(model.get(), arch, 8);
    const auto tokens = prompt(model.get(), 40);
    const auto whole = last_logits(model.get(), tokens);
    ASSERT_TRUE(finite_and_varied(whole));
    EXPECT_LT(weft_test::nmse(last_logits(model.get(), tokens, {13}), whole), 1e-5);

    // Tied output: no output.weight; the big matrices are in the weight type.
    gguf_init_params gp{/*no_alloc=*/true, /*ctx=*/nullptr};
    std::unique_ptr<gguf_context, GgufFree> g(gguf_init_from_file(path.string().c_str(), gp));
    ASSERT_TRUE(g);
    EXPECT_LT(gguf_find_tensor(g.get(), "output.weight"), 0);
    const ggml_type want = type == weft::WeightType::q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q4_0;
    EXPECT_EQ(gguf_get_tensor_type(g.get(), gguf_find_tensor(g.get(), "token_embd.weight")), want);
    if (arch == ModelArch::moe) {
      const int64_t e = gguf_find_tensor(g.get(), "blk.0.ffn_up_exps.weight");
      ASSERT_GE(e, 0);
      EXPECT_EQ(gguf_get_tensor_type(g.get(), e), want);
      EXPECT_EQ(gguf_get_tensor_size(g.get(), e), 4u * 128 * ggml_row_size(want, 64));  // 4 experts x 128 rows
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MakeModelArch, ::testing::ValuesIn(kArches), arch_test_name);

// gemma3's layers: with tiny's 2 layers the pattern is 2, layer 0 sliding
// window and layer 1 full. Through two window-16 layers the last of 40 tokens
// sees back only 32 positions, so a change at position 1 reaches it only
// through the full-attention layer; and the window is applied (a window as
// long as the prompt gives other logits from the same weights).
TEST(MakeModelGemma3, SlidingAndFullAttentionLayers) {
  const auto dir = weft_test::temp_dir("gemma3-layers");
  const auto model = load(make(dir, "w16.gguf", {.arch = ModelArch::gemma3}));
  ASSERT_TRUE(model);
  EXPECT_EQ(meta(model.get(), "gemma3.attention.sliding_window_pattern"), "2");
  EXPECT_EQ(llama_model_n_swa(model.get()), 16);
  auto tokens = prompt(model.get(), 40);
  const auto base = last_logits(model.get(), tokens);
  tokens[1] = tokens[1] == 100 ? 101 : 100;
  EXPECT_GT(weft_test::nmse(last_logits(model.get(), tokens), base), 1e-8) << "no full-attention layer";
  tokens = prompt(model.get(), 40);

  const auto wide = load(make(dir, "w64.gguf", {.arch = ModelArch::gemma3, .window = 64}));
  ASSERT_TRUE(wide);
  EXPECT_EQ(llama_model_n_swa(wide.get()), 64);
  const auto unwindowed = last_logits(wide.get(), tokens);
  EXPECT_GT(weft_test::nmse(unwindowed, base), 1e-8) << "the 16-token window changed nothing";
  // Within the window both agree: 12 tokens are inside either.
  tokens.resize(12);
  EXPECT_LT(weft_test::nmse(last_logits(wide.get(), tokens), last_logits(model.get(), tokens)), 1e-5);
}

TEST(MakeModelArchNames, RoundTripAndRefusals) {
  for (ModelArch a : kArches) EXPECT_EQ(weft::parse_model_arch(weft::model_arch_name(a)), a);
  EXPECT_TRUE(throws_weft([] { weft::parse_model_arch("rwkv"); }, weft::Errc::invalid_argument,
                          "'rwkv' (expected llama, gemma3, lfm2, mamba or moe)"));
  EXPECT_EQ(weft::MakeModelParams{}.arch, ModelArch::llama);
  EXPECT_FALSE(weft::MakeModelParams{}.sliding_window.has_value());
}

TEST(MakeModelArchNames, BadCombinationsAreRefusedBeforeWriting) {
  const auto dir = weft_test::temp_dir("arch-refusals");
  const auto out = (dir / "m.gguf").string();
  auto refused = [&](weft::MakeModelParams p, const std::string &needle) {
    p.out = out;
    return throws_weft([&] { weft::make_model(p); }, weft::Errc::invalid_argument, needle);
  };
  EXPECT_TRUE(refused({.preset = weft::ModelPreset::npc, .arch = ModelArch::gemma3}, "arch = gemma3"));
  EXPECT_TRUE(refused({.preset = weft::ModelPreset::npc, .arch = ModelArch::mamba}, "arch = mamba"));
  EXPECT_TRUE(refused({.preset = weft::ModelPreset::npc, .sliding_window = 8}, "sliding_window = 8"));
  EXPECT_TRUE(refused({.sliding_window = 8}, "sliding_window = 8: only the gemma3 arch"));
  EXPECT_TRUE(refused({.arch = ModelArch::lfm2, .sliding_window = 9}, "sliding_window = 9"));
  EXPECT_TRUE(refused({.arch = ModelArch::gemma3, .sliding_window = 0}, "sliding_window = 0 is outside"));
  EXPECT_TRUE(refused({.arch = ModelArch::gemma3, .sliding_window = -3}, "sliding_window = -3"));
  EXPECT_TRUE(refused({.arch = ModelArch::gemma3, .sliding_window = 4096}, "sliding_window = 4096 is outside [1, "
                                                                            "n_ctx_train = 4096)"));
  const weft::ModelShape one_layer{1, 64, 4, 2, 256, 512, false, weft::WeightType::f32};
  EXPECT_TRUE(refused({.shape = one_layer, .arch = ModelArch::gemma3}, "n_layer = 1: gemma3 needs at least 2"));
  EXPECT_TRUE(refused({.shape = one_layer, .arch = ModelArch::lfm2}, "n_layer = 1: lfm2 needs at least 2"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::is_empty(dir));
  // The largest window below the training context is accepted.
  const weft::ModelShape short_ctx{2, 64, 4, 2, 256, 64, false, weft::WeightType::f32};
  weft::make_model({.shape = short_ctx, .arch = ModelArch::gemma3, .sliding_window = 63, .out = out});
  EXPECT_TRUE(fs::exists(out));
}

TEST(MakeModelArchCli, WritesTheLibrarysBytesAndNamesTheArch) {
  const auto dir = weft_test::temp_dir("arch-cli");
  const auto ok = weft_test::run_cli(
      fmt::format("make-model --preset tiny --arch gemma3 --sliding-window 8 --seed 2 --out {}",
                  (dir / "cli.gguf").string()));
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("(tiny preset, gemma3 arch, sliding window 8, 2 layers x 64 wide, f32, seed 2)"),
            std::string::npos)
      << ok.output;
  EXPECT_TRUE(weft_test::read_file(dir / "cli.gguf") ==
              weft_test::read_file(make(dir, "lib.gguf", {.arch = ModelArch::gemma3, .seed = 2, .window = 8})));
  const auto mamba = weft_test::run_cli(fmt::format("make-model --arch mamba --out {}", (dir / "mamba.gguf").string()));
  ASSERT_EQ(mamba.status, 0) << mamba.output;
  EXPECT_NE(mamba.output.find("mamba arch"), std::string::npos) << mamba.output;
  // `weft info` says what a rewind costs on each.
  const auto info_gemma = weft_test::run_cli(fmt::format("info --model {}", (dir / "cli.gguf").string()));
  EXPECT_NE(info_gemma.output.find("memory      sliding window of 8 tokens: rewinds exact while"), std::string::npos)
      << info_gemma.output;
  const auto info_mamba = weft_test::run_cli(fmt::format("info --model {}", (dir / "mamba.gguf").string()));
  EXPECT_NE(info_mamba.output.find("memory      recurrent: a rewind or a fork of a prefix is decoded again"),
            std::string::npos)
      << info_mamba.output;

  const auto bad = weft_test::run_cli(fmt::format("make-model --arch rwkv --out {}", (dir / "bad.gguf").string()));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("weft: error (invalid_argument): unknown model architecture 'rwkv'"), std::string::npos)
      << bad.output;
  const auto llama_window =
      weft_test::run_cli(fmt::format("make-model --sliding-window 8 --out {}", (dir / "bad.gguf").string()));
  EXPECT_EQ(llama_window.status, 1);
  EXPECT_NE(llama_window.output.find("sliding_window = 8"), std::string::npos) << llama_window.output;
  const auto npc =
      weft_test::run_cli(fmt::format("make-model --preset npc --arch lfm2 --out {}", (dir / "bad.gguf").string()));
  EXPECT_EQ(npc.status, 1);
  EXPECT_NE(npc.output.find("weft: error (invalid_argument): --arch lfm2"), std::string::npos) << npc.output;
  EXPECT_FALSE(fs::exists(dir / "bad.gguf"));
}
