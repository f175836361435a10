// weft/projector.hpp — a vision projector (mmproj) for images in conversations.
//
// A llama.cpp vision model is a text model plus a projector file that turns
// an image into embeddings of the text model's width (llama.cpp's mtmd
// library, built into weft; docs/MODELS.md, "Projector files"). Load one for
// a Model and hand it to an executor (ExecutorParams::projector); then
// Conversation::prompt_image() queues images like text.
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
#include <string>

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

class WEFT_API Projector {
 public:
  struct Impl;

  Projector() = default;
  // Loads `params.path` for `model` (the text model the projector was made
  // for). Throws Errc::invalid_argument for an empty path or n_threads < 1,
  // or when weft was built without mtmd (WEFT_MTMD=OFF); Errc::not_found for
  // a missing file; Errc::incompatible when mtmd refuses it (not a
  // projector, another text model's width, no vision encoder).
  static Projector load(const Model &model, const ProjectorParams &params);

  explicit operator bool() const noexcept { return impl_ != nullptr; }
  // Whether images decode with M-RoPE positions (Qwen2-VL style) — the
  // executor refuses those images for now (Errc::incompatible) — and with
  // non-causal attention inside the image (Gemma 3 style).
  bool mrope() const;
  bool non_causal() const;
  // The model it was loaded for.
  const Model &model() const;

  const std::shared_ptr<Impl> &impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace weft
