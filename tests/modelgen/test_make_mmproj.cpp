// weft::make_mmproj: the projector files are deterministic, load in stock
// mtmd with the generated text model, turn an image into the expected number
// of finite, pixel-dependent embeddings, and mtmd_helper_eval_chunks decodes
// text + image + text with them; bad input is a typed error.
#include <gtest/gtest.h>
#include <llama.h>

#include <fmt/format.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "reference.hpp"
#include "weft/make_mmproj.hpp"

#ifdef WEFT_HAVE_MTMD
#include <mtmd-helper.h>
#include <mtmd.h>

#include "core/mtmd_log.hpp"
#include "modelgen/mtmd_ptrs.hpp"
#endif

using weft_test::throws_weft;

namespace {

namespace fs = std::filesystem;

fs::path projector(const fs::path &dir, const std::string &name, std::uint64_t seed = 1) {
  const auto path = dir / name;
  weft::make_mmproj({.base = weft_test::tiny_path(), .out = path.string(), .seed = seed});
  return path;
}

TEST(MakeMmproj, SameSeedSameBytes) {
  const auto dir = weft_test::temp_dir("mmproj-seed");
  const auto a = weft_test::read_file(projector(dir, "a.gguf", 3));
  const auto b = weft_test::read_file(projector(dir, "b.gguf", 3));
  const auto c = weft_test::read_file(projector(dir, "c.gguf", 4));
  ASSERT_GT(a.size(), 100000u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
  EXPECT_EQ(weft::mmproj_tokens_per_image({}), 16);
  EXPECT_EQ(weft::mmproj_tokens_per_image({.image_size = 112, .patch_size = 14, .merge = 1}), 64);
  fs::remove_all(dir);
}

TEST(MakeMmproj, BadInputIsTypedError) {
  const auto dir = weft_test::temp_dir("mmproj-bad");
  const std::string out = (dir / "p.gguf").string();
  const std::string tiny = weft_test::tiny_path();
  EXPECT_TRUE(throws_weft([] { weft::parse_mmproj_kind("llava9"); }, weft::Errc::invalid_argument, "'llava9'"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = (dir / "none.gguf").string(), .out = out}); },
                          weft::Errc::not_found));
  const auto corrupt = dir / "corrupt.gguf";
  weft_test::write_file(corrupt, std::string_view("GGUF but not really"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = corrupt.string(), .out = out}); }, weft::Errc::corrupt,
                          "not a readable GGUF"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = (dir / "no/such/dir/p.gguf").string()}); },
                          weft::Errc::io));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = ""}); }, weft::Errc::invalid_argument));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = out, .image_size = 100}); },
                          weft::Errc::invalid_argument, "image_size = 100 is not a multiple"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = out, .image_size = 2048}); },
                          weft::Errc::invalid_argument, "image_size = 2048 is outside 16 .. 1024"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = out, .n_layer = 0}); },
                          weft::Errc::invalid_argument, "n_layer = 0 is outside 1 .. 8"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = out, .n_head = 5}); },
                          weft::Errc::invalid_argument, "not a multiple of n_head = 5"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = out, .n_ff = 64}); },
                          weft::Errc::invalid_argument, "n_ff = 64 must differ"));
  // A projector is not a text model.
  const auto proj = projector(dir, "proj.gguf");
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = proj.string(), .out = out}); },
                          weft::Errc::invalid_argument, "is a projector"));
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

TEST(MakeMmproj, Cli) {
  const auto dir = weft_test::temp_dir("mmproj-cli");
  const auto out = dir / "p.gguf";
  auto r = weft_test::run_cli(fmt::format("make-mmproj --base {} --out {}", weft_test::tiny_path(), out.string()));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("16 tokens per image"), std::string::npos) << r.output;
  EXPECT_EQ(weft_test::read_file(out), weft_test::read_file(projector(dir, "api.gguf")));
  r = weft_test::run_cli(fmt::format("make-mmproj --base {} --kind nope --out {}", weft_test::tiny_path(),
                                     (dir / "q.gguf").string()));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("weft: error (invalid_argument): unknown projector kind 'nope'"), std::string::npos)
      << r.output;
  fs::remove_all(dir);
}

#ifdef WEFT_HAVE_MTMD

// One projector kind with its text model: tiny for gemma3, tiny converted to
// qwen2vl (M-RoPE) for qwen2vl. Written and loaded once per test binary.
struct Kind {
  weft::MmprojKind kind;
  std::string mmproj;
  llama_model *text = nullptr;
  std::string img_beg, img_end;  // the text mtmd puts around an image
  bool mrope = false, non_causal = false;
};

const Kind &kind(weft::MmprojKind k) {
  static const fs::path dir = weft_test::temp_dir("mmproj-shared");
  // Removed at exit (a mapped model file may be unlinked on Linux).
  static const struct Cleanup {
    fs::path path;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } cleanup{dir};
  static const Kind gemma3 = [] {
    Kind g{weft::MmprojKind::gemma3, projector(dir, "gemma3.gguf").string(), weft_test::tiny().impl()->model,
           "<start_of_image>", "<end_of_image>", false, true};
    return g;
  }();
  static const Kind qwen2vl = [] {
    const auto text = dir / "tiny-qwen2vl.gguf";
    weft::make_qwen2vl_text_model(weft_test::tiny_path(), text.string());
    const auto path = dir / "qwen2vl.gguf";
    weft::make_mmproj({.base = text.string(), .out = path.string(), .kind = weft::MmprojKind::qwen2vl});
    auto mp = llama_model_default_params();
    // Never freed: shared by every test of the binary, like tiny().
    llama_model *model = llama_model_load_from_file(text.string().c_str(), mp);
    EXPECT_NE(model, nullptr);
    return Kind{weft::MmprojKind::qwen2vl, path.string(), model, "<|vision_start|>", "<|vision_end|>", true, false};
  }();
  return k == weft::MmprojKind::gemma3 ? gemma3 : qwen2vl;
}

MtmdPtr load_mtmd(const Kind &k) {
  weft::detail::ensure_mtmd_log();
  auto p = mtmd_context_params_default();
  p.use_gpu = false;
  p.n_threads = 2;
  p.print_timings = false;
  p.warmup = false;  // qwen2vl warms up on a 46 x 46-token image: seconds under ASan, for nothing here
  return MtmdPtr(mtmd_init_from_file(k.mmproj.c_str(), k.text, p));
}

// A w x h RGB image: a seeded pattern, different per seed.
BitmapPtr image(std::uint32_t w, std::uint32_t h, std::uint32_t seed) {
  std::vector<unsigned char> rgb(std::size_t(w) * h * 3);
  std::uint32_t s = seed * 2654435761u + 1;
  for (auto &px : rgb) {
    s = s * 1664525u + 1013904223u;
    px = static_cast<unsigned char>(s >> 24);
  }
  return BitmapPtr(mtmd_bitmap_init(w, h, rgb.data()));
}

ChunksPtr tokenize(const mtmd_context *ctx, const std::string &prompt, const mtmd_bitmap *bitmap) {
  ChunksPtr chunks(mtmd_input_chunks_init());
  const mtmd_input_text text{prompt.c_str(), prompt.size(), /*add_special=*/true, /*parse_special=*/true};
  const mtmd_bitmap *bitmaps[] = {bitmap};
  EXPECT_EQ(mtmd_tokenize(ctx, chunks.get(), &text, bitmaps, bitmap ? 1 : 0), 0);
  return chunks;
}

const mtmd_input_chunk *image_chunk(const mtmd_input_chunks *chunks) {
  for (std::size_t i = 0; i < mtmd_input_chunks_size(chunks); ++i) {
    const auto *c = mtmd_input_chunks_get(chunks, i);
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_IMAGE) return c;
  }
  return nullptr;
}

std::vector<float> encode(mtmd_context *ctx, const Kind &k, const mtmd_input_chunk *chunk) {
  EXPECT_EQ(mtmd_encode_chunk(ctx, chunk), 0);
  const std::size_t n = mtmd_input_chunk_get_n_tokens(chunk) * std::size_t(llama_model_n_embd_inp(k.text));
  const float *e = mtmd_get_output_embd(ctx);
  return {e, e + n};
}

const std::string kPrompt = std::string("Look at this: ") + mtmd_default_marker() + " What is it?";

class MakeMmprojMtmd : public ::testing::TestWithParam<weft::MmprojKind> {};

INSTANTIATE_TEST_SUITE_P(Kinds, MakeMmprojMtmd, ::testing::Values(weft::MmprojKind::gemma3, weft::MmprojKind::qwen2vl),
                         [](const auto &kind_info) { return std::string(weft::mmproj_kind_name(kind_info.param)); });

TEST_P(MakeMmprojMtmd, LoadsWithLogRouted) {
  const Kind &k = kind(GetParam());
  std::mutex mutex;
  std::vector<std::string> lines;
  weft::set_log_sink(
      [&](weft::LogLevel, std::string_view line) {
        std::lock_guard lock(mutex);
        lines.emplace_back(line);
      },
      weft::LogLevel::info);
  auto ctx = load_mtmd(k);
  weft::set_log_sink({});
  ASSERT_NE(ctx, nullptr);
  EXPECT_TRUE(mtmd_support_vision(ctx.get()));
  EXPECT_FALSE(mtmd_support_audio(ctx.get()));
  EXPECT_EQ(mtmd_decode_use_mrope(ctx.get()), k.mrope);
  EXPECT_EQ(mtmd_decode_use_non_causal(ctx.get(), nullptr), k.non_causal);  // gemma3's image attention
  // clip's loader logs through weft's sink, line by line.
  bool saw_clip = false;
  for (const auto &l : lines) saw_clip |= l.find("has vision encoder") != std::string::npos;
  EXPECT_TRUE(saw_clip) << lines.size() << " lines";
}

TEST_P(MakeMmprojMtmd, ImageChunkAndEmbeddings) {
  const Kind &k = kind(GetParam());
  auto ctx = load_mtmd(k);
  ASSERT_NE(ctx, nullptr);
  auto a = image(112, 112, 1), b = image(112, 112, 2), odd = image(57, 31, 1);
  auto chunks = tokenize(ctx.get(), kPrompt, a.get());
  ASSERT_EQ(mtmd_input_chunks_size(chunks.get()), 3u);
  EXPECT_EQ(mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks.get(), 0)), MTMD_INPUT_CHUNK_TYPE_TEXT);
  EXPECT_EQ(mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks.get(), 2)), MTMD_INPUT_CHUNK_TYPE_TEXT);
  const auto *chunk_a = image_chunk(chunks.get());
  ASSERT_NE(chunk_a, nullptr);
  const int tokens = weft::mmproj_tokens_per_image({});  // 16: a 4 x 4 grid
  EXPECT_EQ(mtmd_input_chunk_get_n_tokens(chunk_a), std::size_t(tokens));
  // M-RoPE: the grid advances the position by max(w, h), not by its size.
  EXPECT_EQ(mtmd_input_chunk_get_n_pos(chunk_a), k.mrope ? 4 : tokens);

  const auto ea = encode(ctx.get(), k, chunk_a);
  double sq = 0;
  for (float x : ea) {
    ASSERT_TRUE(std::isfinite(x));
    sq += double(x) * x;
  }
  // The scale of tiny's token embeddings (std 0.02; measured 0.0196 gemma3,
  // 0.0201 qwen2vl).
  const double rms = std::sqrt(sq / double(ea.size()));
  RecordProperty("embd_rms", fmt::format("{:.4g}", rms));
  EXPECT_GT(rms, 0.01);
  EXPECT_LT(rms, 0.04);
  EXPECT_EQ(encode(ctx.get(), k, chunk_a), ea);  // deterministic

  auto chunks_b = tokenize(ctx.get(), kPrompt, b.get());
  const auto eb = encode(ctx.get(), k, image_chunk(chunks_b.get()));
  ASSERT_EQ(eb.size(), ea.size());
  RecordProperty("embd_nmse_two_images", fmt::format("{:.3g}", weft_test::nmse(eb, ea)));
  EXPECT_GT(weft_test::nmse(eb, ea), 1e-2) << "embeddings barely depend on the pixels";

  // Another size: gemma3 resizes to its fixed input, qwen2vl to a grid of
  // its own (at least 8 tokens).
  auto chunks_odd = tokenize(ctx.get(), kPrompt, odd.get());
  const auto *chunk_odd = image_chunk(chunks_odd.get());
  ASSERT_NE(chunk_odd, nullptr);
  if (k.mrope) {
    EXPECT_GE(mtmd_input_chunk_get_n_tokens(chunk_odd), 8u);
  } else {
    EXPECT_EQ(mtmd_input_chunk_get_n_tokens(chunk_odd), std::size_t(tokens));
  }
  for (float x : encode(ctx.get(), k, chunk_odd)) ASSERT_TRUE(std::isfinite(x));
}

// Last logits after mtmd_helper_eval_chunks on a fresh context.
std::vector<float> eval_logits(mtmd_context *ctx, const Kind &k, const mtmd_input_chunks *chunks) {
  auto p = llama_context_default_params();
  p.n_ctx = 256;
  p.n_batch = p.n_ubatch = 64;
  p.n_seq_max = 1;
  p.n_threads = p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *lctx = llama_init_from_model(k.text, p);
  EXPECT_NE(lctx, nullptr);
  llama_pos n_past = 0;
  EXPECT_EQ(mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, 64, true, &n_past), 0);
  EXPECT_EQ(n_past, mtmd_helper_get_n_pos(chunks));
  const float *l = llama_get_logits_ith(lctx, -1);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(k.text));
  std::vector<float> out(l, l + n_vocab);
  llama_free(lctx);
  return out;
}

TEST_P(MakeMmprojMtmd, EvalChunksDecodesTextImageText) {
  const Kind &k = kind(GetParam());
  auto ctx = load_mtmd(k);
  ASSERT_NE(ctx, nullptr);
  auto a = image(112, 112, 1), b = image(112, 112, 2);
  auto with_a = tokenize(ctx.get(), kPrompt, a.get());
  auto with_b = tokenize(ctx.get(), kPrompt, b.get());
  // The same text around no image.
  auto text_only = tokenize(ctx.get(), "Look at this: " + k.img_beg + k.img_end + " What is it?", nullptr);
  ASSERT_EQ(mtmd_input_chunks_size(text_only.get()), 1u);

  const auto la = eval_logits(ctx.get(), k, with_a.get());
  const auto lb = eval_logits(ctx.get(), k, with_b.get());
  const auto lt = eval_logits(ctx.get(), k, text_only.get());
  for (float x : la) ASSERT_TRUE(std::isfinite(x));
  RecordProperty("logits_nmse_image_vs_text", fmt::format("{:.3g}", weft_test::nmse(la, lt)));
  RecordProperty("logits_nmse_two_images", fmt::format("{:.3g}", weft_test::nmse(la, lb)));
  EXPECT_EQ(eval_logits(ctx.get(), k, with_a.get()), la);  // reproducible
  EXPECT_GT(weft_test::nmse(la, lt), 1e-4) << "the image does not reach the logits";
  EXPECT_GT(weft_test::nmse(la, lb), 1e-6) << "two images give the same logits";
}

TEST(MakeMmproj, Qwen2vlTextModel) {
  const auto dir = weft_test::temp_dir("mmproj-qwen2vl");
  const auto a = dir / "a.gguf", b = dir / "b.gguf";
  weft::make_qwen2vl_text_model(weft_test::tiny_path(), a.string());
  weft::make_qwen2vl_text_model(weft_test::tiny_path(), b.string());
  EXPECT_EQ(weft_test::read_file(a), weft_test::read_file(b));
  const Kind &k = kind(weft::MmprojKind::qwen2vl);
  EXPECT_EQ(llama_model_rope_type(k.text), LLAMA_ROPE_TYPE_MROPE);
  EXPECT_TRUE(throws_weft([&] { weft::make_qwen2vl_text_model(k.mmproj, (dir / "c.gguf").string()); },
                          weft::Errc::invalid_argument, "architecture 'clip'"));
  EXPECT_TRUE(throws_weft([&] { weft::make_qwen2vl_text_model((dir / "none").string(), (dir / "c.gguf").string()); },
                          weft::Errc::not_found));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = a.string(), .out = (dir / "p.gguf").string(),
                                                   .kind = weft::MmprojKind::qwen2vl, .merge = 1}); },
                          weft::Errc::invalid_argument, "merges 2 x 2"));
  fs::remove_all(dir);
}

#endif  // WEFT_HAVE_MTMD

}  // namespace
