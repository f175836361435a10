#include "state/state_codec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/internal.hpp"
#include "state/codec_io.hpp"
#include "state/memory_codec.hpp"

namespace weft::detail {
namespace {

constexpr char kConvMagic[8] = {'W', 'E', 'F', 'T', 'C', 'O', 'N', 'V'};
constexpr char kSnapMagic[8] = {'W', 'E', 'F', 'T', 'S', 'N', 'A', 'P'};


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


std::vector<std::uint8_t> encode_conversation(const ConvRecord &r, std::uint64_t fingerprint, std::int32_t n_vocab) {
  Writer w;
  w.raw(kConvMagic, 8);
  // Whether the conversation's sampler or the running generation's own has it.
  const auto either = [&r](auto &&has) {
    return has(r.sampler_params) || (r.gen && r.gen->sampler && has(*r.gen->sampler));
  };
  const bool schema = either([](const SamplerParams &p) { return !p.json_schema.empty(); });
  const bool bias = either([](const SamplerParams &p) { return !p.logit_bias.empty(); });
  const bool stages = either([](const SamplerParams &p) { return uses_stages(p); });
  const bool bans = either([](const SamplerParams &p) { return !p.banned_strings.empty(); });
  const bool tool_format = r.gen && r.gen->tools && r.gen->tool_format != ToolFormat::hermes;
  const std::uint32_t version = r.gen && r.gen->speculative ? 15u
                                : !r.memory.empty()          ? 14u
                                : tool_format                ? 13u
                                : bans                       ? 12u
                                : r.gen && r.gen->tools      ? 11u
                                : stages                     ? 10u
                                : r.gen && r.gen->logprobs   ? 9u
                                : bias                       ? 8u
                                : schema                     ? 7u
                                : r.gen && r.gen->ignore_eos ? 6u
                                                             : kPlainStateVersion;
  w.put(version);
  w.put(fingerprint);
  w.put<std::int32_t>(n_vocab);
  w.tokens(r.history);
  w.tokens(r.queue);
  w.put<std::uint8_t>(r.logits.empty() ? 0 : 1);
  w.raw(r.logits.data(), r.logits.size() * sizeof(float));
  w.sampler(r.sampler_params, version);
  w.sampler_state(r.sampler_state, version);
  w.put(r.priority);
  w.put<std::uint8_t>(r.gen_token_queued ? 1 : 0);
  w.put<std::uint8_t>(r.gen ? 1 : 0);
  if (r.gen) {
    const GenRecord &g = *r.gen;
    w.put(g.max_tokens);
    if (version >= 6) w.put<std::uint8_t>(g.ignore_eos ? 1 : 0);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(g.stop.size()));
    for (const auto &s : g.stop) w.str(s);
    w.put<std::uint8_t>(g.sampler ? 1 : 0);
    if (g.sampler) w.sampler(*g.sampler, version);
    w.sampler_state(g.sampler_state, version);
    w.tokens(g.tokens);
    w.str(g.text);
    w.str(g.stream_text);
    w.put(g.stream_released);
    if (version >= 9) {
      w.put<std::uint8_t>(g.logprobs ? 1 : 0);
      w.put(g.top_logprobs);
      w.put<std::uint32_t>(static_cast<std::uint32_t>(g.logprob_entries.size()));
      for (const TokenLogprob &e : g.logprob_entries) {
        w.put<std::int32_t>(e.token);
        w.put(e.logprob);
        w.put<std::uint32_t>(static_cast<std::uint32_t>(e.top.size()));
        for (const TokenProb &t : e.top) {
          w.put<std::int32_t>(t.token);
          w.put(t.logprob);
        }
      }
    }
    if (version >= 11) w.put<std::uint8_t>(g.tools ? 1 : 0);
    if (version >= 13) w.put<std::uint8_t>(static_cast<std::uint8_t>(g.tool_format));
    if (version >= 15) {
      const SpeculativeParams &sp = *g.speculative;
      w.put<std::uint8_t>(static_cast<std::uint8_t>(sp.drafter));
      w.put(sp.max_draft);
      w.put(sp.ngram_min);
      w.put(sp.ngram_max);
      w.put<std::uint8_t>(sp.adaptive ? 1 : 0);
      w.put(g.drafted);
      w.put(g.accepted);
    }
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
  write_media(w, r);
  if (version >= 14) {
    w.put<std::uint64_t>(r.memory.size());
    w.raw(r.memory.data(), r.memory.size());
  }
  w.put<std::uint64_t>(r.kv.size());
  w.raw(r.kv.data(), r.kv.size());
  w.put(crc32(w.out));
  return std::move(w.out);
}

namespace {

// GenRecord's logprobs (version 9): one entry per generated token, each
// naming tokens of the vocabulary.
void read_logprobs(Reader &r, GenRecord &g, std::int32_t n_vocab, const char *what) {
  g.logprobs = r.flag("generation.logprobs");
  g.top_logprobs = r.get<std::uint32_t>("generation.top_logprobs");
  if (g.top_logprobs > GenerateParams::kMaxTopLogprobs || (!g.logprobs && g.top_logprobs > 0)) {
    fail(Errc::corrupt, fmt::format("{}: generation.top_logprobs = {} (logprobs {})", what, g.top_logprobs, g.logprobs));
  }
  const auto n = r.count(static_cast<std::uint32_t>(g.tokens.size()), "generation.logprobs count");
  if (g.logprobs && n != g.tokens.size()) {
    fail(Errc::corrupt, fmt::format("{}: {} logprob entries for {} generated tokens", what, n, g.tokens.size()));
  }
  auto token = [&](const char *field) {
    const auto t = r.get<std::int32_t>(field);
    if (t < 0 || t >= n_vocab) fail(Errc::corrupt, fmt::format("{}: {} = {} is outside the vocabulary", what, field, t));
    return t;
  };
  g.logprob_entries.resize(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    TokenLogprob &e = g.logprob_entries[i];
    e.token = token("generation.logprobs.token");
    if (e.token != g.tokens[i]) fail(Errc::corrupt, fmt::format("{}: logprob entry {} is not token {}'s", what, i, i));
    e.logprob = r.get<float>("generation.logprobs.logprob");
    e.top.resize(r.count(g.top_logprobs, "generation.logprobs.top count"));
    for (TokenProb &t : e.top) {
      t.token = token("generation.logprobs.top.token");
      t.logprob = r.get<float>("generation.logprobs.top.logprob");
    }
  }
}

// GenRecord's speculative decoding (version 15), checked as generate() checks it.
void read_speculative(Reader &r, GenRecord &g, const char *what) {
  SpeculativeParams sp;
  sp.drafter = static_cast<Drafter>(r.get<std::uint8_t>("generation.drafter"));
  sp.max_draft = r.get<std::uint32_t>("generation.max_draft");
  sp.ngram_min = r.get<std::uint32_t>("generation.ngram_min");
  sp.ngram_max = r.get<std::uint32_t>("generation.ngram_max");
  sp.adaptive = r.flag("generation.adaptive");
  try {
    validate_speculative(sp, "generation.speculative");
  } catch (const Error &e) {
    fail(Errc::corrupt, fmt::format("{}: {}", what, e.what()));
  }
  g.speculative = sp;
  g.drafted = r.get<std::uint32_t>("generation.drafted");
  g.accepted = r.get<std::uint32_t>("generation.accepted");
  if (g.accepted > g.drafted || g.accepted > g.tokens.size()) {
    fail(Errc::corrupt, fmt::format("{}: generation.accepted = {} exceeds drafted = {} or its {} tokens", what,
                                    g.accepted, g.drafted, g.tokens.size()));
  }
}

}  // namespace

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
  c.sampler_params = r.sampler(version, n_vocab);
  c.sampler_state = r.sampler_state(n_vocab, version);
  c.priority = r.get<std::int32_t>("priority");
  c.gen_token_queued = r.flag("gen_token_queued");
  if (r.flag("has_generation")) {
    GenRecord g;
    g.max_tokens = r.get<std::uint32_t>("generation.max_tokens");
    if (g.max_tokens == 0) fail(Errc::corrupt, fmt::format("{}: generation.max_tokens = 0", what));
    if (version >= 6) g.ignore_eos = r.flag("generation.ignore_eos");
    const auto n_stop = r.count(kMaxStops, "generation.stop count");
    for (std::uint32_t i = 0; i < n_stop; ++i) g.stop.push_back(r.str("generation.stop"));
    if (r.flag("generation.has_sampler")) g.sampler = r.sampler(version, n_vocab);
    g.sampler_state = r.sampler_state(n_vocab, version);
    g.tokens = r.tokens("generation.tokens", n_vocab);
    g.text = r.str("generation.text");
    g.stream_text = r.str("generation.stream_text");
    g.stream_released = r.get<std::uint64_t>("generation.stream_released");
    if (g.stream_released > g.stream_text.size()) {
      fail(Errc::corrupt, fmt::format("{}: stream_released {} > stream text {}", what, g.stream_released,
                                      g.stream_text.size()));
    }
    if (version >= 9) read_logprobs(r, g, n_vocab, what);
    if (version >= 11) g.tools = r.flag("generation.tools");
    if (version >= 13) {
      const auto f = r.get<std::uint8_t>("generation.tool_format");
      if (f < static_cast<std::uint8_t>(ToolFormat::hermes) || f > static_cast<std::uint8_t>(ToolFormat::mistral)) {
        fail(Errc::corrupt, fmt::format("{}: generation.tool_format = {} is not a tool format", what, f));
      }
      g.tool_format = static_cast<ToolFormat>(f);
    }
    if (version >= 15) read_speculative(r, g, what);
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
  if (version >= 4) read_media(r, c, what, version);
  if (version >= 14) {
    const auto n = r.get<std::uint64_t>("memory size");
    if (n > kMaxMemoryBytes || n > r.left()) {
      fail(Errc::corrupt, fmt::format("{}: memory size {} is past the {} bytes left", what, n, r.left()));
    }
    c.memory.resize(static_cast<std::size_t>(n));
    r.raw(c.memory.data(), c.memory.size(), "memory");
  }
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
  w.put(kPlainStateVersion);  // the frame is unchanged since; each conversation has its own
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
