#include "sched/draft_lookup.hpp"

#include <algorithm>

namespace weft::detail {
namespace {

// Token i of history + last.
inline Token at(std::span<const Token> history, Token last, std::size_t i) {
  return i < history.size() ? history[i] : last;
}

}  // namespace

std::uint32_t lookup_draft(std::span<const Token> history, Token last, std::uint32_t ngram_min,
                           std::uint32_t ngram_max, std::span<Token> out, std::uint32_t window) {
  const std::size_t total = history.size() + 1;  // with `last`
  if (out.empty() || ngram_min == 0 || ngram_min > ngram_max) return 0;
  const std::size_t lo = total > window ? total - window : 0;
  for (auto n = static_cast<std::uint32_t>(std::min<std::size_t>(ngram_max, total - 1)); n >= ngram_min && n > 0; --n) {
    const std::size_t key = total - n;  // the last n tokens begin here
    // Latest start s < key whose n tokens equal the key's, and that has a
    // continuation (s + n < total; the key itself is excluded).
    for (std::size_t s = key; s-- > lo;) {
      bool same = true;
      for (std::uint32_t k = 0; k < n && same; ++k) same = at(history, last, s + k) == at(history, last, key + k);
      if (!same) continue;
      // Past the end the continuation repeats itself (a loop of period
      // key - s goes on looping).
      std::uint32_t w = 0;
      for (std::size_t i = s + n; w < out.size(); ++i) out[w++] = i < total ? at(history, last, i) : out[i - total];
      return w;
    }
  }
  return 0;
}

}  // namespace weft::detail
