// SamplerParams::logit_bias: its checks and the biased view of a logits
// vector the sampler draws from. Internal.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "weft/sampling.hpp"

namespace weft::detail {

// The checks that need no model (validate() calls it): at most
// SamplerParams::kMaxLogitBias entries, no NaN or +inf bias, no token listed
// twice (Errc::invalid_argument).
void validate_logit_bias(const std::vector<LogitBias> &bias);

// Errc::out_of_range naming the first token outside [0, n_vocab) and n_vocab.
void check_logit_bias_vocab(const std::vector<LogitBias> &bias, std::int32_t n_vocab);

// `logits` with the biases added, in `buf` (a -inf bias sets -inf, so a
// +inf logit banned is -inf, not NaN); `logits` itself when `bias` is empty
// or `logits` already is `buf` (biased once).
std::span<const float> apply_logit_bias(std::span<const float> logits, const std::vector<LogitBias> &bias,
                                        std::vector<float> &buf);

}  // namespace weft::detail
