// Log-softmax of one logits vector: the sampled token's and the top n.
#include "core/logprobs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/internal.hpp"

namespace weft::detail {

void validate_logprobs(const GenerateParams &params) {
  if (params.top_logprobs > GenerateParams::kMaxTopLogprobs) {
    fail(Errc::out_of_range, fmt::format("GenerateParams.top_logprobs = {} is over the limit of {}",
                                         params.top_logprobs, GenerateParams::kMaxTopLogprobs));
  }
  if (!params.logprobs && (params.top_logprobs > 0 || params.on_logprob)) {
    fail(Errc::invalid_argument, fmt::format("GenerateParams.{} needs GenerateParams.logprobs = true",
                                             params.top_logprobs > 0 ? "top_logprobs" : "on_logprob"));
  }
}

TokenLogprob token_logprob(std::span<const float> logits, Token token, std::uint32_t top) {
  const float *p = logits.data();
  const std::size_t n = logits.size();
  float max = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i) max = p[i] > max ? p[i] : max;
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(p[i]) - static_cast<double>(max));
  const double lse = static_cast<double>(max) + std::log(sum);
  auto logprob = [&](std::size_t i) { return static_cast<float>(static_cast<double>(p[i]) - lse); };

  TokenLogprob out;
  out.token = token;
  out.logprob = logprob(static_cast<std::size_t>(token));
  const std::size_t k = std::min<std::size_t>(top, n);
  if (k == 0) return out;
  // One pass keeping the k best in a small sorted array (k <= 20).
  auto better = [&](std::size_t a, std::size_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
  std::vector<std::size_t> best;
  best.reserve(k + 1);
  for (std::size_t i = 0; i < n; ++i) {
    if (best.size() == k && !better(i, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
    if (best.size() > k) best.pop_back();
  }
  out.top.reserve(k);
  for (std::size_t i : best) out.top.push_back({static_cast<Token>(i), logprob(i)});
  return out;
}

}  // namespace weft::detail
