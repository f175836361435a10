#include "state/state_codec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/internal.hpp"

namespace weft::detail {
namespace {

constexpr char kConvMagic[8] = {'W', 'E', 'F', 'T', 'C', 'O', 'N', 'V'};
constexpr char kSnapMagic[8] = {'W', 'E', 'F', 'T', 'S', 'N', 'A', 'P'};

class Writer {
 public:
  std::vector<std::uint8_t> out;
  void raw(const void *p, std::size_t n) {
    if (n == 0) return;  // p may be null (an empty vector's data())
    auto b = static_cast<const std::uint8_t *>(p);
    out.insert(out.end(), b, b + n);
  }
  template <class T> void put(T v) { raw(&v, sizeof v); }  // little-endian hosts only (static_assert below)
  void str(const std::string &s) {
    put<std::uint32_t>(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void tokens(const std::vector<Token> &t) {
    put<std::uint32_t>(static_cast<std::uint32_t>(t.size()));
    raw(t.data(), t.size() * sizeof(Token));
  }
  void sampler(const SamplerParams &p) {
    put(p.temperature);
    put<std::int32_t>(p.top_k);
    put(p.top_p);
    put(p.min_p);
    put(p.repeat_penalty);
    put(p.frequency_penalty);
    put(p.presence_penalty);
    put<std::int32_t>(p.penalty_last_n);
    put(p.seed);
    str(p.grammar);
    str(p.grammar_root);
  }
  void sampler_state(const std::optional<Sampler::State> &s) {
    put<std::uint8_t>(s ? 1 : 0);
    if (!s) return;
    put(s->rng);
    tokens(s->journal);
  }
};

class Reader {
 public:
  Reader(std::span<const std::uint8_t> b, const char *what) : b_(b), what_(what) {}
  void raw(void *p, std::size_t n, const char *field) {
    if (n == 0) return;  // p may be null (an empty vector's data())
    if (n > b_.size() - pos_) {
      fail(Errc::corrupt, fmt::format("{} is truncated: {} needs {} bytes at offset {}, {} left", what_, field, n, pos_,
                                      b_.size() - pos_));
    }
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
  }
  template <class T> T get(const char *field) {
    T v;
    raw(&v, sizeof v, field);
    return v;
  }
  std::uint32_t count(std::uint32_t max, const char *field) {
    const auto n = get<std::uint32_t>(field);
    if (n > max) fail(Errc::corrupt, fmt::format("{}: {} = {} exceeds the limit of {}", what_, field, n, max));
    return n;
  }
  bool flag(const char *field) {
    const auto v = get<std::uint8_t>(field);
    if (v > 1) fail(Errc::corrupt, fmt::format("{}: {} = {} is not a boolean", what_, field, v));
    return v == 1;
  }
  std::string str(const char *field) {
    std::string s(count(kMaxString, field), '\0');
    raw(s.data(), s.size(), field);
    return s;
  }
  std::vector<Token> tokens(const char *field, std::int32_t n_vocab, bool allow_prompt_marks = false,
                            bool allow_media = false) {
    std::vector<Token> t(count(kMaxTokens, field));
    raw(t.data(), t.size() * sizeof(Token), field);
    for (Token x : t) {
      const bool ok = (x >= 0 && x < n_vocab) || (allow_prompt_marks && x < 0 && -(x + 1) < n_vocab) ||
                      (allow_media && x < 0);
      if (!ok) fail(Errc::corrupt, fmt::format("{}: {} holds token id {} outside [0, {})", what_, field, x, n_vocab));
    }
    return t;
  }
  SamplerParams sampler() {
    SamplerParams p;
    p.temperature = get<float>("sampler.temperature");
    p.top_k = get<std::int32_t>("sampler.top_k");
    p.top_p = get<float>("sampler.top_p");
    p.min_p = get<float>("sampler.min_p");
    p.repeat_penalty = get<float>("sampler.repeat_penalty");
    p.frequency_penalty = get<float>("sampler.frequency_penalty");
    p.presence_penalty = get<float>("sampler.presence_penalty");
    p.penalty_last_n = get<std::int32_t>("sampler.penalty_last_n");
    p.seed = get<std::uint32_t>("sampler.seed");
    p.grammar = str("sampler.grammar");
    p.grammar_root = str("sampler.grammar_root");
    try {
      validate(p);
    } catch (const Error &e) {
      fail(Errc::corrupt, fmt::format("{}: {}", what_, e.what()));
    }
    return p;
  }
  std::optional<Sampler::State> sampler_state(std::int32_t n_vocab) {
    if (!flag("sampler_state.present")) return std::nullopt;
    Sampler::State s;
    s.rng = get<std::uint64_t>("sampler_state.rng");
    s.journal = tokens("sampler_state.journal", n_vocab, true);
    return s;
  }
  void skip(std::size_t n) { pos_ += std::min(n, left()); }
  std::size_t pos() const { return pos_; }
  std::size_t left() const { return b_.size() - pos_; }

 private:
  std::span<const std::uint8_t> b_;
  const char *what_;
  std::size_t pos_ = 0;
};

// Magic + version + body + CRC-32 of everything before it. The frame is the
// same in every version, so the CRC is checked first: damaged version bytes
// are corruption, and only an intact file of another version is incompatible.
std::uint32_t check_frame(std::span<const std::uint8_t> bytes, const char (&magic)[8], const char *what) {
  if (bytes.size() < 8 + 4 + 4 || std::memcmp(bytes.data(), magic, 8) != 0) {
    fail(Errc::corrupt, fmt::format("{}: not a weft state (bad magic or {} bytes)", what, bytes.size()));
  }
  std::uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::uint32_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  const std::uint32_t actual = crc32(bytes.first(bytes.size() - 4));
  if (stored != actual) {
    fail(Errc::corrupt, fmt::format("{}: checksum mismatch (stored {:08x}, computed {:08x}; version field {})", what,
                                    stored, actual, version));
  }
  if (version < kOldestStateVersion || version > kStateVersion) {
    fail(Errc::incompatible, fmt::format("{}: format version {} is not supported (this weft reads versions {} to {})",
                                         what, version, kOldestStateVersion, kStateVersion));
  }
  return version;
}

void check_model(Reader &r, std::uint64_t fingerprint, const char *what) {
  const auto fp = r.get<std::uint64_t>("model fingerprint");
  if (fp != fingerprint) {
    fail(Errc::incompatible,
         fmt::format("{} was saved with another model (fingerprint {:016x}, this model {:016x})", what, fp, fingerprint));
  }
}

}  // namespace

static_assert(std::endian::native == std::endian::little, "the state format is little-endian");

// CRC-32 (IEEE, as zlib), eight bytes at a time ("slicing-by-8"): a load
// checks every byte of its KV data on the caller's thread, and the bytewise
// table ran at ~0.5 GB/s, a millisecond per half megabyte of a game's frame.
std::uint32_t crc32(std::span<const std::uint8_t> bytes) {
  static const auto table = [] {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i) {
      for (std::size_t k = 1; k < 8; ++k) t[k][i] = t[0][t[k - 1][i] & 0xFF] ^ (t[k - 1][i] >> 8);
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  const std::uint8_t *p = bytes.data();
  std::size_t n = bytes.size();
  for (; n >= 8; n -= 8, p += 8) {
    std::uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, p, 4);  // little-endian (asserted above)
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^ table[4][lo >> 24] ^
        table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^ table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = table[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// The images of a version 4 record, each checked against the positions it
// claims: in order, whole on one side of the decoded/queued boundary, every
// position holding image_token(id) and no other position a negative value.
void read_media(Reader &r, ConvRecord &c, const char *what) {
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
    m.non_causal = r.flag("image non_causal");
    const auto form = r.get<std::uint8_t>("image form");
    const std::uint64_t end = std::uint64_t(m.begin) + m.n_tokens;
    if (m.id == 0 || m.n_tokens == 0 || m.begin < next || end > total || (m.begin < n_hist && end > n_hist) ||
        form > MediaRecord::rgb) {
      fail(Errc::corrupt, fmt::format("{}: image {} (id {}) at [{}, {}) form {} does not fit its {} positions ({} "
                                      "decoded), in order and whole",
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
      if (len == 0 || len > kMaxMediaSource || len > r.left() || !rgb_ok) {
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

std::vector<std::uint8_t> encode_conversation(const ConvRecord &r, std::uint64_t fingerprint, std::int32_t n_vocab) {
  Writer w;
  w.raw(kConvMagic, 8);
  w.put(kStateVersion);
  w.put(fingerprint);
  w.put<std::int32_t>(n_vocab);
  w.tokens(r.history);
  w.tokens(r.queue);
  w.put<std::uint8_t>(r.logits.empty() ? 0 : 1);
  w.raw(r.logits.data(), r.logits.size() * sizeof(float));
  w.sampler(r.sampler_params);
  w.sampler_state(r.sampler_state);
  w.put(r.priority);
  w.put<std::uint8_t>(r.gen_token_queued ? 1 : 0);
  w.put<std::uint8_t>(r.gen ? 1 : 0);
  if (r.gen) {
    const GenRecord &g = *r.gen;
    w.put(g.max_tokens);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(g.stop.size()));
    for (const auto &s : g.stop) w.str(s);
    w.put<std::uint8_t>(g.sampler ? 1 : 0);
    if (g.sampler) w.sampler(*g.sampler);
    w.sampler_state(g.sampler_state);
    w.tokens(g.tokens);
    w.str(g.text);
    w.str(g.stream_text);
    w.put(g.stream_released);
  }
  w.put(r.kv_exact);
  w.put(r.kv_from);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(r.adapter_settings.size()));
  for (const auto &setting : r.adapter_settings) {
    w.put<std::uint32_t>(static_cast<std::uint32_t>(setting.size()));
    for (const AdapterRecord &a : setting) {
      w.put(a.fingerprint);
      w.str(a.name);
      w.put(a.kind);
      w.put(a.scale);
      w.put(a.layer_start);
      w.put(a.layer_end);
    }
  }
  w.put(r.adapters_current);
  w.put(r.adapter_end);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(r.adapter_spans.size()));
  for (const auto &[start, setting] : r.adapter_spans) {
    w.put(start);
    w.put(setting);
  }
  w.put(r.projector_fingerprint);
  w.put(r.media_n_embd);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(r.media.size()));
  for (const MediaRecord &m : r.media) {
    w.put(m.id);
    w.put(m.begin);
    w.put(m.n_tokens);
    w.put(m.n_pos);
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
  w.put<std::uint64_t>(r.kv.size());
  w.raw(r.kv.data(), r.kv.size());
  w.put(crc32(w.out));
  return std::move(w.out);
}

ConvRecord decode_conversation(std::span<const std::uint8_t> bytes, std::uint64_t fingerprint, std::int32_t n_vocab,
                               std::uint32_t n_ctx) {
  const char *what = "conversation state";
  const std::uint32_t version = check_frame(bytes, kConvMagic, what);
  Reader r(bytes.first(bytes.size() - 4), what);
  r.get<std::uint64_t>("magic");
  r.get<std::uint32_t>("version");
  check_model(r, fingerprint, what);
  const auto vocab = r.get<std::int32_t>("n_vocab");
  if (vocab != n_vocab) {
    fail(Errc::incompatible, fmt::format("{}: saved with a vocabulary of {} tokens, this model has {}", what, vocab,
                                         n_vocab));
  }
  ConvRecord c;
  // Version 4 positions may hold images' values (negative): checked
  // against the images once they are read.
  c.history = r.tokens("history", n_vocab, false, version >= 4);
  c.queue = r.tokens("queue", n_vocab, false, version >= 4);
  if (c.history.size() + c.queue.size() > n_ctx) {
    fail(Errc::out_of_range, fmt::format("{}: {} tokens ({} decoded + {} queued) exceed this executor's n_ctx = {}",
                                         what, c.history.size() + c.queue.size(), c.history.size(), c.queue.size(),
                                         n_ctx));
  }
  if (r.flag("has_logits")) {
    c.logits.resize(static_cast<std::size_t>(n_vocab));
    r.raw(c.logits.data(), c.logits.size() * sizeof(float), "logits");
    for (float x : c.logits) {
      if (std::isnan(x)) fail(Errc::corrupt, fmt::format("{}: logits hold NaN", what));
    }
  }
  c.sampler_params = r.sampler();
  c.sampler_state = r.sampler_state(n_vocab);
  c.priority = r.get<std::int32_t>("priority");
  c.gen_token_queued = r.flag("gen_token_queued");
  if (r.flag("has_generation")) {
    GenRecord g;
    g.max_tokens = r.get<std::uint32_t>("generation.max_tokens");
    if (g.max_tokens == 0) fail(Errc::corrupt, fmt::format("{}: generation.max_tokens = 0", what));
    const auto n_stop = r.count(kMaxStops, "generation.stop count");
    for (std::uint32_t i = 0; i < n_stop; ++i) g.stop.push_back(r.str("generation.stop"));
    if (r.flag("generation.has_sampler")) g.sampler = r.sampler();
    g.sampler_state = r.sampler_state(n_vocab);
    g.tokens = r.tokens("generation.tokens", n_vocab);
    g.text = r.str("generation.text");
    g.stream_text = r.str("generation.stream_text");
    g.stream_released = r.get<std::uint64_t>("generation.stream_released");
    if (g.stream_released > g.stream_text.size()) {
      fail(Errc::corrupt, fmt::format("{}: stream_released {} > stream text {}", what, g.stream_released,
                                      g.stream_text.size()));
    }
    c.gen = std::move(g);
  }
  if (version >= 2) {
    c.kv_exact = r.get<std::uint32_t>("kv exact");
    c.kv_from = r.get<std::uint32_t>("kv from");
    if (c.kv_exact > c.history.size() || (c.kv_from > 0 && c.kv_from >= c.history.size())) {
      fail(Errc::corrupt, fmt::format("{}: kv exact {} / kv from {} outside the {} decoded tokens", what, c.kv_exact,
                                      c.kv_from, c.history.size()));
    }
  }
  if (version >= 3) {
    const auto n_settings = r.count(kMaxAdapterSettings, "adapter setting count");
    for (std::uint32_t i = 0; i < n_settings; ++i) {
      auto &setting = c.adapter_settings.emplace_back();
      const auto n = r.count(kMaxAdaptersPerSetting, "adapter count");
      for (std::uint32_t j = 0; j < n; ++j) {
        AdapterRecord a;
        a.fingerprint = r.get<std::uint64_t>("adapter fingerprint");
        a.name = r.str("adapter name");
        a.kind = r.get<std::uint8_t>("adapter kind");
        a.scale = r.get<float>("adapter scale");
        a.layer_start = r.get<std::int32_t>("adapter layer start");
        a.layer_end = r.get<std::int32_t>("adapter layer end");
        if (a.kind > 1 || !std::isfinite(a.scale)) {
          fail(Errc::corrupt, fmt::format("{}: adapter '{}' has kind {} / scale {}", what, a.name, a.kind, a.scale));
        }
        setting.push_back(std::move(a));
      }
    }
    auto check_index = [&](std::int32_t i, const char *field) {
      if (i < -1 || i >= static_cast<std::int32_t>(n_settings)) {
        fail(Errc::corrupt, fmt::format("{}: {} {} is not one of the {} adapter settings", what, field, i, n_settings));
      }
      return i;
    };
    c.adapters_current = check_index(r.get<std::int32_t>("current adapters"), "current adapters");
    c.adapter_end = r.get<std::uint32_t>("adapter end");
    if (c.adapter_end > c.history.size() + c.queue.size()) {
      fail(Errc::corrupt, fmt::format("{}: adapter spans end at {}, past its {} tokens", what, c.adapter_end,
                                      c.history.size() + c.queue.size()));
    }
    const auto n_spans = r.count(kMaxTokens, "adapter span count");
    for (std::uint32_t i = 0; i < n_spans; ++i) {
      const auto start = r.get<std::uint32_t>("adapter span start");
      const auto setting = check_index(r.get<std::int32_t>("adapter span setting"), "adapter span setting");
      if (start >= std::max(c.adapter_end, 1u) || (i == 0 && start != 0) ||
          (i > 0 && start <= c.adapter_spans.back().first)) {
        fail(Errc::corrupt, fmt::format("{}: adapter span {} starts at {} (out of order or past {})", what, i, start,
                                        c.adapter_end));
      }
      c.adapter_spans.emplace_back(start, setting);
    }
  }
  if (version >= 4) read_media(r, c, what);
  const auto kv = r.get<std::uint64_t>("kv size");
  if (kv > kMaxKvBytes || kv != r.left()) {
    fail(Errc::corrupt, fmt::format("{}: kv size {} does not match the {} bytes left", what, kv, r.left()));
  }
  if ((kv == 0) != c.history.empty()) {
    fail(Errc::corrupt, fmt::format("{}: {} decoded tokens but {} bytes of KV data", what, c.history.size(), kv));
  }
  c.kv.resize(static_cast<std::size_t>(kv));
  r.raw(c.kv.data(), c.kv.size(), "kv data");
  return c;
}

std::vector<std::uint8_t> encode_snapshot(const std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> &convs,
                                          std::uint64_t fingerprint) {
  Writer w;
  w.raw(kSnapMagic, 8);
  w.put(kStateVersion);
  w.put(fingerprint);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(convs.size()));
  for (const auto &[id, bytes] : convs) {
    w.put(id);
    w.put<std::uint64_t>(bytes.size());
    w.raw(bytes.data(), bytes.size());
  }
  w.put(crc32(w.out));
  return std::move(w.out);
}

std::vector<std::pair<std::uint64_t, std::span<const std::uint8_t>>> decode_snapshot(
    std::span<const std::uint8_t> bytes, std::uint64_t fingerprint) {
  const char *what = "executor snapshot";
  check_frame(bytes, kSnapMagic, what);
  const auto body = bytes.first(bytes.size() - 4);
  Reader r(body, what);
  r.get<std::uint64_t>("magic");
  r.get<std::uint32_t>("version");
  check_model(r, fingerprint, what);
  const auto n = r.count(1u << 20, "conversation count");
  std::vector<std::pair<std::uint64_t, std::span<const std::uint8_t>>> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto id = r.get<std::uint64_t>("conversation id");
    const auto len = r.get<std::uint64_t>("conversation length");
    if (len > r.left()) fail(Errc::corrupt, fmt::format("{}: conversation {} claims {} bytes, {} left", what, id, len,
                                                        r.left()));
    out.emplace_back(id, body.subspan(r.pos(), static_cast<std::size_t>(len)));
    r.skip(static_cast<std::size_t>(len));
  }
  if (r.left() != 0) fail(Errc::corrupt, fmt::format("{}: {} stray bytes at the end", what, r.left()));
  return out;
}

}  // namespace weft::detail
