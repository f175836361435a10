// SamplerParams (and SpeculativeParams) validation: pure (no llama.cpp), shared by the sampler and
// the state decoder (and so by the state fuzzer).
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <utility>

#include "core/internal.hpp"
#include "core/banned_strings.hpp"
#include "core/logit_bias.hpp"
#include "core/sampling.hpp"
#include "weft/generation.hpp"

namespace weft::detail {
namespace {

void check_finite(const char *field, float v) {
  if (!std::isfinite(v)) fail(Errc::invalid_argument, fmt::format("SamplerParams.{} = {} must be finite", field, v));
}

}  // namespace

// Range checks are written as !(in range) so that NaN fails every one of them.
void validate(const SamplerParams &p) {
  check_finite("temperature", p.temperature);
  if (!(p.temperature >= 0.0f)) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.temperature = {} must be >= 0", p.temperature));
  }
  if (p.top_k < 0) fail(Errc::invalid_argument, fmt::format("SamplerParams.top_k = {} must be >= 0", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.top_p = {} is outside (0, 1]", p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.min_p = {} is outside [0, 1]", p.min_p));
  }
  check_finite("repeat_penalty", p.repeat_penalty);
  if (!(p.repeat_penalty > 0.0f)) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.repeat_penalty = {} must be > 0", p.repeat_penalty));
  }
  check_finite("frequency_penalty", p.frequency_penalty);
  check_finite("presence_penalty", p.presence_penalty);
  if (p.penalty_last_n < -1) {
    fail(Errc::invalid_argument,
         fmt::format("SamplerParams.penalty_last_n = {} must be >= -1 (-1 = the whole context)", p.penalty_last_n));
  }
  for (const auto &[field, text] : {std::pair<const char *, const std::string &>{"grammar", p.grammar},
                                     {"grammar_root", p.grammar_root}, {"json_schema", p.json_schema}}) {
    if (text.size() > kMaxSamplerText) {
      fail(Errc::out_of_range, fmt::format("SamplerParams.{} is {} bytes; at most {} are taken (a saved state "
                                           "holds no longer string)", field, text.size(), kMaxSamplerText));
    }
  }
  if (!p.grammar.empty() && !p.json_schema.empty()) {
    fail(Errc::invalid_argument,
         "SamplerParams.grammar and SamplerParams.json_schema are both set; a sampler takes one of them");
  }
  if (!p.grammar.empty() && p.grammar_root.empty()) {
    fail(Errc::invalid_argument, "SamplerParams.grammar_root is empty but a grammar is set");
  }
  validate_logit_bias(p.logit_bias);
  validate_banned_strings(p.banned_strings);
  validate_stages(p);
}

void validate_stages(const SamplerParams &p) {
  auto range = [](const char *field, float v, bool ok, const char *what) {
    if (!ok) fail(Errc::invalid_argument, fmt::format("SamplerParams.{} = {} {}", field, v, what));
  };
  range("typical_p", p.typical_p, p.typical_p > 0.0f && p.typical_p <= 1.0f, "is outside (0, 1]");
  range("xtc_probability", p.xtc_probability, p.xtc_probability >= 0.0f && p.xtc_probability <= 1.0f,
        "is outside [0, 1]");
  range("xtc_threshold", p.xtc_threshold, p.xtc_threshold > 0.0f && p.xtc_threshold <= 1.0f, "is outside (0, 1]");
  range("dry_multiplier", p.dry_multiplier, p.dry_multiplier >= 0.0f && std::isfinite(p.dry_multiplier),
        "must be finite and >= 0");
  range("dry_base", p.dry_base, p.dry_base >= 1.0f && std::isfinite(p.dry_base), "must be finite and >= 1");
  if (p.dry_allowed_length < 1) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.dry_allowed_length = {} must be >= 1", p.dry_allowed_length));
  }
  if (p.dry_penalty_last_n < -1) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.dry_penalty_last_n = {} must be >= -1 (-1 = the whole "
                                             "context)", p.dry_penalty_last_n));
  }
  if (p.dry_sequence_breakers.size() > SamplerParams::kMaxDryBreakers) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.dry_sequence_breakers has {} entries; at most {} are taken",
                                             p.dry_sequence_breakers.size(), SamplerParams::kMaxDryBreakers));
  }
  for (std::size_t i = 0; i < p.dry_sequence_breakers.size(); ++i) {
    const std::string &b = p.dry_sequence_breakers[i];
    if (b.empty() || b.size() > SamplerParams::kMaxDryBreakerBytes) {
      fail(Errc::invalid_argument, fmt::format("SamplerParams.dry_sequence_breakers[{}] is {} bytes; each must hold "
                                               "1 to {}", i, b.size(), SamplerParams::kMaxDryBreakerBytes));
    }
  }
  if (p.mirostat != 0 && p.mirostat != 2) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.mirostat = {} must be 0 (off) or 2 (Mirostat 2.0)", p.mirostat));
  }
  range("mirostat_tau", p.mirostat_tau, p.mirostat_tau > 0.0f && std::isfinite(p.mirostat_tau),
        "must be finite and > 0");
  range("mirostat_eta", p.mirostat_eta, p.mirostat_eta > 0.0f && p.mirostat_eta <= 1.0f, "is outside (0, 1]");
}

bool uses_stages(const SamplerParams &p) {
  const SamplerParams d;
  return p.typical_p != d.typical_p || p.xtc_probability != d.xtc_probability || p.xtc_threshold != d.xtc_threshold ||
         p.dry_multiplier != d.dry_multiplier || p.dry_base != d.dry_base ||
         p.dry_allowed_length != d.dry_allowed_length || p.dry_penalty_last_n != d.dry_penalty_last_n ||
         p.dry_sequence_breakers != d.dry_sequence_breakers || p.mirostat != d.mirostat ||
         p.mirostat_tau != d.mirostat_tau || p.mirostat_eta != d.mirostat_eta;
}

void validate_speculative(const SpeculativeParams &p, const char *what) {
  if (p.drafter != Drafter::none && p.drafter != Drafter::lookup && p.drafter != Drafter::model) {
    fail(Errc::invalid_argument, fmt::format("{}.drafter = {} is not a Drafter", what, static_cast<int>(p.drafter)));
  }
  if (p.max_draft < 1 || p.max_draft > SpeculativeParams::kMaxDraft) {
    fail(Errc::out_of_range,
         fmt::format("{}.max_draft = {} is outside [1, {}]", what, p.max_draft, SpeculativeParams::kMaxDraft));
  }
  if (p.ngram_min < 1 || p.ngram_max > SpeculativeParams::kMaxNgram || p.ngram_min > p.ngram_max) {
    fail(Errc::out_of_range, fmt::format("{}.ngram_min = {} and ngram_max = {} must satisfy 1 <= min <= max <= {}",
                                         what, p.ngram_min, p.ngram_max, SpeculativeParams::kMaxNgram));
  }
}

}  // namespace weft::detail
