// SamplerParams::banned_strings: a token is banned when its text contains a
// string, or finishes one the text so far has begun.
#include "core/banned_strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/internal.hpp"
#include "weft/sampling.hpp"

namespace weft::detail {
namespace {

// The lengths m in [1, s.size()) for which `tail` ends with s's first m bytes.
void partial_matches(std::string_view s, std::string_view tail, std::vector<std::size_t> &out) {
  out.clear();
  for (std::size_t m = std::min(s.size() - 1, tail.size()); m >= 1; --m) {
    if (tail.substr(tail.size() - m) == s.substr(0, m)) out.push_back(m);
  }
}

bool hits(std::string_view s, const std::vector<std::size_t> &partials, std::string_view piece) {
  if (piece.find(s) != std::string_view::npos) return true;
  for (const std::size_t m : partials) {
    if (piece.substr(0, s.size() - m) == s.substr(m)) return true;
  }
  return false;
}

}  // namespace

void validate_banned_strings(const std::vector<std::string> &strings) {
  if (strings.size() > SamplerParams::kMaxBannedStrings) {
    fail(Errc::invalid_argument, fmt::format("SamplerParams.banned_strings has {} entries; at most {} are taken",
                                             strings.size(), SamplerParams::kMaxBannedStrings));
  }
  for (std::size_t i = 0; i < strings.size(); ++i) {
    const std::size_t n = strings[i].size();
    if (n == 0 || n > SamplerParams::kMaxBannedStringBytes) {
      fail(Errc::invalid_argument, fmt::format("SamplerParams.banned_strings[{}] is {} bytes; each must hold 1 to {}",
                                               i, n, SamplerParams::kMaxBannedStringBytes));
    }
  }
}

BannedStrings::BannedStrings(std::vector<std::string> strings) : strings_(std::move(strings)) {
  for (const auto &s : strings_) longest_ = std::max(longest_, s.size());
}

bool BannedStrings::completes(std::string_view piece) const {
  if (piece.empty()) return false;
  thread_local std::vector<std::size_t> partials;
  for (const auto &s : strings_) {
    partial_matches(s, tail_, partials);
    if (hits(s, partials, piece)) return true;
  }
  return false;
}

std::span<const float> BannedStrings::mask(std::span<const float> logits, const std::vector<std::string> &pieces,
                                           std::vector<float> &buf) const {
  if (buf.data() != logits.data()) buf.assign(logits.begin(), logits.end());
  std::vector<std::size_t> partials;
  for (const auto &s : strings_) {
    partial_matches(s, tail_, partials);
    for (std::size_t t = 0; t < buf.size() && t < pieces.size(); ++t) {
      if (buf[t] != -INFINITY && !pieces[t].empty() && hits(s, partials, pieces[t])) buf[t] = -INFINITY;
    }
  }
  return buf;
}

void BannedStrings::accept(std::string_view piece) {
  if (longest_ <= 1) return;  // a one-byte string cannot be begun, only contained
  tail_.append(piece);
  if (tail_.size() > longest_ - 1) tail_.erase(0, tail_.size() - (longest_ - 1));
}

void BannedStrings::set_tail(std::string tail) {
  tail_ = std::move(tail);
  const std::size_t keep = longest_ > 0 ? longest_ - 1 : 0;
  if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
}

}  // namespace weft::detail
