// weft::make_mmproj with MmprojKind::qwen2a: the audio projector file is
// deterministic, loads in stock mtmd with the generated tiny model as an
// audio-only projector, turns a clip into the number of tokens mtmd's whisper
// preprocessing implies, with finite, signal-dependent embeddings of the text
// model's scale, and mtmd_helper_eval_chunks decodes text + audio + text.
#include <gtest/gtest.h>
#include <gguf.h>
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
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

fs::path audio_projector(const fs::path &dir, const std::string &name, std::uint64_t seed = 1) {
  const auto path = dir / name;
  weft::make_mmproj({.base = weft_test::tiny_path(), .out = path.string(), .kind = weft::MmprojKind::qwen2a,
                     .seed = seed});
  return path;
}

// Audio chunks mtmd makes of n samples with the qwen2a projector, as
// mtmd-audio.cpp's whisper preprocessor does it: clips under n_fft / 2 + 1 =
// 201 samples are zero-extended to it; 480,000 zeros (30 s at 16 kHz) and 200
// reflected samples per side are added; 400-sample frames every 160 samples
// give (n + 480000) / 160 + 1 mel frames, cut into whole chunks of 3000 (a
// last partial chunk is dropped).
std::size_t audio_chunks(std::size_t n_samples) {
  const std::size_t n = std::max<std::size_t>(n_samples, 201);
  const std::size_t frames = (n + 480000) / 160 + 1;
  return frames / 3000;
}

// Tokens of one chunk (clip.cpp's clip_n_output_tokens for QWEN2A): the
// stride-2 conv halves the 3000 frames, the average pool halves them again.
constexpr std::size_t kTokensPerChunk = 3000 / 2 / 2;

TEST(MakeMmprojAudio, SameSeedSameBytesAndLayout) {
  const auto dir = weft_test::temp_dir("mmproj-audio-seed");
  const auto pa = audio_projector(dir, "a.gguf", 3);
  const auto a = weft_test::read_file(pa);
  const auto b = weft_test::read_file(audio_projector(dir, "b.gguf", 3));
  const auto c = weft_test::read_file(audio_projector(dir, "c.gguf", 4));
  RecordProperty("file_bytes", std::to_string(a.size()));
  ASSERT_GT(a.size(), 100000u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
  EXPECT_EQ(weft::mmproj_tokens_per_image({.kind = weft::MmprojKind::qwen2a}), 0);

  // What clip.cpp's loader reads for PROJECTOR_TYPE_QWEN2A.
  gguf_init_params gp{/*no_alloc=*/true, /*ctx=*/nullptr};
  gguf_context *g = gguf_init_from_file(pa.string().c_str(), gp);
  ASSERT_NE(g, nullptr);
  EXPECT_STREQ(gguf_get_val_str(g, gguf_find_key(g, "clip.projector_type")), "qwen2a");
  EXPECT_TRUE(gguf_get_val_bool(g, gguf_find_key(g, "clip.has_audio_encoder")));
  EXPECT_FALSE(gguf_get_val_bool(g, gguf_find_key(g, "clip.has_vision_encoder")));
  EXPECT_EQ(gguf_get_val_u32(g, gguf_find_key(g, "clip.audio.num_mel_bins")), 128u);
  EXPECT_EQ(gguf_get_val_u32(g, gguf_find_key(g, "clip.audio.projection_dim")), 64u);  // tiny's width
  EXPECT_GE(gguf_find_tensor(g, "a.conv1d.1.weight"), 0);
  EXPECT_GE(gguf_find_tensor(g, "a.position_embd.weight"), 0);
  EXPECT_GE(gguf_find_tensor(g, "a.blk.1.attn_q.bias"), 0);
  EXPECT_LT(gguf_find_tensor(g, "a.blk.0.attn_k.bias"), 0);  // whisper-enc.cpp asserts there is none
  EXPECT_GE(gguf_find_tensor(g, "mm.a.fc.weight"), 0);
  EXPECT_LT(gguf_find_key(g, "clip.vision.image_size"), 0);
  gguf_free(g);
  fs::remove_all(dir);
}

TEST(MakeMmprojAudio, BadInputIsTypedError) {
  const auto dir = weft_test::temp_dir("mmproj-audio-bad");
  const std::string out = (dir / "p.gguf").string();
  const std::string tiny = weft_test::tiny_path();
  const auto qwen2a = weft::MmprojKind::qwen2a;
  EXPECT_EQ(weft::parse_mmproj_kind("qwen2a"), qwen2a);
  EXPECT_STREQ(weft::mmproj_kind_name(qwen2a), "qwen2a");
  EXPECT_TRUE(throws_weft([] { weft::parse_mmproj_kind("whisper"); }, weft::Errc::invalid_argument,
                          "'whisper' (expected gemma3, qwen2vl or qwen2a)"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = out, .kind = qwen2a, .n_mel_bins = 300}); },
                          weft::Errc::invalid_argument, "n_mel_bins = 300 is outside 8 .. 256"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = out, .kind = qwen2a, .n_mel_bins = 0}); },
                          weft::Errc::invalid_argument, "n_mel_bins = 0 is outside 8 .. 256"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = out, .kind = qwen2a, .n_head = 5}); },
                          weft::Errc::invalid_argument, "not a multiple of n_head = 5"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = tiny, .out = out, .kind = qwen2a, .n_layer = 9}); },
                          weft::Errc::invalid_argument, "n_layer = 9 is outside 1 .. 8"));
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = (dir / "none.gguf").string(), .out = out, .kind = qwen2a}); },
                          weft::Errc::not_found));
  const auto proj = audio_projector(dir, "proj.gguf");
  EXPECT_TRUE(throws_weft([&] { weft::make_mmproj({.base = proj.string(), .out = out, .kind = qwen2a}); },
                          weft::Errc::invalid_argument, "is a projector"));
  EXPECT_FALSE(fs::exists(out));
  // The image fields do not apply to audio, nor does the image kinds' n_ff != n_embd.
  weft::make_mmproj({.base = tiny, .out = out, .kind = qwen2a, .image_size = 100, .n_ff = 64});
  EXPECT_TRUE(fs::exists(out));
  fs::remove_all(dir);
}

TEST(MakeMmprojAudio, Cli) {
  const auto dir = weft_test::temp_dir("mmproj-audio-cli");
  const auto out = dir / "p.gguf";
  auto r = weft_test::run_cli(
      fmt::format("make-mmproj --base {} --kind qwen2a --out {}", weft_test::tiny_path(), out.string()));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("qwen2a audio projector, 128 mel bins, 750 tokens per 30 s chunk"), std::string::npos)
      << r.output;
  EXPECT_EQ(weft_test::read_file(out), weft_test::read_file(audio_projector(dir, "api.gguf")));
  r = weft_test::run_cli(fmt::format("make-mmproj --base {} --kind qwen2a --mel-bins 512 --out {}",
                                     weft_test::tiny_path(), (dir / "q.gguf").string()));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("weft: error (invalid_argument): MakeMmprojParams.n_mel_bins = 512 is outside 8 .. 256"),
            std::string::npos)
      << r.output;
  fs::remove_all(dir);
}

#ifdef WEFT_HAVE_MTMD

// The qwen2a projector for tiny, written once per test binary.
const std::string &shared_projector() {
  static const fs::path dir = weft_test::temp_dir("mmproj-audio-shared");
  // Removed at exit (a mapped model file may be unlinked on Linux).
  static const struct Cleanup {
    fs::path path;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } cleanup{dir};
  static const std::string path = audio_projector(dir, "qwen2a.gguf").string();
  return path;
}

llama_model *text_model() { return weft_test::tiny().impl()->model; }

MtmdPtr load_mtmd() {
  weft::detail::ensure_mtmd_log();
  auto p = mtmd_context_params_default();
  p.use_gpu = false;
  p.n_threads = 2;
  p.print_timings = false;
  p.warmup = false;
  return MtmdPtr(mtmd_init_from_file(shared_projector().c_str(), text_model(), p));
}

// n samples at 16 kHz: a sine of `hz` plus seeded uniform noise.
std::vector<float> signal(std::size_t n, float hz, std::uint32_t seed) {
  std::vector<float> pcm(n);
  std::uint32_t s = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float noise = static_cast<float>(s >> 8) / float(1u << 24) - 0.5f;
    pcm[i] = 0.3f * std::sin(2.0f * float(M_PI) * hz * float(i) / 16000.0f) + 0.1f * noise;
  }
  return pcm;
}

BitmapPtr audio(const std::vector<float> &pcm) {
  return BitmapPtr(mtmd_bitmap_init_from_audio(pcm.size(), pcm.data()));
}

ChunksPtr tokenize(const mtmd_context *ctx, const std::string &prompt, const mtmd_bitmap *bitmap) {
  ChunksPtr chunks(mtmd_input_chunks_init());
  const mtmd_input_text text{prompt.c_str(), prompt.size(), /*add_special=*/true, /*parse_special=*/true};
  const mtmd_bitmap *bitmaps[] = {bitmap};
  EXPECT_EQ(mtmd_tokenize(ctx, chunks.get(), &text, bitmaps, bitmap ? 1 : 0), 0);
  return chunks;
}

std::vector<const mtmd_input_chunk *> audio_chunks_of(const mtmd_input_chunks *chunks) {
  std::vector<const mtmd_input_chunk *> out;
  for (std::size_t i = 0; i < mtmd_input_chunks_size(chunks); ++i) {
    const auto *c = mtmd_input_chunks_get(chunks, i);
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_AUDIO) out.push_back(c);
  }
  return out;
}

std::vector<float> encode(mtmd_context *ctx, const mtmd_input_chunk *chunk) {
  EXPECT_EQ(mtmd_encode_chunk(ctx, chunk), 0);
  const std::size_t n = mtmd_input_chunk_get_n_tokens(chunk) * std::size_t(llama_model_n_embd_inp(text_model()));
  const float *e = mtmd_get_output_embd(ctx);
  return {e, e + n};
}

double rms(const std::vector<float> &v) {
  double sq = 0;
  for (float x : v) sq += double(x) * x;
  return std::sqrt(sq / double(v.size()));
}

const std::string kPrompt = std::string("Listen to this: ") + mtmd_default_marker() + " What is it?";

TEST(MakeMmprojAudio, LoadsAsAudioOnly) {
  std::mutex mutex;
  std::vector<std::string> lines;
  weft::set_log_sink(
      [&](weft::LogLevel, std::string_view line) {
        std::lock_guard lock(mutex);
        lines.emplace_back(line);
      },
      weft::LogLevel::info);
  auto ctx = load_mtmd();
  weft::set_log_sink({});
  ASSERT_NE(ctx, nullptr);
  EXPECT_TRUE(mtmd_support_audio(ctx.get()));
  EXPECT_FALSE(mtmd_support_vision(ctx.get()));
  EXPECT_EQ(mtmd_get_audio_sample_rate(ctx.get()), 16000);
  EXPECT_FALSE(mtmd_decode_use_mrope(ctx.get()));
  bool saw_audio = false;
  for (const auto &l : lines) saw_audio |= l.find("has audio encoder") != std::string::npos;
  EXPECT_TRUE(saw_audio) << lines.size() << " lines";
}

TEST(MakeMmprojAudio, AudioChunkAndEmbeddings) {
  auto ctx = load_mtmd();
  ASSERT_NE(ctx, nullptr);
  const auto pcm_a = signal(24000, 440.0f, 1);  // 1.5 s
  const auto pcm_b = signal(24000, 1250.0f, 2);
  auto a = audio(pcm_a), b = audio(pcm_b);
  auto chunks = tokenize(ctx.get(), kPrompt, a.get());
  ASSERT_EQ(mtmd_input_chunks_size(chunks.get()), 3u);
  EXPECT_EQ(mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks.get(), 0)), MTMD_INPUT_CHUNK_TYPE_TEXT);
  EXPECT_EQ(mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks.get(), 2)), MTMD_INPUT_CHUNK_TYPE_TEXT);
  const auto *chunk_a = mtmd_input_chunks_get(chunks.get(), 1);
  ASSERT_EQ(mtmd_input_chunk_get_type(chunk_a), MTMD_INPUT_CHUNK_TYPE_AUDIO);
  ASSERT_EQ(audio_chunks(pcm_a.size()), 1u);
  EXPECT_EQ(mtmd_input_chunk_get_n_tokens(chunk_a), kTokensPerChunk);  // 750: 1.5 s padded to a 30 s chunk
  EXPECT_EQ(mtmd_input_chunk_get_n_pos(chunk_a), llama_pos(kTokensPerChunk));
  RecordProperty("audio_tokens_1_5s", std::to_string(mtmd_input_chunk_get_n_tokens(chunk_a)));

  const auto t0 = std::chrono::steady_clock::now();
  const auto ea = encode(ctx.get(), chunk_a);
  const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("encode_ms_1_5s", fmt::format("{:.1f}", ms));
  for (float x : ea) ASSERT_TRUE(std::isfinite(x));
  // The scale of tiny's token embeddings (std 0.02): a.post_ln makes every
  // token unit RMS and mm.a.fc is drawn to map that to token_embd's RMS.
  RecordProperty("embd_rms", fmt::format("{:.4g}", rms(ea)));
  EXPECT_GT(rms(ea), 0.01);
  EXPECT_LT(rms(ea), 0.04);
  EXPECT_EQ(encode(ctx.get(), chunk_a), ea);  // deterministic

  auto chunks_b = tokenize(ctx.get(), kPrompt, b.get());
  const auto audio_b = audio_chunks_of(chunks_b.get());
  ASSERT_EQ(audio_b.size(), 1u);
  const auto eb = encode(ctx.get(), audio_b[0]);
  ASSERT_EQ(eb.size(), ea.size());
  // The 1.5 s of signal are the first 1.5 * 25 = 37.5 tokens; the rest
  // encodes the appended silence, alike for both clips but for attention.
  const std::size_t n_embd = std::size_t(llama_model_n_embd_inp(text_model()));
  const std::size_t head = 37 * n_embd;
  const double nmse_head = weft_test::nmse(std::span(eb).first(head), std::span(ea).first(head));
  const double nmse_all = weft_test::nmse(eb, ea);
  RecordProperty("embd_nmse_two_signals_first37", fmt::format("{:.3g}", nmse_head));
  RecordProperty("embd_nmse_two_signals_all", fmt::format("{:.3g}", nmse_all));
  EXPECT_GT(nmse_head, 0.1) << "embeddings barely depend on the samples";
  EXPECT_GT(nmse_all, 1e-3);
}

TEST(MakeMmprojAudio, TokenCountFollowsThirtySecondChunks) {
  auto ctx = load_mtmd();
  ASSERT_NE(ctx, nullptr);
  // A 100-sample blip, just under and just over one chunk: every chunk is 750
  // tokens whatever its share of real audio.
  for (const std::size_t n : {std::size_t(100), std::size_t(479839), std::size_t(479840), std::size_t(31 * 16000)}) {
    const auto pcm = signal(n, 300.0f, 3);
    auto bmp = audio(pcm);
    auto chunks = tokenize(ctx.get(), kPrompt, bmp.get());
    const auto found = audio_chunks_of(chunks.get());
    EXPECT_EQ(found.size(), audio_chunks(n)) << n << " samples";
    for (const auto *c : found) EXPECT_EQ(mtmd_input_chunk_get_n_tokens(c), kTokensPerChunk) << n << " samples";
    // text, audio..., text
    EXPECT_EQ(mtmd_input_chunks_size(chunks.get()), found.size() + 2) << n << " samples";
  }
  EXPECT_EQ(audio_chunks(479839), 1u);
  EXPECT_EQ(audio_chunks(479840), 2u);
}

// Last logits after mtmd_helper_eval_chunks on a fresh context.
std::vector<float> eval_logits(mtmd_context *ctx, const mtmd_input_chunks *chunks) {
  auto p = llama_context_default_params();
  p.n_ctx = 1024;  // 750 audio tokens and the text around them
  p.n_batch = p.n_ubatch = 256;
  p.n_seq_max = 1;
  p.n_threads = p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *lctx = llama_init_from_model(text_model(), p);
  EXPECT_NE(lctx, nullptr);
  llama_pos n_past = 0;
  EXPECT_EQ(mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, 256, true, &n_past), 0);
  EXPECT_EQ(n_past, mtmd_helper_get_n_pos(chunks));
  const float *l = llama_get_logits_ith(lctx, -1);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(text_model()));
  std::vector<float> out(l, l + n_vocab);
  llama_free(lctx);
  return out;
}

TEST(MakeMmprojAudio, EvalChunksDecodesTextAudioText) {
  auto ctx = load_mtmd();
  ASSERT_NE(ctx, nullptr);
  auto a = audio(signal(24000, 440.0f, 1)), b = audio(signal(24000, 1250.0f, 2));
  auto with_a = tokenize(ctx.get(), kPrompt, a.get());
  auto with_b = tokenize(ctx.get(), kPrompt, b.get());
  EXPECT_EQ(mtmd_helper_get_n_tokens(with_a.get()), mtmd_helper_get_n_tokens(with_b.get()));
  // The same text around no audio (mtmd wraps the clip in Qwen2-Audio's markers).
  auto text_only = tokenize(ctx.get(), "Listen to this: <|audio_bos|><|audio_eos|> What is it?", nullptr);
  ASSERT_EQ(mtmd_input_chunks_size(text_only.get()), 1u);

  const auto la = eval_logits(ctx.get(), with_a.get());
  const auto lb = eval_logits(ctx.get(), with_b.get());
  const auto lt = eval_logits(ctx.get(), text_only.get());
  for (float x : la) ASSERT_TRUE(std::isfinite(x));
  RecordProperty("logits_nmse_audio_vs_text", fmt::format("{:.3g}", weft_test::nmse(la, lt)));
  RecordProperty("logits_nmse_two_signals", fmt::format("{:.3g}", weft_test::nmse(la, lb)));
  EXPECT_GT(weft_test::nmse(la, lt), 1e-4) << "the audio does not reach the logits";
  EXPECT_GT(weft_test::nmse(la, lb), 1e-6) << "two signals give the same logits";
}

#endif  // WEFT_HAVE_MTMD

}  // namespace
