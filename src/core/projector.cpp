// Projector: loading a projector (mtmd), turning image bytes into a media
// chunk, and encoding it. The only file of weft that calls mtmd.
#include <fmt/format.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "core/model_impl.hpp"
#include "core/projector_impl.hpp"

#ifdef WEFT_HAVE_MTMD
#include <mtmd-helper.h>
#include <mtmd.h>

#include "core/mtmd_log.hpp"
#endif

namespace weft {

#ifdef WEFT_HAVE_MTMD
Projector::Impl::~Impl() {
  if (ctx != nullptr) mtmd_free(static_cast<mtmd_context *>(ctx));
}
#else
Projector::Impl::~Impl() = default;
#endif

Projector Projector::load(const Model &model, const ProjectorParams &params) {
  if (!model.impl()) detail::fail(Errc::invalid_argument, "Projector::load: empty Model handle");
  if (params.path.empty()) detail::fail(Errc::invalid_argument, "ProjectorParams.path is empty");
  if (params.n_threads < 1) {
    detail::fail(Errc::invalid_argument, fmt::format("ProjectorParams.n_threads = {} must be >= 1", params.n_threads));
  }
#ifndef WEFT_HAVE_MTMD
  detail::fail(Errc::invalid_argument, "weft was built without mtmd (WEFT_MTMD=OFF): no projectors");
#else
  std::error_code ec;
  if (!std::filesystem::is_regular_file(detail::u8_path(params.path), ec)) {
    detail::fail(Errc::not_found, fmt::format("projector file '{}' does not exist", params.path));
  }
  detail::ensure_mtmd_log();
  auto p = mtmd_context_params_default();
  p.use_gpu = params.use_gpu;
  p.n_threads = params.n_threads;
  p.print_timings = false;
  p.warmup = false;  // the first image pays for it instead of every load
  detail::take_llama_error();
  auto impl = std::make_shared<Impl>(model);
  impl->ctx = mtmd_init_from_file(params.path.c_str(), model.impl()->model, p);
  if (impl->ctx == nullptr) {
    detail::fail(Errc::incompatible, fmt::format("mtmd could not load '{}' as a projector for '{}': {}", params.path,
                                                 model.impl()->path, detail::take_llama_error()));
  }
  auto *ctx = static_cast<mtmd_context *>(impl->ctx);
  impl->vision = mtmd_support_vision(ctx);
  impl->audio = mtmd_support_audio(ctx);
  if (!impl->vision && !impl->audio) {
    detail::fail(Errc::incompatible,
                 fmt::format("projector '{}' has neither a vision nor an audio encoder", params.path));
  }
  impl->sample_rate = impl->audio ? mtmd_get_audio_sample_rate(ctx) : 0;
  impl->n_embd = llama_model_n_embd_inp(model.impl()->model);
  impl->fingerprint = detail::file_fingerprint(params.path);
  impl->mrope = mtmd_decode_use_mrope(ctx);
  impl->non_causal = mtmd_decode_use_non_causal(ctx, nullptr);
  Projector out;
  out.impl_ = std::move(impl);
  return out;
#endif
}

namespace {
const Projector::Impl &live(const std::shared_ptr<Projector::Impl> &p) {
  if (!p) detail::fail(Errc::invalid_argument, "empty Projector handle");
  return *p;
}
}  // namespace

PreparedImage Projector::prepare(std::span<const std::uint8_t> file) const {
  PreparedImage out;
  out.impl_ = std::make_shared<const PreparedImage::Impl>(
      PreparedImage::Impl{impl_, detail::tokenize_image_file(live(impl_), file, 0)});
  return out;
}

PreparedImage Projector::prepare(std::uint32_t width, std::uint32_t height, std::span<const std::uint8_t> rgb) const {
  PreparedImage out;
  out.impl_ = std::make_shared<const PreparedImage::Impl>(
      PreparedImage::Impl{impl_, detail::tokenize_image_rgb(live(impl_), width, height, rgb, 0)});
  return out;
}

std::uint32_t PreparedImage::n_tokens() const noexcept { return impl_ ? impl_->input.media->n_tokens : 0; }

#ifdef WEFT_HAVE_MTMD
std::string_view media_marker() noexcept { return mtmd_default_marker(); }
#else
std::string_view media_marker() noexcept { return "<__media__>"; }
#endif

bool Projector::mrope() const { return live(impl_).mrope; }
bool Projector::vision() const { return live(impl_).vision; }
bool Projector::audio() const { return live(impl_).audio; }
int Projector::audio_sample_rate() const { return live(impl_).sample_rate; }
bool Projector::non_causal() const { return live(impl_).non_causal; }
const Model &Projector::model() const { return live(impl_).model; }

}  // namespace weft

namespace weft::detail {
namespace {

void check_vision(const Projector::Impl &p) {
  if (!p.vision) fail(Errc::incompatible, "prompt_image: the projector has no vision encoder (audio only)");
}

void check_size(std::uint64_t w, std::uint64_t h, const char *what) {
  if (w == 0 || h == 0) fail(Errc::invalid_argument, fmt::format("{}: image of {} x {} pixels is empty", what, w, h));
  if (w > kMaxImageSide || h > kMaxImageSide || w * h > kMaxImagePixels) {
    fail(Errc::out_of_range, fmt::format("{}: image of {} x {} pixels exceeds the limit of {} per side and {} pixels",
                                         what, w, h, kMaxImageSide, kMaxImagePixels));
  }
}

std::uint32_t be16(const std::uint8_t *p) { return (std::uint32_t(p[0]) << 8) | p[1]; }
std::uint32_t be32(const std::uint8_t *p) { return (be16(p) << 16) | be16(p + 2); }

// The size a PNG or JPEG header states, checked before anything decodes the
// pixels (a few bytes can claim a picture of gigabytes).
void check_header(std::span<const std::uint8_t> b) {
  static constexpr std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  const char *what = "prompt_image";
  if (b.size() >= 8 && std::equal(kPng, kPng + 8, b.begin())) {
    if (b.size() < 24 || be32(b.data() + 12) != 0x49484452u) fail(Errc::corrupt, "prompt_image: PNG without IHDR");
    check_size(be32(b.data() + 16), be32(b.data() + 20), what);
    return;
  }
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) {
    std::size_t i = 2;
    while (i + 4 <= b.size()) {
      if (b[i] != 0xFF) fail(Errc::corrupt, fmt::format("prompt_image: JPEG marker expected at byte {}", i));
      const std::uint8_t m = b[i + 1];
      if (m == 0xFF) {  // fill byte
        ++i;
        continue;
      }
      if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {  // no length
        i += 2;
        continue;
      }
      const std::uint32_t len = be16(b.data() + i + 2);
      const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
      if (sof) {
        if (i + 9 > b.size()) break;
        check_size(be16(b.data() + i + 7), be16(b.data() + i + 5), what);
        return;
      }
      if (m == 0xDA || len < 2) break;  // image data before any frame header
      i += 2 + len;
    }
    fail(Errc::corrupt, "prompt_image: JPEG without a frame header");
  }
  fail(Errc::invalid_argument, fmt::format("prompt_image: {} bytes are neither a PNG nor a JPEG file", b.size()));
}

#ifdef WEFT_HAVE_MTMD
struct BitmapFree {
  void operator()(mtmd_bitmap *b) const { mtmd_bitmap_free(b); }
};
using BitmapPtr = std::unique_ptr<mtmd_bitmap, BitmapFree>;

// The width of an M-RoPE image's grid, after checking that mtmd places every
// cell where the executor will (media_pos: t = p0, y = p0 + i / nx,
// x = p0 + i % nx, z = 0; n_pos = max(nx, ny)): a layout of another kind is
// refused rather than decoded at the wrong positions.
std::uint32_t mrope_grid(const mtmd_image_tokens *t, const MediaChunk &m) {
  if (t == nullptr) fail(Errc::incompatible, "prompt_image: the M-RoPE image chunk has no image tokens");
  constexpr std::uint32_t p0 = 7;  // any start: the layout must follow it
  const mtmd_decoder_pos last = mtmd_image_tokens_get_decoder_pos(t, p0, m.n_tokens - 1);
  const std::uint32_t nx = last.x - p0 + 1, ny = last.y - p0 + 1;
  bool ok = last.x >= p0 && last.y >= p0 && std::uint64_t(nx) * ny == m.n_tokens && m.n_pos == std::max(nx, ny);
  for (std::uint32_t i = 0; ok && i < m.n_tokens; ++i) {
    const mtmd_decoder_pos q = mtmd_image_tokens_get_decoder_pos(t, p0, i);
    ok = q.t == p0 && q.x == p0 + i % nx && q.y == p0 + i / nx && q.z == 0;
  }
  if (!ok) {
    fail(Errc::incompatible, fmt::format("prompt_image: the projector lays out an image of {} tokens and {} positions "
                                         "in an M-RoPE grid weft does not know (qwen2-vl style only)",
                                         m.n_tokens, m.n_pos));
  }
  return nx;
}

ImageInput tokenize(const Projector::Impl &p, BitmapPtr bitmap, std::uint64_t id) {
  auto *ctx = static_cast<mtmd_context *>(p.ctx);
  std::unique_ptr<mtmd_input_chunks, void (*)(mtmd_input_chunks *)> chunks(mtmd_input_chunks_init(),
                                                                            mtmd_input_chunks_free);
  // The marker alone: mtmd gives the text it wraps an image in, and the image.
  const char *marker = mtmd_default_marker();
  const mtmd_input_text text{marker, std::strlen(marker), /*add_special=*/false, /*parse_special=*/true};
  const mtmd_bitmap *bitmaps[] = {bitmap.get()};
  take_llama_error();
  if (const int rc = mtmd_tokenize(ctx, chunks.get(), &text, bitmaps, 1); rc != 0) {
    fail(Errc::corrupt, fmt::format("prompt_image: mtmd could not preprocess the image (mtmd_tokenize returned {}): {}",
                                    rc, take_llama_error()));
  }
  ImageInput out;
  const bool audio = mtmd_bitmap_is_audio(bitmap.get());
  for (std::size_t i = 0; i < mtmd_input_chunks_size(chunks.get()); ++i) {
    const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks.get(), i);
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      std::size_t n = 0;
      const llama_token *t = mtmd_input_chunk_get_tokens_text(c, &n);
      auto &to = out.media ? out.after : out.before;
      to.insert(to.end(), t, t + n);
      continue;
    }
    const auto type = mtmd_input_chunk_get_type(c);
    if (audio && out.media && type == MTMD_INPUT_CHUNK_TYPE_AUDIO) {
      // mtmd cuts a clip into windows (Whisper: 30 s); each would be a span
      // of its own, encoded alone, so the caller cuts it instead.
      const std::size_t samples = mtmd_bitmap_get_n_bytes(bitmap.get()) / sizeof(float);
      fail(Errc::out_of_range,
           fmt::format("prompt_audio: {} samples ({:.1f} s at {} Hz) make more than one of the projector's audio "
                       "windows; queue at most one window (30 s for Whisper-style encoders) a call",
                       samples, double(samples) / std::max(1, p.sample_rate), p.sample_rate));
    }
    if (out.media || type != (audio ? MTMD_INPUT_CHUNK_TYPE_AUDIO : MTMD_INPUT_CHUNK_TYPE_IMAGE)) {
      fail(Errc::incompatible, fmt::format("{}: the projector made more than one media chunk of one {}",
                                           audio ? "prompt_audio" : "prompt_image", audio ? "clip" : "image"));
    }
    auto m = std::make_shared<MediaChunk>();
    m->id = id;
    m->n_tokens = static_cast<std::uint32_t>(mtmd_input_chunk_get_n_tokens(c));
    m->n_pos = static_cast<std::uint32_t>(mtmd_input_chunk_get_n_pos(c));
    m->non_causal = mtmd_decode_use_non_causal(ctx, c);
    m->audio = type == MTMD_INPUT_CHUNK_TYPE_AUDIO;
    if (p.mrope && !m->audio) m->nx = mrope_grid(mtmd_input_chunk_get_tokens_image(c), *m);
    if (m->audio && m->n_pos != m->n_tokens) {
      fail(Errc::incompatible, fmt::format("prompt_audio: a clip of {} tokens advances {} positions; weft decodes "
                                           "clips at one position a token",
                                           m->n_tokens, m->n_pos));
    }
    m->chunk = std::shared_ptr<void>(mtmd_input_chunk_copy(c), [](void *x) {
      mtmd_input_chunk_free(static_cast<mtmd_input_chunk *>(x));
    });
    out.media = std::move(m);
  }
  if (!out.media || out.media->n_tokens == 0) fail(Errc::incompatible, "the projector made no media chunk");
  return out;
}
#endif

}  // namespace

ImageInput tokenize_image_file(const Projector::Impl &p, std::span<const std::uint8_t> bytes, std::uint64_t id) {
  check_vision(p);
  if (bytes.empty()) fail(Errc::invalid_argument, "prompt_image: no image bytes");
  check_header(bytes);
#ifdef WEFT_HAVE_MTMD
  take_llama_error();
  auto w = mtmd_helper_bitmap_init_from_buf(static_cast<mtmd_context *>(p.ctx), bytes.data(), bytes.size(), false,
                                            mtmd_helper_init_opt_default());
  BitmapPtr bitmap(w.bitmap);
  if (!bitmap || mtmd_bitmap_is_audio(bitmap.get())) {
    fail(Errc::corrupt, fmt::format("prompt_image: {} bytes do not decode as an image", bytes.size()));
  }
  check_size(mtmd_bitmap_get_nx(bitmap.get()), mtmd_bitmap_get_ny(bitmap.get()), "prompt_image");
  auto out = tokenize(p, std::move(bitmap), id);
  out.media->source = std::make_shared<const std::vector<std::uint8_t>>(bytes.begin(), bytes.end());
  return out;
#else
  (void)p;
  (void)id;
  fail(Errc::invalid_argument, "weft was built without mtmd");
#endif
}

ImageInput tokenize_image_rgb(const Projector::Impl &p, std::uint32_t width, std::uint32_t height,
                              std::span<const std::uint8_t> rgb, std::uint64_t id) {
  check_vision(p);
  check_size(width, height, "prompt_image");
  if (rgb.size() != std::uint64_t(width) * height * 3) {
    fail(Errc::invalid_argument, fmt::format("prompt_image: {} x {} RGB needs {} bytes, got {}", width, height,
                                             std::uint64_t(width) * height * 3, rgb.size()));
  }
#ifdef WEFT_HAVE_MTMD
  BitmapPtr bitmap(mtmd_bitmap_init(width, height, rgb.data()));
  if (!bitmap) fail(Errc::backend, "prompt_image: mtmd could not make a bitmap");
  auto out = tokenize(p, std::move(bitmap), id);
  out.media->source = std::make_shared<const std::vector<std::uint8_t>>(rgb.begin(), rgb.end());
  out.media->width = width;
  out.media->height = height;
  return out;
#else
  (void)p;
  (void)id;
  fail(Errc::invalid_argument, "weft was built without mtmd");
#endif
}

ImageInput tokenize_audio(const Projector::Impl &p, std::span<const float> samples, std::uint64_t id) {
  if (!p.audio) fail(Errc::incompatible, "prompt_audio: the projector has no audio encoder (vision only)");
  if (samples.empty()) fail(Errc::invalid_argument, "prompt_audio: no samples");
  if (samples.size() > kMaxAudioSamples) {
    fail(Errc::out_of_range, fmt::format("prompt_audio: {} samples exceed the limit of {}", samples.size(),
                                         kMaxAudioSamples));
  }
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (!std::isfinite(samples[i])) {
      fail(Errc::invalid_argument, fmt::format("prompt_audio: sample {} is {}, not a finite number", i, samples[i]));
    }
  }
#ifdef WEFT_HAVE_MTMD
  BitmapPtr bitmap(mtmd_bitmap_init_from_audio(samples.size(), samples.data()));
  if (!bitmap) fail(Errc::backend, "prompt_audio: mtmd could not make an audio bitmap");
  auto out = tokenize(p, std::move(bitmap), id);
  const auto *bytes = reinterpret_cast<const std::uint8_t *>(samples.data());
  out.media->source = std::make_shared<const std::vector<std::uint8_t>>(bytes, bytes + samples.size_bytes());
  return out;
#else
  (void)id;
  fail(Errc::invalid_argument, "weft was built without mtmd");
#endif
}

ImageInput clone_input(const ImageInput &in, std::uint64_t id) {
  ImageInput out;
  out.before = in.before;
  out.after = in.after;
  auto m = std::make_shared<MediaChunk>();
  const MediaChunk &t = *in.media;
  m->id = id;
  m->n_tokens = t.n_tokens;
  m->n_pos = t.n_pos;
  m->nx = t.nx;
  m->audio = t.audio;
  m->non_causal = t.non_causal;
  m->chunk = t.chunk;
  m->source = t.source;
  m->width = t.width;
  m->height = t.height;
  out.media = std::move(m);
  return out;
}

void encode_media(Projector::Impl &p, MediaChunk &m) {
#ifdef WEFT_HAVE_MTMD
  try {
    std::lock_guard lock(p.encode_mu);
    auto *ctx = static_cast<mtmd_context *>(p.ctx);
    take_llama_error();
    const auto *chunk = static_cast<const mtmd_input_chunk *>(m.chunk.get());
    if (const int rc = mtmd_encode_chunk(ctx, chunk); rc != 0) {
      fail(Errc::backend, fmt::format("the vision encoder failed on image {} (mtmd_encode_chunk returned {}): {}", m.id,
                                      rc, take_llama_error()));
    }
    const float *e = mtmd_get_output_embd(ctx);
    m.embd.assign(e, e + std::size_t(m.n_tokens) * std::size_t(p.n_embd));
    m.chunk.reset();  // the embeddings are all a decode needs
    m.state.store(MediaChunk::ready, std::memory_order_release);
  } catch (const Error &e) {
    m.error = e;
    m.state.store(MediaChunk::failed, std::memory_order_release);
  } catch (const std::exception &e) {
    m.error = Error(Errc::backend, fmt::format("the vision encoder failed on image {}: {}", m.id, e.what()));
    m.state.store(MediaChunk::failed, std::memory_order_release);
  }
#else
  (void)p;
  m.error = Error(Errc::invalid_argument, "weft was built without mtmd");
  m.state.store(MediaChunk::failed, std::memory_order_release);
#endif
}

}  // namespace weft::detail
