// Conversation::prompt_image and images(): an image becomes the text its
// projector wraps it in plus one media span of image_token(id) positions,
// queued like text; the executor's encoder thread makes its embeddings.
#include <fmt/format.h>

#include <variant>
#include <vector>

#include "core/internal.hpp"
#include "exec/executor_core.hpp"
#include "exec/media/media.hpp"

namespace weft {
namespace {

detail::ExecutorCore &core_for(const std::shared_ptr<detail::ConvHandle> &h) {
  if (!h) detail::fail(Errc::disposed, "empty Conversation handle");
  return *h->core;
}

Projector::Impl &projector_for(detail::ExecutorCore &x, std::uint64_t conv) {
  if (!x.media.projector) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("conversation {}: prompt_image or prompt_audio needs a projector "
                             "(ExecutorParams::projector)",
                             conv));
  }
  return *x.media.projector;
}

// Text and media, queued together or not at all: each image is its
// projector's text around one span of image_token(id) positions.
using Part = std::variant<std::vector<Token>, detail::ImageInput>;

std::size_t part_size(const Part &p) {
  if (const auto *t = std::get_if<std::vector<Token>>(&p)) return t->size();
  const auto &in = std::get<detail::ImageInput>(p);
  return in.before.size() + in.media->n_tokens + in.after.size();
}

void queue_parts(detail::ExecutorCore &x, std::uint64_t id, std::vector<Part> parts, const char *what) {
  std::lock_guard lock(x.mu);
  detail::Conv &c = x.get(id);
  if (c.gen) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("conversation {} is generating; cancel or wait before prompting", c.id));
  }
  std::size_t n_new = 0;
  for (const Part &p : parts) n_new += part_size(p);
  const std::uint64_t total = std::uint64_t(c.n_decoded()) + c.n_queued() + n_new;
  if (total > x.n_ctx) {
    detail::fail(Errc::out_of_range,
                 fmt::format("conversation {}: {} tokens ({} decoded + {} queued + {} new, media included) exceed "
                             "n_ctx = {}",
                             c.id, total, c.n_decoded(), c.n_queued(), n_new, x.n_ctx));
  }
  x.admit_locked(c, n_new);
  if (c.resident() && !c.kv.has_slot()) x.claim_slot_locked(c, what);
  if (c.n_queued() == 0) c.turns.ready_since = x.stats.steps;
  for (Part &p : parts) {
    if (auto *t = std::get_if<std::vector<Token>>(&p)) {
      c.queue.push_back(*t);
      continue;
    }
    auto &in = std::get<detail::ImageInput>(p);
    const auto &m = in.media;
    c.queue.push_back(in.before);
    c.media.push_back({c.n_decoded() + c.n_queued(), m});
    const std::vector<Token> positions(m->n_tokens, image_token(m->id));
    c.queue.push_back(positions);
    c.queue.push_back(in.after);
    if (x.media.encoder) x.media.encoder->push(m);  // its embeddings are made off the step
  }
  c.gen_token_queued = false;
}

void queue_media(detail::ExecutorCore &x, std::uint64_t id, detail::ImageInput in, const char *what) {
  std::vector<Part> parts;
  parts.emplace_back(std::move(in));
  queue_parts(x, id, std::move(parts), what);
}

detail::ImageInput prepared_input(detail::ExecutorCore &x, Projector::Impl &p, std::uint64_t conv,
                                  const PreparedImage &image) {
  if (!image) detail::fail(Errc::invalid_argument, "prompt_image: empty PreparedImage handle");
  if (image.impl()->projector.get() != &p) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("conversation {}: the image was prepared with another projector than this executor's",
                             conv));
  }
  return detail::clone_input(image.impl()->input, x.media.next_id++);
}

}  // namespace

void Conversation::prompt_image(std::span<const std::uint8_t> file) {
  auto &x = core_for(handle_);
  auto &p = projector_for(x, handle_->id);
  queue_media(x, handle_->id, detail::tokenize_image_file(p, file, x.media.next_id++), "prompt_image");
  x.notify_work();
}

void Conversation::prompt_image(std::uint32_t width, std::uint32_t height, std::span<const std::uint8_t> rgb) {
  auto &x = core_for(handle_);
  auto &p = projector_for(x, handle_->id);
  queue_media(x, handle_->id, detail::tokenize_image_rgb(p, width, height, rgb, x.media.next_id++), "prompt_image");
  x.notify_work();
}

void Conversation::prompt_audio(std::span<const float> samples) {
  auto &x = core_for(handle_);
  auto &p = projector_for(x, handle_->id);
  queue_media(x, handle_->id, detail::tokenize_audio(p, samples, x.media.next_id++), "prompt_audio");
  x.notify_work();
}

void Conversation::prompt_image(const PreparedImage &image) {
  auto &x = core_for(handle_);
  auto &p = projector_for(x, handle_->id);
  queue_media(x, handle_->id, prepared_input(x, p, handle_->id, image), "prompt_image");
  x.notify_work();
}

void Conversation::prompt(std::string_view text, std::span<const PreparedImage> images, const PromptOptions &options) {
  auto &x = core_for(handle_);
  auto &p = projector_for(x, handle_->id);
  const std::string_view marker = media_marker();
  std::vector<std::string_view> pieces;
  for (std::size_t from = 0;;) {
    const std::size_t at = text.find(marker, from);
    pieces.push_back(text.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from));
    if (at == std::string_view::npos) break;
    from = at + marker.size();
  }
  if (pieces.size() - 1 != images.size()) {
    detail::fail(Errc::invalid_argument, fmt::format("conversation {}: the text holds {} media markers ({}) for {} "
                                                     "images",
                                                     handle_->id, pieces.size() - 1, marker, images.size()));
  }
  // As mtmd_tokenize: each piece of text alone, BOS (if asked) before the first.
  std::vector<Part> parts;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    auto tokens = x.model.tokenize(pieces[i], {.add_bos = options.add_bos && i == 0,
                                               .parse_special = options.parse_special});
    if (!tokens.empty()) parts.emplace_back(std::move(tokens));
    if (i < images.size()) parts.emplace_back(prepared_input(x, p, handle_->id, images[i]));
  }
  if (parts.empty()) {
    detail::fail(Errc::invalid_argument, fmt::format("conversation {}: prompt text of {} bytes gives no tokens",
                                                     handle_->id, text.size()));
  }
  queue_parts(x, handle_->id, std::move(parts), "prompt");
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
