// TokenQueue: a conversation's input waiting to be decoded.
//
// Tokens are taken from the front as they are decoded and put back at the
// front when history has to be decoded again (a recompute, a remove that
// cannot shift, logits to recompute). The front is an index, so taking
// tokens does not move the rest; the storage is reused once empty. Not
// thread-safe: its conversation's lock guards it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "weft/types.hpp"

namespace weft::detail {

class TokenQueue {
 public:
  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(tokens_.size() - head_); }
  bool empty() const noexcept { return head_ == tokens_.size(); }
  std::span<const Token> view() const noexcept { return std::span(tokens_).subspan(head_); }
  Token operator[](std::size_t i) const noexcept { return tokens_[head_ + i]; }

  void push_back(Token t) { tokens_.push_back(t); }
  void push_back(std::span<const Token> ts) { tokens_.insert(tokens_.end(), ts.begin(), ts.end()); }
  void push_front(std::span<const Token> ts) {
    tokens_.insert(tokens_.begin() + static_cast<std::ptrdiff_t>(head_), ts.begin(), ts.end());
  }
  // Takes n tokens off the front (n <= size()).
  void pop_front(std::uint32_t n) {
    head_ += n;
    if (head_ == tokens_.size()) clear();
  }
  // Drops n tokens off the back (n <= size()).
  void pop_back(std::uint32_t n) {
    tokens_.resize(tokens_.size() - n);
    if (head_ == tokens_.size()) clear();
  }
  void assign(std::span<const Token> ts) {
    tokens_.assign(ts.begin(), ts.end());
    head_ = 0;
  }
  void clear() noexcept {
    tokens_.clear();
    head_ = 0;
  }

 private:
  std::vector<Token> tokens_;
  std::size_t head_ = 0;
};

}  // namespace weft::detail
