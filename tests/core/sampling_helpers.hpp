// Helpers shared by the Sampler tests (tests/core/test_sampling*.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"

namespace weft_test::sampling {

// A small grammar: digits, then a full stop.
inline constexpr const char *kDigits = R"(root ::= [0-9]+ ".")";

inline const weft::Model &model() { return weft_test::tiny(); }
inline std::size_t n_vocab() { return static_cast<std::size_t>(model().n_vocab()); }

inline std::vector<float> normal_logits(std::mt19937 &rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> out(n_vocab());
  for (auto &l : out) l = dist(rng);
  return out;
}

inline weft::Token argmax(const std::vector<float> &l) {
  return static_cast<weft::Token>(std::max_element(l.begin(), l.end()) - l.begin());
}

// Logit vectors that stress an argmax: many exact ties (few distinct values),
// -inf entries, signed zeros, the maximum at the first or last index.
inline std::vector<float> tricky_logits(std::mt19937 &rng, unsigned kind) {
  auto l = normal_logits(rng, 3.0f);
  std::uniform_int_distribution<std::size_t> at(0, l.size() - 1);
  switch (kind % 6) {
    case 0: break;  // plain
    case 1:         // ties everywhere: 9 distinct values
      for (auto &x : l) x = std::round(x);
      break;
    case 2:  // -inf on most entries, ties among the rest
      for (auto &x : l) x = (rng() % 4 != 0) ? -INFINITY : std::round(x / 4.0f);
      break;
    case 3:  // all equal (zeros of both signs): the first index wins
      for (auto &x : l) x = (rng() % 2 != 0) ? -0.0f : 0.0f;
      break;
    case 4:  // a single finite entry, placed anywhere
      std::fill(l.begin(), l.end(), -INFINITY);
      l[at(rng)] = -1e30f;
      break;
    case 5:  // the maximum at the first or last index, tied elsewhere too
      l.front() = 100.0f;
      l.back() = 100.0f;
      if (rng() % 2 != 0) l.front() = 99.0f;
      l[at(rng)] = 100.0f;
      break;
  }
  return l;
}

// Whether `piece` written after `text` completes one of `bans` (an
// occurrence ending inside `piece`), by searching the whole text: the
// brute-force reference for SamplerParams::banned_strings.
inline bool completes_banned(const std::string &text, const std::string &piece, const std::vector<std::string> &bans) {
  if (piece.empty()) return false;
  const std::string all = text + piece;
  for (const auto &s : bans) {
    for (auto at = all.find(s); at != std::string::npos; at = all.find(s, at + 1)) {
      if (at + s.size() > text.size()) return true;
    }
  }
  return false;
}

}  // namespace weft_test::sampling
