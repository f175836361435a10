// The k largest logits of a vector in one pass, for the sampler's top-k
// fast path (sampling.cpp). Internal.
#pragma once

#include <llama.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace weft::detail {

// The k largest logits of a vector, offered in index order. Candidates that
// reach thr() are appended to a buffer, compacted to the k largest whenever
// it fills: appends are cheap, and thr() rises with each compaction.
class TopK {
 public:
  // thr: a lower bound of the k-th largest already known (else -inf).
  TopK(std::vector<llama_token_data> &buf, std::size_t k, float thr)
      : top_(buf), k_(k), cap_(std::max<std::size_t>(4 * k, 64)), thr_(thr) {
    top_.clear();
    top_.reserve(cap_);
  }
  // Adds entry i (v >= thr()); returns the new thr().
  float add(std::size_t i, float v) {
    top_.push_back({static_cast<llama_token>(i), v, 0.0f});
    if (top_.size() == cap_) compact();
    return thr_;
  }
  // The k largest in descending order, as llama.cpp's partial sort leaves
  // them, or false when that is not unique: fewer than k finite, or equal
  // logits among them or at their edge.
  bool finish() {
    if (top_.size() < k_) return false;
    if (top_.size() > k_) compact();
    std::sort(top_.begin(), top_.end(), greater);
    const float t = top_.back().logit;
    if (!(t > -INFINITY) || out_max_ == t) return false;
    for (std::size_t j = 1; j < k_; ++j) {
      if (top_[j].logit == top_[j - 1].logit) return false;
    }
    return true;
  }

 private:
  static constexpr auto greater = [](const llama_token_data &a, const llama_token_data &b) { return a.logit > b.logit; };
  void compact() {
    std::nth_element(top_.begin(), top_.begin() + static_cast<std::ptrdiff_t>(k_), top_.end(), greater);
    out_max_ = std::max(out_max_, top_[k_].logit);  // the largest of those dropped
    top_.resize(k_);
    thr_ = std::max_element(top_.begin(), top_.end(), greater)->logit;  // the smallest kept
  }
  std::vector<llama_token_data> &top_;
  std::size_t k_, cap_;
  float thr_;                  // a logit below this cannot be among the k largest
  float out_max_ = -INFINITY;  // the largest logit compacted away
};

}  // namespace weft::detail
