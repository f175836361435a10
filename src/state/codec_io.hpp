// The state format's byte-level reader and writer (every length bounded
// before it is trusted), shared by state_codec.cpp and codec_media.cpp.
// Internal; pure: no llama.cpp calls.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/internal.hpp"
#include "core/logit_bias.hpp"
#include "state/state_codec.hpp"

namespace weft::detail {

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
  // `version` >= 7 adds json_schema, >= 8 logit_bias, >= 10 the stages, >= 12 banned_strings.
  void sampler(const SamplerParams &p, std::uint32_t version) {
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
    if (version >= 7) str(p.json_schema);
    if (version >= 8) {
      put<std::uint32_t>(static_cast<std::uint32_t>(p.logit_bias.size()));
      for (const LogitBias &b : p.logit_bias) {
        put<std::int32_t>(b.token);
        put(b.bias);
      }
    }
    if (version >= 10) {
      put(p.typical_p);
      put(p.xtc_probability);
      put(p.xtc_threshold);
      put(p.dry_multiplier);
      put(p.dry_base);
      put<std::int32_t>(p.dry_allowed_length);
      put<std::int32_t>(p.dry_penalty_last_n);
      put<std::uint32_t>(static_cast<std::uint32_t>(p.dry_sequence_breakers.size()));
      for (const auto &b : p.dry_sequence_breakers) str(b);
      put<std::int32_t>(p.mirostat);
      put(p.mirostat_tau);
      put(p.mirostat_eta);
    }
    if (version >= 12) {
      put<std::uint32_t>(static_cast<std::uint32_t>(p.banned_strings.size()));
      for (const auto &b : p.banned_strings) str(b);
    }
  }
  void sampler_state(const std::optional<Sampler::State> &s, std::uint32_t version) {
    put<std::uint8_t>(s ? 1 : 0);
    if (!s) return;
    put(s->rng);
    tokens(s->journal);
    if (version >= 10) {
      put<std::uint8_t>(s->mirostat_mu ? 1 : 0);
      if (s->mirostat_mu) put(*s->mirostat_mu);
    }
    if (version >= 12) {
      put<std::uint8_t>(s->ban_tail ? 1 : 0);
      if (s->ban_tail) str(*s->ban_tail);
    }
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
  SamplerParams sampler(std::uint32_t version, std::int32_t n_vocab) {
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
    if (version >= 7) p.json_schema = str("sampler.json_schema");
    if (version >= 8) {
      p.logit_bias.resize(count(SamplerParams::kMaxLogitBias, "sampler.logit_bias count"));
      for (LogitBias &b : p.logit_bias) {
        b.token = get<std::int32_t>("sampler.logit_bias.token");
        b.bias = get<float>("sampler.logit_bias.bias");
      }
    }
    if (version >= 10) {
      p.typical_p = get<float>("sampler.typical_p");
      p.xtc_probability = get<float>("sampler.xtc_probability");
      p.xtc_threshold = get<float>("sampler.xtc_threshold");
      p.dry_multiplier = get<float>("sampler.dry_multiplier");
      p.dry_base = get<float>("sampler.dry_base");
      p.dry_allowed_length = get<std::int32_t>("sampler.dry_allowed_length");
      p.dry_penalty_last_n = get<std::int32_t>("sampler.dry_penalty_last_n");
      p.dry_sequence_breakers.resize(count(SamplerParams::kMaxDryBreakers, "sampler.dry_sequence_breakers count"));
      for (auto &b : p.dry_sequence_breakers) b = str("sampler.dry_sequence_breakers");
      p.mirostat = get<std::int32_t>("sampler.mirostat");
      p.mirostat_tau = get<float>("sampler.mirostat_tau");
      p.mirostat_eta = get<float>("sampler.mirostat_eta");
    }
    if (version >= 12) {
      p.banned_strings.resize(count(SamplerParams::kMaxBannedStrings, "sampler.banned_strings count"));
      for (auto &b : p.banned_strings) b = str("sampler.banned_strings");
    }
    try {
      validate(p);
      check_logit_bias_vocab(p.logit_bias, n_vocab);
    } catch (const Error &e) {
      fail(Errc::corrupt, fmt::format("{}: {}", what_, e.what()));
    }
    return p;
  }
  std::optional<Sampler::State> sampler_state(std::int32_t n_vocab, std::uint32_t version) {
    if (!flag("sampler_state.present")) return std::nullopt;
    Sampler::State s;
    s.rng = get<std::uint64_t>("sampler_state.rng");
    s.journal = tokens("sampler_state.journal", n_vocab, true);
    if (version >= 10 && flag("sampler_state.has_mirostat_mu")) {
      s.mirostat_mu = get<float>("sampler_state.mirostat_mu");
      if (!std::isfinite(*s.mirostat_mu)) fail(Errc::corrupt, fmt::format("{}: mirostat mu is not finite", what_));
    }
    if (version >= 12 && flag("sampler_state.has_ban_tail")) {
      s.ban_tail = str("sampler_state.ban_tail");
      if (s.ban_tail->size() >= SamplerParams::kMaxBannedStringBytes) {
        fail(Errc::corrupt, fmt::format("{}: the banned strings' tail is {} bytes; at most {}", what_, s.ban_tail->size(),
                                        SamplerParams::kMaxBannedStringBytes - 1));
      }
    }
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

// A record's images (version 4 on; the grid width of M-RoPE images from
// version 5), written after its adapter spans.
void write_media(Writer &w, const ConvRecord &r);
// Reads them back, each checked against the positions it claims.
void read_media(Reader &r, ConvRecord &c, const char *what, std::uint32_t version);

}  // namespace weft::detail
