// Conversation::prompt_image and images(): an image becomes the text its
// projector wraps it in plus one media span of image_token(id) positions,
// queued like text; the executor's encoder thread makes its embeddings.
#include <fmt/format.h>

#include "core/internal.hpp"
#include "exec/executor_core.hpp"
#include "exec/media.hpp"

namespace weft {
namespace {

detail::ExecutorCore &core_for(const std::shared_ptr<detail::ConvHandle> &h) {
  if (!h) detail::fail(Errc::disposed, "empty Conversation handle");
  return *h->core;
}

Projector::Impl &projector_for(detail::ExecutorCore &x, std::uint64_t conv) {
  if (!x.projector) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("conversation {}: prompt_image or prompt_audio needs a projector (ExecutorParams::projector)", conv));
  }
  return *x.projector;
}

void queue_image(detail::ExecutorCore &x, std::uint64_t id, detail::ImageInput in) {
  const auto &m = in.media;
  {
    std::lock_guard lock(x.mu);
    detail::Conv &c = x.get(id);
    if (c.gen) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("conversation {} is generating; cancel or wait before prompting", c.id));
    }
    const std::size_t n_new = in.before.size() + m->n_tokens + in.after.size();
    const std::uint64_t total = std::uint64_t(c.n_decoded()) + c.n_queued() + n_new;
    if (total > x.n_ctx) {
      detail::fail(Errc::out_of_range,
                   fmt::format("conversation {}: {} tokens ({} decoded + {} queued + {} for the image) exceed "
                               "n_ctx = {}",
                               c.id, total, c.n_decoded(), c.n_queued(), n_new, x.n_ctx));
    }
    x.admit_locked(c, n_new);
    if (c.resident() && !c.kv.has_slot()) x.claim_slot_locked(c, "prompt_image");
    if (c.n_queued() == 0) c.ready_since = x.stats.steps;
    c.queue.push_back(in.before);
    c.media.push_back({c.n_decoded() + c.n_queued(), m});
    const std::vector<Token> positions(m->n_tokens, image_token(m->id));
    c.queue.push_back(positions);
    c.queue.push_back(in.after);
    c.gen_token_queued = false;
    if (x.encoder) x.encoder->push(m);  // its embeddings are made off the step
  }
}

}  // namespace

void Conversation::prompt_image(std::span<const std::uint8_t> file) {
  auto &x = core_for(handle_);
  auto &p = projector_for(x, handle_->id);
  queue_image(x, handle_->id, detail::tokenize_image_file(p, file, x.next_media_id++));
  x.notify_work();
}

void Conversation::prompt_image(std::uint32_t width, std::uint32_t height, std::span<const std::uint8_t> rgb) {
  auto &x = core_for(handle_);
  auto &p = projector_for(x, handle_->id);
  queue_image(x, handle_->id, detail::tokenize_image_rgb(p, width, height, rgb, x.next_media_id++));
  x.notify_work();
}

void Conversation::prompt_audio(std::span<const float> samples) {
  auto &x = core_for(handle_);
  auto &p = projector_for(x, handle_->id);
  queue_image(x, handle_->id, detail::tokenize_audio(p, samples, x.next_media_id++));
  x.notify_work();
}

void Conversation::prompt_image(const PreparedImage &image) {
  auto &x = core_for(handle_);
  auto &p = projector_for(x, handle_->id);
  if (!image) detail::fail(Errc::invalid_argument, "prompt_image: empty PreparedImage handle");
  if (image.impl()->projector.get() != &p) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("conversation {}: the image was prepared with another projector than this executor's",
                             handle_->id));
  }
  queue_image(x, handle_->id, detail::clone_input(image.impl()->input, x.next_media_id++));
  x.notify_work();
}

std::vector<ImageSpan> Conversation::images() const {
  auto &x = core_for(handle_);
  std::lock_guard lock(x.mu);
  const detail::Conv &c = x.get(handle_->id);
  std::vector<ImageSpan> out;
  out.reserve(c.media.size());
  for (const auto &m : c.media) {
    const int state = m.chunk->state.load(std::memory_order_acquire);
    out.push_back({.id = m.chunk->id,
                   .begin = m.begin,
                   .n_tokens = m.chunk->n_tokens,
                   .n_pos = m.chunk->n_pos,
                   .encoded = state == detail::MediaChunk::ready,
                   .audio = m.chunk->audio});
  }
  return out;
}

}  // namespace weft
