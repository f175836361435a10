// SamplerParams::banned_strings: which tokens would complete a banned string
// after the text generated so far. Internal.
//
// Thread-safety: none; owned by one Sampler.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::detail {

// The checks validate() runs: at most SamplerParams::kMaxBannedStrings, each
// 1 to kMaxBannedStringBytes bytes (Errc::invalid_argument naming the entry).
void validate_banned_strings(const std::vector<std::string> &strings);

class BannedStrings {
 public:
  BannedStrings() = default;
  explicit BannedStrings(std::vector<std::string> strings);

  bool empty() const noexcept { return strings_.empty(); }
  // Whether `piece`, written after the text so far, completes a banned string.
  bool completes(std::string_view piece) const;
  // `logits` with every token that completes() set to -inf, in `buf`
  // (`pieces[t]` is token t's text).
  std::span<const float> mask(std::span<const float> logits, const std::vector<std::string> &pieces,
                              std::vector<float> &buf) const;
  // Appends a kept token's text; only the last longest - 1 bytes are kept,
  // which is all a later completion can start in.
  void accept(std::string_view piece);
  // The text starts afresh (a new generation).
  void clear() noexcept { tail_.clear(); }
  const std::string &tail() const noexcept { return tail_; }
  void set_tail(std::string tail);

 private:
  std::vector<std::string> strings_;
  std::size_t longest_ = 0;
  std::string tail_;  // the generated text's last longest_ - 1 bytes at most
};

}  // namespace weft::detail
