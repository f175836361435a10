// CostModel: an online estimate of how long a decode takes, learned from the
// batches actually decoded, so a step can choose how much work fits a
// wall-clock budget.
//
// Model: seconds = a + b * tokens + c * tokens * kv_depth / 1024, fitted by
// recursive least squares with exponential forgetting (recent batches count
// more: the machine's load changes). Until it has seen a few batches it is
// deliberately pessimistic. Not thread-safe: the executor guards it.
//
// The CPU cost of a decode is not linear in its tokens: on `small`, one
// thread, 1 token takes ~8-10 ms, 2-3 tokens 21-29 ms, 8 about 50 ms, and a
// 512-token prompt batch ~2.5 ms a token (llama.cpp's kernels change above
// one token). A line through all of that under-predicts the 2-4 token
// batches a tight budget plans. So for each small size (under 64 tokens) it
// also keeps a running time of decodes of exactly that size (weight 0.3 for
// the newest) and the depth they ran at, and predicts that size from what it
// took (moved to the asked depth with the line's depth term) rather than
// from the line. A small size never decoded is predicted as the nearest
// smaller size that was plus the line's cost of the extra tokens (or the
// line, if more), so a size the line under-predicts lifts those above it;
// and tokens_within() plans a small size never decoded only up to twice the
// largest that was (1 on a cold model), so a budget explores by doubling.
// A size seen is never predicted above ceil(n/m) times a smaller size m >= 2
// seen (the same tokens in smaller decodes): one slow decode of it (the
// machine busy that moment, an encoder thread beside it) must not hold the
// plans below it for good, since a size planned no more is seen no more.
// Large sizes: the line, but never under half the per-token cost of the
// large decodes actually seen (a running value). A budget that plans only
// small batches for hundreds of steps feeds the fit nothing about large
// ones; with forgetting, its slope then drifts (any value fits batches of
// one size), and the line once promised 512 tokens in 3 ms that took 70 ms
// (weft bench frame, tiny, 4 ms budget, frame 282).
// The depth is what attention spans, which the caller knows: the cells in
// use without flash attention (every token attends over them), the mean
// position of the batch's tokens with it (not of its conversations: a chunk
// deep in its conversation is deep).
#pragma once

#include <array>
#include <cstdint>

namespace weft::detail {

class CostModel {
 public:
  CostModel();

  // Records a decode of `tokens` tokens that attended over `kv_depth` cells
  // (see above), taking `seconds`.
  void observe(std::uint32_t tokens, double kv_depth, double seconds);
  // Predicted seconds for such a decode.
  double predict(std::uint32_t tokens, double kv_depth) const;
  // The most tokens (at least 1, at most `cap`) predicted to fit `seconds`,
  // with the margin below.
  std::uint32_t tokens_within(double seconds, double kv_depth, std::uint32_t cap) const;
  std::uint64_t samples() const noexcept { return samples_; }
  // What switching the context's adapter setting adds to the next decode
  // (llama.cpp re-reserves its graph): a decode right after a switch that
  // took `extra` seconds more than predicted. Running value, weight 0.3 for
  // the newest; 0 until a switch was seen.
  void observe_switch(double extra);
  double switch_seconds() const noexcept { return switch_s_; }
  // How much longer than predicted a decode of `tokens` may take: a running
  // estimate of the 99th percentile of (actual / predicted) for its size
  // class (under 64 tokens, or not), at least 1. A plan must fit the budget
  // at the 99th percentile of steps, not on average, so tokens_within()
  // plans against predictions times this. It starts at 1.25 for both: a
  // frame sees few prompt chunks, too few to learn a tail from, and their
  // cost scatters by that much (45-78 us a token across one run on tiny);
  // small sizes scatter as much on `small` at one thread (a decode of 5-9
  // tokens: median 41-58 ms, up to 80), where a start at 1.1 missed p99 <=
  // 1.1x a 60 ms budget in 2 of 3 runs of 150 frames while it learned. From
  // there it rises fast when a decode overruns it and falls slowly (0.0002
  // a decode) when none does.
  double margin(std::uint32_t tokens) const noexcept { return margin_[tokens >= kSmall ? 1 : 0]; }

  // What else a step's plan budgets for, learned from what ran.
  // One sample (a time budget keeps room for the sampling after its decode):
  // a running time, weight 0.2 for the newest; 0 until one was seen.
  void observe_sample(double seconds);
  double sample_seconds() const noexcept { return sample_s_; }
  // A non-causal image's embeddings batch, the graph re-reserve for it
  // included: the larger of the last and a running mean (weight 0.2), so a
  // slow one is planned for at once and a fast one only gradually; 0 before
  // the first.
  void observe_media_batch(double seconds);
  double media_batch_seconds() const noexcept { return media_batch_s_; }
  // How much longer than predicted a step with causal image rows runs its
  // two decodes (a token batch and an embeddings batch): as margin(), up
  // halfway to a larger ratio at once, down 0.002 a step when not; at least
  // 1, from 1.25.
  void observe_image_step(double predicted, double seconds);
  double image_step_margin() const noexcept { return image_step_margin_; }
  // How much slower than predicted a decode runs beside an encode (the
  // encoder thread on the same cores): a running ratio (weight 0.3) within
  // [1, 4], from 1. A plan made while it encodes divides its time by it.
  void observe_beside_encode(double ratio);
  double encode_slowdown() const noexcept { return encode_slowdown_; }

 private:
  static constexpr int kDim = 3;
  std::array<double, kDim> w_{};           // a, b, c
  std::array<double, kDim * kDim> p_{};    // inverse covariance estimate
  static constexpr std::uint32_t kSmall = 64;
  struct Seen {
    double seconds = 0, depth = 0;  // running (weight 0.3 for the newest)
    std::uint64_t n = 0;            // samples
  };
  std::array<Seen, kSmall> seen_{};  // decodes of exactly n tokens
  double large_per_token_ = 0;       // running seconds a token of decodes >= kSmall tokens
  bool large_seen_ = false;
  double seen_cost(std::uint32_t n, double kv_depth) const;
  double line(std::uint32_t tokens, double kv_depth) const;
  std::uint64_t samples_ = 0;
  double switch_s_ = 0;
  bool switch_seen_ = false;
  std::array<double, 2> margin_{1.25, 1.25};  // small sizes, large ones
  double sample_s_ = 0, media_batch_s_ = 0, image_step_margin_ = 1.25, encode_slowdown_ = 1.0;
};

}  // namespace weft::detail
