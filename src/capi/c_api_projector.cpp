// The C ABI, part 6: projectors and images in conversations (weft/c/projector.h).
#include <fmt/format.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "capi/c_api_internal.hpp"

namespace weft::capi {
namespace {

std::shared_ptr<Projector> projector_of(const weft_projector *p) { return get<Projector>(p, Kind::projector); }

weft_projector_params projector_defaults() {
  const ProjectorParams d;
  weft_projector_params p{};
  p.struct_size = sizeof p;
  p.path = nullptr;
  p.n_threads = d.n_threads;
  p.use_gpu = d.use_gpu ? 1 : 0;
  return p;
}

const std::initializer_list<std::size_t> kProjectorParamsSizes = {sizeof(weft_projector_params)};
// Before `audio` was appended, and now.
const std::initializer_list<std::size_t> kImageSpanSizes = {offsetof(weft_image_span, audio), sizeof(weft_image_span)};

}  // namespace
}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

weft_status weft_projector_params_init(weft_projector_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_projector_params", projector_defaults(), kProjectorParamsSizes);
  });
}

weft_status weft_projector_load(const weft_model *model, const weft_projector_params *params, weft_projector **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    need(params, "params");
    auto m = get<weft::Model>(model, Kind::model);
    weft_projector_params p = projector_defaults();
    read_struct(params, "weft_projector_params", p, kProjectorParamsSizes);
    weft::ProjectorParams pp;
    pp.path = std::string(cstr_arg(p.path, "weft_projector_params.path"));
    pp.n_threads = p.n_threads;
    pp.use_gpu = p.use_gpu != 0;
    auto proj = std::make_shared<weft::Projector>(weft::Projector::load(*m, pp));
    *out = make_handle<weft_projector>(Kind::projector, std::move(proj));
  });
}

weft_status weft_projector_free(weft_projector *projector) {
  return free_handle(__func__, projector, Kind::projector);
}

weft_status weft_projector_mrope(const weft_projector *projector, weft_bool *out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = projector_of(projector)->mrope() ? 1 : 0;
  });
}

weft_status weft_projector_non_causal(const weft_projector *projector, weft_bool *out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = projector_of(projector)->non_causal() ? 1 : 0;
  });
}

weft_status weft_projector_vision(const weft_projector *projector, weft_bool *out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = projector_of(projector)->vision() ? 1 : 0;
  });
}

weft_status weft_projector_audio(const weft_projector *projector, weft_bool *out, int32_t *sample_rate) {
  return guarded(__func__, [&] {
    need(out, "out");
    const auto p = projector_of(projector);
    *out = p->audio() ? 1 : 0;
    if (sample_rate != nullptr) *sample_rate = p->audio_sample_rate();
  });
}

weft_status weft_conversation_prompt_audio(weft_conversation *conversation, const float *samples, size_t n) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    if (n > 0) need(samples, "samples");
    c->prompt_audio(std::span<const float>(samples, n));
  });
}

weft_status weft_conversation_prompt_image(weft_conversation *conversation, const uint8_t *file, size_t len) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    c->prompt_image(bytes_arg(file, len, "file"));
  });
}

weft_status weft_conversation_prompt_image_rgb(weft_conversation *conversation, uint32_t width, uint32_t height,
                                               const uint8_t *rgb, size_t len) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    c->prompt_image(width, height, bytes_arg(rgb, len, "rgb"));
  });
}

weft_status weft_projector_prepare_image(const weft_projector *projector, const uint8_t *file, size_t len,
                                         weft_prepared_image **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto img = std::make_shared<weft::PreparedImage>(projector_of(projector)->prepare(bytes_arg(file, len, "file")));
    *out = make_handle<weft_prepared_image>(Kind::prepared_image, std::move(img));
  });
}

weft_status weft_projector_prepare_image_rgb(const weft_projector *projector, uint32_t width, uint32_t height,
                                             const uint8_t *rgb, size_t len, weft_prepared_image **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto img = std::make_shared<weft::PreparedImage>(
        projector_of(projector)->prepare(width, height, bytes_arg(rgb, len, "rgb")));
    *out = make_handle<weft_prepared_image>(Kind::prepared_image, std::move(img));
  });
}

weft_status weft_prepared_image_free(weft_prepared_image *image) {
  return free_handle(__func__, image, Kind::prepared_image);
}

weft_status weft_prepared_image_n_tokens(const weft_prepared_image *image, uint32_t *out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = get<weft::PreparedImage>(image, Kind::prepared_image)->n_tokens();
  });
}

weft_status weft_conversation_prompt_prepared_image(weft_conversation *conversation, const weft_prepared_image *image) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    c->prompt_image(*get<weft::PreparedImage>(image, Kind::prepared_image));
  });
}

weft_status weft_conversation_n_images(const weft_conversation *conversation, size_t *out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = conv_of(conversation)->images().size();
  });
}

weft_status weft_conversation_image(const weft_conversation *conversation, size_t index, weft_image_span *out) {
  return guarded(__func__, [&] {
    need(out, "out");
    const auto spans = conv_of(conversation)->images();
    if (index >= spans.size()) {
      fail(WEFT_ERR_OUT_OF_RANGE, fmt::format("index {} >= the conversation's {} images", index, spans.size()));
    }
    const weft::ImageSpan &s = spans[index];
    weft_image_span v{};
    v.id = s.id;
    v.begin = s.begin;
    v.n_tokens = s.n_tokens;
    v.n_pos = s.n_pos;
    v.encoded = s.encoded ? 1 : 0;
    v.audio = s.audio ? 1 : 0;
    write_struct(out, "weft_image_span", v, kImageSpanSizes);
  });
}

weft_status weft_executor_encode_images(weft_executor *executor, uint32_t max_images, weft_encode_result *out) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    // Checked first: a bad size must not cost an encode.
    if (out != nullptr) check_struct_size("weft_encode_result", out->struct_size, {sizeof(weft_encode_result)});
    const weft::EncodeResult r = ex->encode_images(max_images);
    weft_encode_result c{};
    c.images = r.images;
    c.failed = r.failed;
    c.pending = r.pending;
    c.seconds = r.seconds;
    if (out != nullptr) write_struct(out, "weft_encode_result", c, {sizeof(weft_encode_result)});
  });
}

weft_token weft_image_token(uint64_t id) { return weft::image_token(id); }

const char *weft_media_marker(void) {
  static const std::string marker(weft::media_marker());  // NUL-terminated for C
  return marker.c_str();
}

weft_status weft_conversation_prompt_text_with_images(weft_conversation *conversation, const char *text, size_t len,
                                                      const weft_prepared_image *const *images, size_t n_images,
                                                      uint32_t flags) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    const auto s = text_arg(text, len, "text");
    check_flags(flags, WEFT_TEXT_ADD_BOS | WEFT_TEXT_PARSE_SPECIAL, "flags");
    if (n_images > 0) need(images, "images");
    std::vector<weft::PreparedImage> list;
    list.reserve(n_images);
    for (std::size_t i = 0; i < n_images; ++i) list.push_back(*get<weft::PreparedImage>(images[i], Kind::prepared_image));
    c->prompt(s, list,
              {.add_bos = (flags & WEFT_TEXT_ADD_BOS) != 0, .parse_special = (flags & WEFT_TEXT_PARSE_SPECIAL) != 0});
  });
}

}  // extern "C"
