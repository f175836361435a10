#include "cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace weft::detail {
namespace {

constexpr double kForget = 0.97;  // ~30 batches of memory
// Before any data: 5 ms per call plus 2 ms per token, so early budgeted
// steps take little rather than blow the frame.
constexpr double kPriorA = 5e-3, kPriorB = 2e-3;
// No model decodes a token in less than this (1 us; the tiny test model
// takes several us per token in a full batch).
constexpr double kMinPerToken = 1e-6;

std::array<double, 3> features(std::uint32_t tokens, double kv_depth) {
  const double n = tokens;
  return {1.0, n, n * kv_depth / 1024.0};
}

}  // namespace

CostModel::CostModel() {
  w_ = {kPriorA, kPriorB, 0.0};
  for (int i = 0; i < kDim; ++i) p_[i * kDim + i] = 1e3;
}

void CostModel::observe(std::uint32_t tokens, double kv_depth, double seconds) {
  if (tokens == 0 || !std::isfinite(seconds) || seconds < 0) return;
  const auto x = features(tokens, kv_depth);
  // Standard RLS update: k = P x / (lambda + x' P x); w += k (y - w'x); P = (P - k x' P) / lambda.
  std::array<double, kDim> px{};
  for (int i = 0; i < kDim; ++i) {
    for (int j = 0; j < kDim; ++j) px[i] += p_[i * kDim + j] * x[j];
  }
  double denom = kForget;
  for (int i = 0; i < kDim; ++i) denom += x[i] * px[i];
  double err = seconds;
  for (int i = 0; i < kDim; ++i) err -= w_[i] * x[i];
  for (int i = 0; i < kDim; ++i) w_[i] += px[i] / denom * err;
  std::array<double, kDim * kDim> np{};
  for (int i = 0; i < kDim; ++i) {
    for (int j = 0; j < kDim; ++j) np[i * kDim + j] = (p_[i * kDim + j] - px[i] * px[j] / denom) / kForget;
  }
  p_ = np;
  ++samples_;
}

double CostModel::predict(std::uint32_t tokens, double kv_depth) const {
  const auto x = features(tokens, kv_depth);
  double y = 0;
  for (int i = 0; i < kDim; ++i) y += w_[i] * x[i];
  // Cost never falls with more tokens, and no decode is free: a noisy fit (a
  // few samples on a loaded machine can give a negative slope) must not claim
  // either, or a tiny time budget would plan a full batch.
  const double per_token_floor = std::max(kMinPerToken, w_[1]) * tokens;
  return std::max({y, per_token_floor, 0.0});
}

std::uint32_t CostModel::tokens_within(double seconds, double kv_depth, std::uint32_t cap) const {
  if (cap <= 1) return 1;
  if (predict(cap, kv_depth) <= seconds) return cap;
  // predict() is increasing in tokens for sane fits; bisect, which also
  // copes with an odd fit without assuming linearity.
  std::uint32_t lo = 1, hi = cap;
  while (lo + 1 < hi) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (predict(mid, kv_depth) <= seconds) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace weft::detail
