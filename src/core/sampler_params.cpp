// SamplerParams validation: pure (no llama.cpp), shared by the sampler and
// the state decoder (and so by the state fuzzer).
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <utility>

#include "core/internal.hpp"
#include "core/logit_bias.hpp"
#include "core/sampling.hpp"

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
}

}  // namespace weft::detail
