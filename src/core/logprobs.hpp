// GenerateParams::logprobs: a sampled token's log-probability and the most
// likely tokens, from the logits as the model gave them. Internal.
#pragma once

#include <cstdint>
#include <span>

#include "weft/generation.hpp"
#include "weft/types.hpp"

namespace weft::detail {

// Errc::out_of_range for top_logprobs over GenerateParams::kMaxTopLogprobs,
// Errc::invalid_argument for top_logprobs or on_logprob without logprobs.
void validate_logprobs(const GenerateParams &params);

// `token`'s log-softmax over `logits` and the `top` largest, most likely
// first (equal logits: lower id first). The sum is accumulated in double;
// -inf logits count as probability 0. Not for a NaN (the sampler refused
// those before) nor for all -inf (nothing was sampled then).
TokenLogprob token_logprob(std::span<const float> logits, Token token, std::uint32_t top);

}  // namespace weft::detail
