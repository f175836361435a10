// weft/projector.hpp — a projector (mmproj) for images and audio in conversations.
//
// A llama.cpp vision (or audio) model is a text model plus a projector file
// that turns an image (or a clip of audio) into embeddings of the text
// model's width (llama.cpp's mtmd library, built into weft; docs/MODELS.md,
// "Projector files"). Load one for a Model and hand it to an executor
// (ExecutorParams::projector); then Conversation::prompt_image() and
// prompt_audio() queue media like text.
//
// Ownership: Projector is a cheap, copyable handle to an immutable,
// reference-counted projector; it keeps its Model alive, and is freed when
// the last handle (executors' included) goes away. A default-constructed
// handle is empty (no projector).
// Thread-safety: every method may be called from any number of threads at
// once. Executors sharing one Projector encode one image at a time each, and
// take turns on the projector (its encoder is not re-entrant).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "weft/export.hpp"
#include "weft/model.hpp"

namespace weft {

struct ProjectorParams {
  // Path of the projector GGUF (mmproj). Required.
  std::string path;
  // CPU threads of the image encoder (which runs on each executor's own
  // encoder thread, beside its decode threads). Default 1; must be >= 1.
  int n_threads = 1;
  // Run the encoder on a GPU backend when weft was built with one. Default false.
  bool use_gpu = false;
};

class PreparedImage;

class WEFT_API Projector {
 public:
  struct Impl;

  Projector() = default;
  // Loads `params.path` for `model` (the text model the projector was made
  // for). Throws Errc::invalid_argument for an empty path or n_threads < 1,
  // or when weft was built without mtmd (WEFT_MTMD=OFF); Errc::not_found for
  // a missing file; Errc::incompatible when mtmd refuses it (not a
  // projector, another text model's width, neither a vision nor an audio
  // encoder).
  static Projector load(const Model &model, const ProjectorParams &params);

  explicit operator bool() const noexcept { return impl_ != nullptr; }
  // Whether images decode with M-RoPE positions (Qwen2-VL style: a grid's
  // cells share one position and advance by max(width, height)), and with
  // non-causal attention inside the image (Gemma 3 style).
  bool mrope() const;
  bool non_causal() const;
  // Whether it takes images (Conversation::prompt_image) and audio
  // (prompt_audio), and the sample rate its audio is in (Hz; 16000 for
  // Whisper-style encoders; 0 without audio).
  bool vision() const;
  bool audio() const;
  int audio_sample_rate() const;
  // The model it was loaded for.
  const Model &model() const;

  // Decodes and preprocesses an image for this projector — the costly part
  // of Conversation::prompt_image (a PNG's decode, the resize), milliseconds
  // for a large picture — on the calling thread, so that a game can do it on
  // a worker thread of its own and queue the result later in microseconds.
  // The same checks and errors as Conversation::prompt_image (bytes or RGB).
  PreparedImage prepare(std::span<const std::uint8_t> file) const;
  PreparedImage prepare(std::uint32_t width, std::uint32_t height, std::span<const std::uint8_t> rgb) const;

  const std::shared_ptr<Impl> &impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// An image decoded and preprocessed for one projector (Projector::prepare),
// ready for Conversation::prompt_image. Ownership: a cheap, copyable handle
// to immutable data, kept alive by each conversation it was queued in until
// its embeddings are made; it keeps its projector alive. May be queued any
// number of times, in conversations of any executors with this projector.
// Thread-safety: immutable; any thread may read or queue it.
class WEFT_API PreparedImage {
 public:
  struct Impl;

  PreparedImage() = default;
  explicit operator bool() const noexcept { return impl_ != nullptr; }
  // Positions (and KV cells) the image itself takes, without the text the
  // projector wraps it in. 0 for an empty handle.
  std::uint32_t n_tokens() const noexcept;

  const std::shared_ptr<const Impl> &impl() const noexcept { return impl_; }

 private:
  friend class Projector;
  std::shared_ptr<const Impl> impl_;
};

// The marker that stands for an image in text given to
// Conversation::prompt(text, images): mtmd's default, "<__media__>". Static
// storage: the view stays valid; any thread.
WEFT_API std::string_view media_marker() noexcept;

}  // namespace weft
