// MediaState: what the executor holds for images and audio — the projector,
// the encoder thread and the second context for non-causal images. Owned by
// ExecutorCore; read and written under its state lock unless said otherwise.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/projector_impl.hpp"
#include "exec/media/media_encoder.hpp"

struct llama_context;

namespace weft::detail {

// Images: the projector (ExecutorParams::projector), the thread that
// encodes them off the step, and the second context that decodes
// non-causal ones (media.cpp, media_side.cpp, conversation_media.cpp).
struct MediaState {
  std::shared_ptr<Projector::Impl> projector;  // null without one
  // Shared: an encode_images() caller holds it while it encodes, even if
  // the executor goes away meanwhile. Null without a projector.
  std::shared_ptr<MediaEncoder> encoder;
  // Non-causal images (gemma3) are decoded here, a second context of the
  // model kept non-causal, so the main one never flips its attention (each
  // flip re-reserves llama.cpp's graphs: 6 ms on npc). Made with the
  // executor when its projector is non-causal; null otherwise or when it
  // could not be made (then the main context flips).
  llama_context *side_ctx = nullptr;
  bool side_tried = false;
  static constexpr std::uint32_t kSideSeqs = 8;  // images side_ctx decodes in one batch
  std::atomic<std::uint64_t> next_id{1};
  // The last step decoded a whole image, or queued texts' turn (step.cpp),
  // and no tokens (schedule.cpp): the next one does neither, so tokens go at
  // least every other step.
  bool alone_last = false;
  // The encoder's activity() (0 without one): a decode that ran beside an
  // encode shared the cores with it, so the cost model does not learn from it.
  std::uint64_t encoder_activity() const { return encoder ? encoder->activity() : 0; }
  // No encode ran at any time since `before` (an encoder_activity() reading).
  bool encoder_quiet_since(std::uint64_t before) const { return before % 2 == 0 && encoder_activity() == before; }
};

}  // namespace weft::detail
