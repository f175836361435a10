// The state behind weft::Projector, and the media chunks it makes. Internal.
//
// Every mtmd call weft makes is in core/projector.cpp: the executor sees a
// MediaChunk (how many positions an image takes, how it decodes, and its
// embeddings once encoded), never an mtmd type.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "weft/error.hpp"
#include "weft/projector.hpp"
#include "weft/types.hpp"

namespace weft {

struct Projector::Impl {
  Model model;
  void *ctx = nullptr;  // mtmd_context
  std::int32_t n_embd = 0;  // floats per embedding (llama_model_n_embd_inp)
  std::uint64_t fingerprint = 0;  // of its file (states with images name it)
  bool mrope = false, non_causal = false;
  bool vision = false, audio = false;  // what its encoders take
  int sample_rate = 0;                 // of the audio it takes (Hz); 0 without
  std::mutex encode_mu;  // mtmd's encoder and its output buffer are not re-entrant

  explicit Impl(Model m) : model(std::move(m)) {}
  Impl(const Impl &) = delete;
  Impl &operator=(const Impl &) = delete;
  ~Impl();
};

}  // namespace weft

namespace weft::detail {

// One image of a conversation: its place in the cache and, once the
// executor's encoder thread has run, its embeddings. Shared by the
// conversation's forks (same image, same cells) and the encoder's queue.
struct MediaChunk {
  enum State : int { queued = 0, ready = 1, failed = 2 };
  std::uint64_t id = 0;  // executor-unique (never reused), > 0
  std::uint32_t n_tokens = 0;  // KV cells (and history positions) it takes
  std::uint32_t n_pos = 0;     // positions it advances (n_tokens unless M-RoPE)
  // M-RoPE: its grid's width (n_tokens / nx rows; n_pos = max of the two);
  // 0: one position per token (audio under M-RoPE: all sections alike).
  std::uint32_t nx = 0;
  bool audio = false;  // a clip of audio, not an image
  bool non_causal = false;     // decoded with causal attention off
  std::shared_ptr<void> chunk;  // the mtmd_input_chunk, until encoded
  // Written by the encoder thread before `state` is released; read only
  // after an acquire load sees ready or failed.
  std::atomic<int> state{queued};
  std::vector<float> embd;  // n_tokens x n_embd
  std::optional<Error> error;
  // What it was made from, kept until encoded so that a save before then
  // can carry it (file bytes, or width x height x 3 RGB when width > 0, or
  // for audio its f32 samples' bytes).
  // Cleared under the executor's state lock once ready, read under it;
  // shared with the PreparedImage it came from.
  std::shared_ptr<const std::vector<std::uint8_t>> source;
  std::uint32_t width = 0, height = 0;
};

// An image as input: the text mtmd puts around it (e.g. <start_of_image>)
// and the image itself.
struct ImageInput {
  std::vector<Token> before, after;
  std::shared_ptr<MediaChunk> media;
};

// A copy of `in` for one more image: a new id, the same mtmd chunk and
// source (both immutable, shared), not yet encoded.
ImageInput clone_input(const ImageInput &in, std::uint64_t id);

// Largest image weft takes, before any decode or resize.
inline constexpr std::uint32_t kMaxImageSide = 8192;
inline constexpr std::uint64_t kMaxImagePixels = 1ull << 25;  // 32 Mpx

// Checks and tokenizes an image, on the calling thread (decoding the file
// and the projector's resize). Throws Errc::invalid_argument (empty, not a
// PNG or JPEG, a zero side, RGB bytes of the wrong size), Errc::out_of_range
// (a side or the pixel count over the limits above), Errc::corrupt (bytes
// that do not decode).
ImageInput tokenize_image_file(const Projector::Impl &p, std::span<const std::uint8_t> bytes, std::uint64_t id);
ImageInput tokenize_image_rgb(const Projector::Impl &p, std::uint32_t width, std::uint32_t height,
                              std::span<const std::uint8_t> rgb, std::uint64_t id);

// Largest clip weft takes: 2^24 samples (17 minutes at 16 kHz; 64 MiB).
inline constexpr std::size_t kMaxAudioSamples = std::size_t(1) << 24;

// Checks and tokenizes a clip of mono f32 samples at the projector's sample
// rate. Throws Errc::incompatible (the projector takes no audio),
// Errc::invalid_argument (no samples, one not finite), Errc::out_of_range
// (over kMaxAudioSamples).
ImageInput tokenize_audio(const Projector::Impl &p, std::span<const float> samples, std::uint64_t id);

// Runs the encoder for `m` (the executor's encoder thread, never a
// step) and publishes its embeddings, or the error, through m.state.
void encode_media(Projector::Impl &p, MediaChunk &m);

}  // namespace weft::detail

namespace weft {
struct PreparedImage::Impl {
  std::shared_ptr<Projector::Impl> projector;
  detail::ImageInput input;  // its media chunk a template (id 0), never queued itself
};
}  // namespace weft
