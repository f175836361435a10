#include "exec/media/image_fixture.hpp"

#include <llama.h>

#ifdef WEFT_HAVE_MTMD
#include <mtmd-helper.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <filesystem>
#include <thread>

#include "core/mtmd_log.hpp"
#include "exec/test_access.hpp"
#include "weft/make_mmproj.hpp"

using weft_test::logits_tolerance;
using weft_test::nmse;

namespace img_test {

namespace fs = std::filesystem;


Rgb random_image(std::mt19937 &rng, std::uint32_t w, std::uint32_t h) {
  Rgb img{w, h, std::vector<std::uint8_t>(std::size_t(w) * h * 3)};
  for (auto &p : img.px) p = static_cast<std::uint8_t>(rng() >> 24);
  return img;
}


namespace {

Fixture make_fixture(Kind kind) {
  static const fs::path dir = weft_test::temp_dir("images");
  std::string path;
  if (kind == Kind::gemma3) {
    path = (dir / "gemma3.gguf").string();
    weft::make_mmproj({.base = weft_test::tiny_path(), .out = path, .seed = 1});
  } else if (kind == Kind::qwen2a) {
    path = (dir / "qwen2a.gguf").string();
    weft::make_mmproj({.base = weft_test::tiny_path(), .out = path, .kind = weft::MmprojKind::qwen2a, .seed = 1});
  } else {
    path = (dir / "qwen2vl.gguf").string();
    weft::make_qwen2vl_text_model(weft_test::tiny_path(), (dir / "tiny-qwen2vl.gguf").string());
    weft::make_mmproj({.base = (dir / "tiny-qwen2vl.gguf").string(), .out = path, .kind = weft::MmprojKind::qwen2vl,
                       .seed = 1});
  }
  weft::Model model =
      kind != Kind::qwen2vl ? weft_test::tiny() : weft::Model::load({.path = (dir / "tiny-qwen2vl.gguf").string()});
  Fixture x{path, model, weft::Projector::load(model, {.path = path, .n_threads = 2})};
  if (kind == Kind::qwen2a) x.n_ctx = 4096;
  weft::detail::ensure_mtmd_log();
  auto p = mtmd_context_params_default();
  p.use_gpu = false;
  p.n_threads = 2;
  p.print_timings = false;
  p.warmup = false;
  x.mctx = mtmd_init_from_file(x.path.c_str(), x.model.impl()->model, p);
  EXPECT_NE(x.mctx, nullptr);
  return x;
}

}  // namespace

const Fixture &fixture(Kind kind) {
  static const Fixture gemma3 = make_fixture(Kind::gemma3);
  if (kind == Kind::gemma3) return gemma3;
  if (kind == Kind::qwen2vl) {
    static const Fixture qwen2vl = make_fixture(Kind::qwen2vl);
    return qwen2vl;
  }
  static const Fixture qwen2a = make_fixture(Kind::qwen2a);
  return qwen2a;
}

namespace {

ImageParts tokenize_bitmap(mtmd_bitmap *bitmap, const Fixture &f) {
  ImageParts out;
  out.chunks = std::make_shared<Chunks>();
  const char *marker = mtmd_default_marker();
  const mtmd_input_text text{marker, std::strlen(marker), false, true};
  const mtmd_bitmap *bitmaps[] = {bitmap};
  EXPECT_EQ(mtmd_tokenize(f.mctx, out.chunks->chunks, &text, bitmaps, 1), 0);
  mtmd_bitmap_free(bitmap);
  for (std::size_t i = 0; i < mtmd_input_chunks_size(out.chunks->chunks); ++i) {
    const auto *c = mtmd_input_chunks_get(out.chunks->chunks, i);
    if (mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_TEXT) {
      out.image = c;
      continue;
    }
    std::size_t n = 0;
    const llama_token *t = mtmd_input_chunk_get_tokens_text(c, &n);
    (out.image ? out.after : out.before).insert((out.image ? out.after : out.before).end(), t, t + n);
  }
  EXPECT_NE(out.image, nullptr);
  return out;
}

}  // namespace

ImageParts tokenize(const Rgb &img, const Fixture &f) {
  return tokenize_bitmap(mtmd_bitmap_init(img.w, img.h, img.px.data()), f);
}

ImageParts tokenize_audio(const std::vector<float> &samples, const Fixture &f) {
  return tokenize_bitmap(mtmd_bitmap_init_from_audio(samples.size(), samples.data()), f);
}

std::vector<float> random_clip(std::mt19937 &rng, const Fixture &f, double seconds) {
  const int rate = f.projector.audio_sample_rate();
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float f0 = 100 + 900 * u(rng), f1 = 200 + 3000 * u(rng), noise = 0.2f * u(rng);
  std::vector<float> out(static_cast<std::size_t>(seconds * rate));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double t = double(i) / rate;
    out[i] = static_cast<float>(0.4 * std::sin(2 * std::numbers::pi * f0 * t) + 0.3 * std::sin(2 * std::numbers::pi * f1 * t)) +
             noise * (2 * u(rng) - 1);
  }
  return out;
}


// Raw llama.cpp + mtmd, one sequence alone: text in chunks of n_batch and
// each image through mtmd_helper_eval_chunk_single (encode, then
// mtmd_helper_decode_image_chunk), positions continuing as the helper's.
// With `neighbours`, they are decoded first into sequences 1.. of the same
// unified cache, and `rng` splits the text into random chunk widths: the
// batch-shape noise raw llama.cpp itself shows for this conversation.
std::vector<float> reference(const std::vector<Part> &parts, int n_batch,
                             const std::vector<std::vector<weft::Token>> &neighbours, std::mt19937 *rng,
                             const Fixture &f) {
  const auto &m = f.model;
  auto p = weft_test::reference_context_params();
  p.n_ctx = f.n_ctx;
  p.n_batch = p.n_ubatch = static_cast<std::uint32_t>(n_batch);
  p.n_seq_max = static_cast<std::uint32_t>(1 + neighbours.size());
  p.kv_unified = true;
  // The kernel params() gives the executors: through the non-causal image
  // decode the two kernels differ by up to 1.7e-7 (8.6x the batch floor).
  p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.n_threads = p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(m.impl()->model, p);
  EXPECT_NE(ctx, nullptr);
  // Neighbour tokens not decoded yet: they fill the text batches of seq 0
  // (as weft's plan fills a batch), the rest is decoded at the end.
  std::vector<std::size_t> cursor(neighbours.size(), 0);
  std::size_t turn = 0;
  auto fill = [&](llama_batch &batch) {
    for (std::size_t tries = 0; batch.n_tokens < n_batch && tries < neighbours.size();) {
      const std::size_t q = turn++ % neighbours.size();
      if (cursor[q] >= neighbours[q].size()) {
        ++tries;
        continue;
      }
      tries = 0;
      const int r = batch.n_tokens++;
      batch.token[r] = neighbours[q][cursor[q]];
      batch.pos[r] = static_cast<llama_pos>(cursor[q]++);
      batch.n_seq_id[r] = 1;
      batch.seq_id[r][0] = static_cast<llama_seq_id>(q + 1);
      batch.logits[r] = false;
      if (rng != nullptr && (*rng)() % 4 == 0) break;  // batches of odd widths
    }
  };
  llama_pos n_past = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (const auto *text = std::get_if<std::vector<weft::Token>>(&parts[i])) {
      if (text->empty()) continue;
      llama_batch batch = llama_batch_init(n_batch, 0, 1);
      for (std::size_t s = 0, w = 0; s < text->size(); s += w) {
        w = rng != nullptr ? 1 + (*rng)() % static_cast<std::size_t>(n_batch) : static_cast<std::size_t>(n_batch);
        batch.n_tokens = 0;
        const std::size_t e = std::min(text->size(), s + w);
        for (std::size_t k = s; k < e; ++k) {
          const int r = batch.n_tokens++;
          batch.token[r] = (*text)[k];
          batch.pos[r] = n_past++;
          batch.n_seq_id[r] = 1;
          batch.seq_id[r][0] = 0;
          batch.logits[r] = last && k + 1 == text->size();
        }
        if (!neighbours.empty()) fill(batch);
        EXPECT_EQ(llama_decode(ctx, batch), 0);
      }
      llama_batch_free(batch);
    } else {
      EXPECT_EQ(mtmd_helper_eval_chunk_single(f.mctx, ctx, std::get<const mtmd_input_chunk *>(parts[i]),
                                              n_past, 0, n_batch, false, &n_past),
                0);
    }
  }
  // Seq 0's logits were the last decode's output.
  const float *l = llama_get_logits_ith(ctx, -1);
  std::vector<float> out(l, l + m.n_vocab());
  llama_free(ctx);
  return out;
}

// A PNG of `img`: stored (uncompressed) deflate blocks, so no zlib needed.
std::vector<std::uint8_t> png_of(const Rgb &img) {
  auto crc = [](const std::uint8_t *p, std::size_t n) {
    std::uint32_t c = 0xFFFFFFFFu;
    for (std::size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
  };
  auto be32 = [](std::vector<std::uint8_t> &o, std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) o.push_back(static_cast<std::uint8_t>(v >> s));
  };
  std::vector<std::uint8_t> out = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  auto chunk = [&](const char *type, const std::vector<std::uint8_t> &data) {
    be32(out, static_cast<std::uint32_t>(data.size()));
    std::vector<std::uint8_t> td(type, type + 4);
    td.insert(td.end(), data.begin(), data.end());
    out.insert(out.end(), td.begin(), td.end());
    be32(out, crc(td.data(), td.size()));
  };
  std::vector<std::uint8_t> ihdr;
  be32(ihdr, img.w);
  be32(ihdr, img.h);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB
  chunk("IHDR", ihdr);
  std::vector<std::uint8_t> raw;
  for (std::uint32_t y = 0; y < img.h; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), img.px.begin() + std::ptrdiff_t(y) * img.w * 3, img.px.begin() + std::ptrdiff_t(y + 1) * img.w * 3);
  }
  std::vector<std::uint8_t> z = {0x78, 0x01};
  std::uint32_t a = 1, b = 0;
  for (std::uint8_t v : raw) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  for (std::size_t off = 0; off < raw.size(); off += 65535) {
    const auto n = static_cast<std::uint16_t>(std::min<std::size_t>(65535, raw.size() - off));
    z.push_back(static_cast<std::uint8_t>(off + n == raw.size() ? 1 : 0));
    z.insert(z.end(), {static_cast<std::uint8_t>(n), static_cast<std::uint8_t>(n >> 8),
                       static_cast<std::uint8_t>(~n), static_cast<std::uint8_t>((~n) >> 8)});
    z.insert(z.end(), raw.begin() + std::ptrdiff_t(off), raw.begin() + std::ptrdiff_t(off + n));
  }
  be32(z, (b << 16) | a);
  chunk("IDAT", z);
  chunk("IEND", {});
  return out;
}

std::vector<weft::Token> cat(std::initializer_list<std::vector<weft::Token>> parts) {
  std::vector<weft::Token> out;
  for (const auto &p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

weft::ExecutorParams params(std::uint32_t n_batch, const Fixture &f) {
  // Flash attention pinned off, as the reference decodes: automatic would
  // pick whichever kernel this machine runs faster (tests/exec/test_attention_probe.cpp).
  return {.n_ctx = f.n_ctx,
          .n_batch = n_batch,
          .n_seq_max = 8,
          .n_threads = 2,
          .flash_attn = weft::FlashAttention::disabled,
          .projector = f.projector};
}

// Steps with random budgets until every one has its logits (an image waits
// for the encoder thread meanwhile: idle steps then); bounded.
void run_until_logits(weft::Executor &ex, const std::vector<weft::Conversation> &convs, std::mt19937 &rng,
                      std::uint32_t max_budget) {
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until) {
    if (std::all_of(convs.begin(), convs.end(), [](const auto &c) { return c.has_logits(); })) return;
    const auto r = ex.step({.max_tokens = 1 + static_cast<std::uint32_t>(rng() % max_budget)});
    if (r.idle) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << "conversations did not get their logits within 60 s";
}

std::vector<SpillTier> spill_tiers(const std::string &disk_dir) {
  return {{"ram", {.ram_bytes = 64ull << 20}, weft::Residency::ram},
          {"disk", {.ram_bytes = 0, .disk_dir = disk_dir}, weft::Residency::disk},
          {"recompute", {.ram_bytes = 0, .recompute = true}, weft::Residency::recompute}};
}

void prompt_scene(weft::Conversation &c, const std::vector<weft::Token> &a, const Rgb &img,
                  const std::vector<weft::Token> &b) {
  c.prompt(a);
  c.prompt_image(img.w, img.h, img.px);
  c.prompt(b);
}

void hold_encoder(weft::Executor &ex, std::atomic<bool> &release, std::atomic<bool> &entered) {
  weft::detail::set_encode_hook(ex, [&release, &entered] {
    entered = true;
    const auto until = Clock::now() + std::chrono::seconds(30);  // bounded
    while (!release && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
}

void expect_logits(const weft::Conversation &c, const std::vector<float> &ref, const std::string &what,
                   double *worst, const Fixture &f) {
  const auto &m = f.model;
  ASSERT_TRUE(c.has_logits()) << what;
  const double err = nmse(c.logits(), ref);
  if (worst != nullptr) *worst = std::max(*worst, err);
  EXPECT_LT(err, logits_tolerance(m)) << what << ": nmse " << err << " vs floor " << weft_test::batch_noise_floor(m);
}

}  // namespace img_test
#endif  // WEFT_HAVE_MTMD
