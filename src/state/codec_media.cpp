// The images and audio clips of a conversation state (docs/STATE_FORMAT.md):
// each one's place, how it decodes, and its embeddings or its source.
#include <cmath>

#include "state/codec_io.hpp"

namespace weft::detail {

void write_media(Writer &w, const ConvRecord &r) {
  w.put(r.projector_fingerprint);
  w.put(r.media_n_embd);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(r.media.size()));
  for (const MediaRecord &m : r.media) {
    w.put(m.id);
    w.put(m.begin);
    w.put(m.n_tokens);
    w.put(m.n_pos);
    w.put(m.nx);
    w.put<std::uint8_t>(m.audio ? 1 : 0);
    w.put<std::uint8_t>(m.non_causal ? 1 : 0);
    w.put<std::uint8_t>(m.form);
    if (m.form == MediaRecord::embeddings) {
      w.raw(m.embd.data(), m.embd.size() * sizeof(float));
    } else {
      if (m.form == MediaRecord::rgb) {
        w.put(m.width);
        w.put(m.height);
      }
      w.put<std::uint64_t>(m.source.size());
      w.raw(m.source.data(), m.source.size());
    }
  }
}

// Each image is checked against the positions it claims: in order, whole on
// one side of the decoded/queued boundary, every position holding
// image_token(id) and no other position a negative value; and its grid (M-RoPE)
// against the positions it advances.
void read_media(Reader &r, ConvRecord &c, const char *what, std::uint32_t version) {
  c.projector_fingerprint = r.get<std::uint64_t>("projector fingerprint");
  c.media_n_embd = r.get<std::uint32_t>("media n_embd");
  const auto n = r.count(kMaxMedia, "image count");
  if (n > 0 && (c.media_n_embd == 0 || c.media_n_embd > kMaxMediaEmbd)) {
    fail(Errc::corrupt, fmt::format("{}: images of {} floats per embedding (1 to {})", what, c.media_n_embd,
                                    kMaxMediaEmbd));
  }
  const std::size_t n_hist = c.history.size(), total = n_hist + c.queue.size();
  auto at = [&](std::size_t i) { return i < n_hist ? c.history[i] : c.queue[i - n_hist]; };
  std::size_t next = 0;  // positions before it are checked
  auto check_text = [&](std::size_t until) {
    for (; next < until; ++next) {
      if (at(next) < 0) fail(Errc::corrupt, fmt::format("{}: position {} holds {}, no image's", what, next, at(next)));
    }
  };
  for (std::uint32_t i = 0; i < n; ++i) {
    MediaRecord m;
    m.id = r.get<std::uint64_t>("image id");
    m.begin = r.get<std::uint32_t>("image begin");
    m.n_tokens = r.get<std::uint32_t>("image n_tokens");
    m.n_pos = r.get<std::uint32_t>("image n_pos");
    if (version >= 5) {
      m.nx = r.get<std::uint32_t>("image nx");
      m.audio = r.flag("media audio");
    }
    const bool grid_ok = m.nx == 0 ? m.n_pos == m.n_tokens
                                   : !m.audio && m.n_tokens % m.nx == 0 && m.n_pos == std::max(m.nx, m.n_tokens / m.nx);
    if (!grid_ok) {
      fail(Errc::corrupt, fmt::format("{}: image {} of {} tokens advances {} positions, which a grid {} wide does not "
                                      "give",
                                      what, i, m.n_tokens, m.n_pos, m.nx));
    }
    m.non_causal = r.flag("image non_causal");
    const auto form = r.get<std::uint8_t>("image form");
    const std::uint64_t end = std::uint64_t(m.begin) + m.n_tokens;
    // A causal image may be part-decoded (it goes in pieces); then its
    // embeddings travel. A non-causal one is decoded whole or not at all.
    const bool part = m.begin < n_hist && end > n_hist;
    if (m.id == 0 || m.n_tokens == 0 || m.begin < next || end > total ||
        (part && (m.non_causal || form != MediaRecord::embeddings)) || form > MediaRecord::pcm ||
        (form != MediaRecord::embeddings && (form == MediaRecord::pcm) != m.audio)) {
      fail(Errc::corrupt, fmt::format("{}: image {} (id {}) at [{}, {}) form {} does not fit its {} positions ({} "
                                      "decoded), in order and whole (a causal one with its embeddings may be part-"
                                      "decoded)",
                                      what, i, m.id, m.begin, end, form, total, n_hist));
    }
    check_text(m.begin);
    for (; next < end; ++next) {
      if (at(next) != image_token(m.id)) {
        fail(Errc::corrupt, fmt::format("{}: position {} holds {}, not image {}'s {}", what, next, at(next), m.id,
                                        image_token(m.id)));
      }
    }
    m.form = static_cast<MediaRecord::Form>(form);
    if (m.form == MediaRecord::embeddings) {
      const std::uint64_t floats = std::uint64_t(m.n_tokens) * c.media_n_embd;
      if (floats * sizeof(float) > r.left()) {
        fail(Errc::corrupt, fmt::format("{}: image {} needs {} floats of embeddings, {} bytes left", what, m.id,
                                        floats, r.left()));
      }
      m.embd.resize(static_cast<std::size_t>(floats));
      r.raw(m.embd.data(), m.embd.size() * sizeof(float), "image embeddings");
      for (float x : m.embd) {
        if (!std::isfinite(x)) fail(Errc::corrupt, fmt::format("{}: image {}'s embeddings are not finite", what, m.id));
      }
    } else {
      if (m.form == MediaRecord::rgb) {
        m.width = r.get<std::uint32_t>("image width");
        m.height = r.get<std::uint32_t>("image height");
      }
      const auto len = r.get<std::uint64_t>("image source size");
      const bool rgb_ok = m.form != MediaRecord::rgb || len == std::uint64_t(m.width) * m.height * 3;
      const bool pcm_ok = m.form != MediaRecord::pcm || len % sizeof(float) == 0;
      if (len == 0 || len > kMaxMediaSource || len > r.left() || !rgb_ok || !pcm_ok) {
        fail(Errc::corrupt, fmt::format("{}: image {}'s source of {} bytes ({} x {}; limit {}, {} left)", what, m.id,
                                        len, m.width, m.height, kMaxMediaSource, r.left()));
      }
      if (m.begin < n_hist) fail(Errc::corrupt, fmt::format("{}: decoded image {} has no embeddings", what, m.id));
      m.source.resize(static_cast<std::size_t>(len));
      r.raw(m.source.data(), m.source.size(), "image source");
    }
    c.media.push_back(std::move(m));
  }
  check_text(total);
}

}  // namespace weft::detail
