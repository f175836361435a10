#include "exec/media/media_record.hpp"

#include <fmt/format.h>

#include <cstring>

#include "core/internal.hpp"

namespace weft::detail {

void record_media(const ExecutorCore &x, const Conv &c, ConvRecord &r) {
  if (c.media.empty()) return;
  r.projector_fingerprint = x.media.projector->fingerprint;
  r.media_n_embd = static_cast<std::uint32_t>(x.media.projector->n_embd);
  for (const MediaSpan &s : c.media) {
    const MediaChunk &m = *s.chunk;
    MediaRecord rec{.id = m.id,
                    .begin = s.begin,
                    .n_tokens = m.n_tokens,
                    .n_pos = m.n_pos,
                    .nx = m.nx,
                    .audio = m.audio,
                    .non_causal = m.non_causal};
    const int state = m.state.load(std::memory_order_acquire);
    if (state == MediaChunk::ready) {
      rec.embd = m.embd;
    } else {
      if (!m.source) {
        fail(Errc::backend, fmt::format("conversation {} cannot be saved: image {} at position {} has neither "
                                        "embeddings nor its source",
                                        c.id, m.id, s.begin));
      }
      // Not encoded (still queued, or failed): its source travels, to be
      // encoded again on load, so one image's failure never blocks a save.
      rec.form = m.audio ? MediaRecord::pcm : m.width > 0 ? MediaRecord::rgb : MediaRecord::file;
      if (m.source) rec.source = *m.source;
      rec.width = m.width;
      rec.height = m.height;
    }
    r.media.push_back(std::move(rec));
  }
}

namespace {

std::shared_ptr<MediaChunk> make_chunk(ExecutorCore &x, MediaRecord &rec) {
  const std::uint64_t id = x.media.next_id++;
  if (rec.form == MediaRecord::embeddings) {
    auto m = std::make_shared<MediaChunk>();
    m->id = id;
    m->n_tokens = rec.n_tokens;
    m->n_pos = rec.n_pos;
    m->nx = rec.nx;
    m->audio = rec.audio;
    m->non_causal = rec.non_causal;
    m->embd = std::move(rec.embd);
    m->state.store(MediaChunk::ready, std::memory_order_release);
    return m;
  }
  ImageInput in;
  if (rec.form == MediaRecord::pcm) {
    std::vector<float> samples(rec.source.size() / sizeof(float));
    std::memcpy(samples.data(), rec.source.data(), samples.size() * sizeof(float));
    in = tokenize_audio(*x.media.projector, samples, id);
  } else if (rec.form == MediaRecord::rgb) {
    in = tokenize_image_rgb(*x.media.projector, rec.width, rec.height, rec.source, id);
  } else {
    in = tokenize_image_file(*x.media.projector, rec.source, id);
  }
  if (in.media->n_tokens != rec.n_tokens || in.media->n_pos != rec.n_pos || in.media->nx != rec.nx ||
      in.media->audio != rec.audio) {
    fail(Errc::incompatible, fmt::format("a saved image ({} positions) makes {} with this executor's projector",
                                         rec.n_tokens, in.media->n_tokens));
  }
  return std::move(in.media);
}

}  // namespace

ResolvedMedia resolve_media(ExecutorCore &x, ConvRecord &r, MediaIds &ids) {
  ResolvedMedia out;
  if (r.media.empty()) return out;
  if (!x.media.projector) {
    fail(Errc::incompatible, fmt::format("the state holds {} image(s) but this executor has no projector "
                                         "(ExecutorParams::projector)",
                                         r.media.size()));
  }
  if (r.projector_fingerprint != x.media.projector->fingerprint ||
      r.media_n_embd != static_cast<std::uint32_t>(x.media.projector->n_embd)) {
    fail(Errc::incompatible,
         fmt::format("the state's images were made with projector {:016x} ({} floats per embedding); this "
                     "executor's is {:016x} ({})",
                     r.projector_fingerprint, r.media_n_embd, x.media.projector->fingerprint, x.media.projector->n_embd));
  }
  const std::size_t n_hist = r.history.size();
  for (MediaRecord &rec : r.media) {
    // (The codec has checked that a clip has no grid.)
    if (rec.audio ? !x.media.projector->audio : (rec.nx > 0) != x.media.projector->mrope) {
      fail(Errc::corrupt, fmt::format("{} {} of the state is laid out for {} positions; its projector uses {}{}",
                                      rec.audio ? "clip" : "image", rec.id, rec.nx > 0 ? "M-RoPE" : "ordinary",
                                      x.media.projector->mrope ? "M-RoPE" : "ordinary",
                                      x.media.projector->audio ? "" : " and takes no audio"));
    }
    auto [it, fresh] = ids.try_emplace(rec.id);
    if (fresh) {
      it->second = make_chunk(x, rec);
      if (it->second->state.load(std::memory_order_acquire) == MediaChunk::queued) out.to_encode.push_back(it->second);
    } else if (it->second->n_tokens != rec.n_tokens || it->second->nx != rec.nx || it->second->audio != rec.audio ||
               it->second->non_causal != rec.non_causal) {
      fail(Errc::corrupt, fmt::format("the snapshot's records disagree on image {} ({} vs {} positions)", rec.id,
                                      it->second->n_tokens, rec.n_tokens));
    }
    const Token value = image_token(it->second->id);
    for (std::uint32_t p = rec.begin; p < rec.begin + rec.n_tokens; ++p) {
      (p < n_hist ? r.history[p] : r.queue[p - n_hist]) = value;
    }
    out.spans.push_back({rec.begin, it->second});
  }
  return out;
}

}  // namespace weft::detail
