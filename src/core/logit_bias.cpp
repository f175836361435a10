// SamplerParams::logit_bias: checks and application.
#include "core/logit_bias.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/internal.hpp"

namespace weft::detail {

void validate_logit_bias(const std::vector<LogitBias> &bias) {
  if (bias.size() > SamplerParams::kMaxLogitBias) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.logit_bias has {} entries; at most {} are taken",
                                             bias.size(), SamplerParams::kMaxLogitBias));
  }
  std::vector<Token> seen;
  seen.reserve(bias.size());
  for (std::size_t i = 0; i < bias.size(); ++i) {
    const LogitBias &b = bias[i];
    if (std::isnan(b.bias) || b.bias == INFINITY) {
      fail(Errc::invalid_argument, fmt::format("SamplerParams.logit_bias[{}].bias (token {}) is {}; it must be finite or -inf",
                                               i, b.token, std::isnan(b.bias) ? "NaN" : "+inf"));
    }
    seen.push_back(b.token);
  }
  std::sort(seen.begin(), seen.end());
  if (const auto dup = std::adjacent_find(seen.begin(), seen.end()); dup != seen.end()) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.logit_bias lists token {} twice", *dup));
  }
}

void check_logit_bias_vocab(const std::vector<LogitBias> &bias, std::int32_t n_vocab) {
  for (std::size_t i = 0; i < bias.size(); ++i) {
    if (bias[i].token < 0 || bias[i].token >= n_vocab) {
      fail(Errc::out_of_range, fmt::format("SamplerParams.logit_bias[{}].token = {} is outside the vocabulary [0, {})",
                                           i, bias[i].token, n_vocab));
    }
  }
}

std::span<const float> apply_logit_bias(std::span<const float> logits, const std::vector<LogitBias> &bias,
                                        std::vector<float> &buf) {
  if (bias.empty() || (logits.data() == buf.data() && logits.size() == buf.size())) return logits;
  buf.assign(logits.begin(), logits.end());
  for (const LogitBias &b : bias) {
    // The vocabulary was checked when the sampler was built; a logits vector
    // of another size is refused after this by the sampler's own check.
    if (b.token < 0 || static_cast<std::size_t>(b.token) >= buf.size()) continue;
    float &v = buf[static_cast<std::size_t>(b.token)];
    v = b.bias == -INFINITY ? -INFINITY : v + b.bias;
  }
  return buf;
}

}  // namespace weft::detail
