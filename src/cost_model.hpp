// CostModel: an online estimate of how long a decode takes, learned from the
// batches actually decoded, so a step can choose how much work fits a
// wall-clock budget.
//
// Model: seconds = a + b * tokens + c * tokens * kv_depth / 1024, fitted by
// recursive least squares with exponential forgetting (recent batches count
// more: the machine's load changes). Until it has seen a few batches it is
// deliberately pessimistic. Not thread-safe: the executor guards it.
#pragma once

#include <array>
#include <cstdint>

namespace weft::detail {

class CostModel {
 public:
  CostModel();

  // Records a decode of `tokens` tokens whose sequences had, on average,
  // `kv_depth` cells of history, taking `seconds`.
  void observe(std::uint32_t tokens, double kv_depth, double seconds);
  // Predicted seconds for such a decode.
  double predict(std::uint32_t tokens, double kv_depth) const;
  // The most tokens (at least 1, at most `cap`) predicted to fit `seconds`.
  std::uint32_t tokens_within(double seconds, double kv_depth, std::uint32_t cap) const;
  std::uint64_t samples() const noexcept { return samples_; }

 private:
  static constexpr int kDim = 3;
  std::array<double, kDim> w_{};           // a, b, c
  std::array<double, kDim * kDim> p_{};    // inverse covariance estimate
  std::uint64_t samples_ = 0;
};

}  // namespace weft::detail
