#include "sched/cost_model.hpp"

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

// Weight of the newest sample in a small size's running cost.
constexpr double kRateAlpha = 0.3;
// A large size is predicted at least this share of the per-token cost of
// the large decodes seen: loose enough that a good line (a fixed cost
// spread over fewer tokens makes the average rate exceed the marginal one)
// is never lifted, tight enough that a drifted one cannot plan 20x over.
constexpr double kLargeFloorShare = 0.5;

// The error margin: its quantile, its step per sample, its cap, and how
// many decodes it waits for (the first ones are mostly the prior's error).
constexpr double kMarginQuantile = 0.99, kMarginStep = 0.02, kMarginMax = 3.0;
constexpr std::uint64_t kMarginWarmup = 8;

}  // namespace

CostModel::CostModel() {
  w_ = {kPriorA, kPriorB, 0.0};
  for (int i = 0; i < kDim; ++i) p_[i * kDim + i] = 1e3;
}

void CostModel::observe_switch(double extra) {
  if (!std::isfinite(extra)) return;
  extra = std::max(0.0, extra);
  switch_s_ = switch_seen_ ? switch_s_ + kRateAlpha * (extra - switch_s_) : extra;
  switch_seen_ = true;
}

void CostModel::observe(std::uint32_t tokens, double kv_depth, double seconds) {
  if (tokens == 0 || !std::isfinite(seconds) || seconds < 0) return;
  // Track the 99th percentile of the prediction's error (a stochastic
  // quantile estimate: up 0.99 of a step when above, down 0.01 when below),
  // once predictions stand on a few samples of this size. Small sizes (the
  // table) and large ones (the line) err differently, so each has its own:
  // a few prompt chunks among many generating steps must not hide in the
  // small sizes' quantile.
  if (samples_ >= kMarginWarmup && (tokens >= kSmall || seen_[tokens].n >= 2)) {
    double &m = margin_[tokens >= kSmall ? 1 : 0];
    const double ratio = seconds / std::max(predict(tokens, kv_depth), 1e-9);
    m += ratio > m ? kMarginStep * kMarginQuantile : -kMarginStep * (1 - kMarginQuantile);
    m = std::clamp(m, 1.0, kMarginMax);
  }
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
  if (tokens >= kSmall) {
    const double rate = seconds / tokens;
    large_per_token_ = large_seen_ ? (1 - kRateAlpha) * large_per_token_ + kRateAlpha * rate : rate;
    large_seen_ = true;
  }
  // Small sizes: what a decode of exactly this size took, and at what depth.
  if (tokens < kSmall) {
    Seen &e = seen_[tokens];
    e.seconds = e.n == 0 ? seconds : (1 - kRateAlpha) * e.seconds + kRateAlpha * seconds;
    e.depth = e.n == 0 ? kv_depth : (1 - kRateAlpha) * e.depth + kRateAlpha * kv_depth;
    ++e.n;
  }
}

double CostModel::seen_cost(std::uint32_t n, double kv_depth) const {
  // Moved from the depth it was seen at to this one.
  const Seen &e = seen_[n];
  return e.seconds + std::max(0.0, w_[2]) * n * (kv_depth - e.depth) / 1024.0;
}

double CostModel::predict(std::uint32_t tokens, double kv_depth) const {
  const double y = line(tokens, kv_depth);
  if (tokens >= kSmall) return std::max(y, kLargeFloorShare * large_per_token_ * tokens);
  if (tokens == 0) return y;
  // A size decoded before: what it took. One never decoded: what the
  // nearest smaller size seen took plus the line's cost of the extra tokens
  // (if that is more than the line), so a size the line under-predicts
  // lifts the sizes above it until they are seen.
  if (seen_[tokens].n != 0) {
    // Never more than the same tokens in smaller decodes seen: one slow
    // decode of a size (the machine busy that moment) would otherwise keep
    // the plans below it for good, as that size is then never decoded again.
    // From 2 tokens up only: one token runs other kernels (a vector, not a
    // matrix product) and two can cost more than twice one.
    double c = seen_cost(tokens, kv_depth);
    for (std::uint32_t m = 2; m < tokens; ++m) {
      if (seen_[m].n != 0) c = std::min(c, ((tokens + m - 1) / m) * seen_cost(m, kv_depth));
    }
    return std::max(c, kMinPerToken * tokens);
  }
  for (std::uint32_t n = tokens - 1; n >= 1; --n) {
    if (seen_[n].n != 0) return std::max(y, seen_cost(n, kv_depth) + y - line(n, kv_depth));
  }
  return y;
}

double CostModel::line(std::uint32_t tokens, double kv_depth) const {
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
  // Plans against the predictions times the margin of their size class.
  auto predict = [this](std::uint32_t n, double d) { return this->predict(n, d) * margin(n); };
  if (predict(cap, kv_depth) <= seconds) return cap;
  // With the small-size table predict() need not increase with tokens (2
  // tokens can cost more than 4): walk up from 1 and stop before the first
  // size that does not fit, so a plan never jumps over a slow size.
  // And explore small sizes no faster than doubling: a size never decoded is
  // planned only up to twice the largest small size that was (1 before any),
  // so a cold model's first budgeted steps are not the ones that discover
  // how slow small batches are by blowing the budget several times over.
  constexpr std::uint32_t kWalk = kSmall;
  std::uint32_t largest_seen = 0;
  for (std::uint32_t n = kSmall - 1; n >= 1 && largest_seen == 0; --n) {
    if (seen_[n].n != 0) largest_seen = n;
  }
  const std::uint32_t explore_to = std::max(1u, 2 * largest_seen);
  const std::uint32_t walk_end = std::min(cap, kWalk);
  std::uint32_t t = 1;
  bool held_back = false;  // stopped by the exploration limit, not the budget
  while (t < walk_end) {
    const std::uint32_t next = t + 1;
    if (next > explore_to && !(next < kSmall && seen_[next].n != 0)) {
      held_back = true;
      break;
    }
    if (predict(next, kv_depth) > seconds) break;
    t = next;
  }
  // Above the small sizes the line dominates and grows: bisect there if the
  // walk got through them, or was only held back and a large batch fits
  // (a big budget still plans a big batch).
  if (!(t == kWalk || held_back) || cap <= kWalk || predict(kWalk, kv_depth) > seconds) return t;
  std::uint32_t lo = kWalk, hi = cap;
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

void CostModel::observe_sample(double seconds) {
  sample_s_ = sample_s_ == 0 ? seconds : 0.8 * sample_s_ + 0.2 * seconds;
}

void CostModel::observe_media_batch(double seconds) {
  media_batch_s_ = seconds > media_batch_s_ ? seconds : 0.8 * media_batch_s_ + 0.2 * seconds;
}

void CostModel::observe_image_step(double predicted, double seconds) {
  const double ratio = seconds / predicted;
  image_step_margin_ = ratio > image_step_margin_ ? 0.5 * (image_step_margin_ + ratio)
                                                  : std::max(1.0, image_step_margin_ - 0.002);
}

void CostModel::observe_beside_encode(double ratio) {
  encode_slowdown_ = std::clamp(0.7 * encode_slowdown_ + 0.3 * ratio, 1.0, 4.0);
}

}  // namespace weft::detail
