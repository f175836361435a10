// Where a sequence's cells sit in llama.cpp's positions.
//
// A cell's index in a conversation (its place in the history) is its
// position, except in and after an M-RoPE image (qwen2-vl): its n_tokens
// cells all take the image's first position t (their 2-D place is in the
// cell's extra positions) and the image advances the positions by n_pos =
// max(grid width, grid height), fewer than its cells but for a grid one
// cell wide or tall (then only the cells inside it differ). A PosJump records each
// such image; every llama_memory_* call maps indices through pos_at().
// Internal; plain data, no locking of its own.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace weft::detail {

struct PosJump {
  std::uint32_t begin = 0;     // index of the image's first cell
  std::uint32_t n_tokens = 0;  // its cells
  std::uint32_t n_pos = 0;     // positions it advances (<= n_tokens)
  std::uint32_t end() const { return begin + n_tokens; }
  bool operator==(const PosJump &) const = default;
};

// The position of cell i (i == n: the next cell's). Jumps sorted by begin.
inline std::int32_t pos_at(std::span<const PosJump> jumps, std::uint32_t i) {
  std::int64_t p = i;
  for (const PosJump &j : jumps) {
    if (i >= j.end()) {
      p -= j.n_tokens - j.n_pos;
    } else {
      if (i > j.begin) p -= i - j.begin;  // inside the image: its first position
      break;
    }
  }
  return static_cast<std::int32_t>(p);
}

// Forgets the jumps of cells at or past index n.
inline void trim_jumps(std::vector<PosJump> &jumps, std::uint32_t n) {
  while (!jumps.empty() && jumps.back().begin >= n) jumps.pop_back();
}

// The jumps of the first n cells.
inline std::vector<PosJump> jumps_before(std::span<const PosJump> jumps, std::uint32_t n) {
  std::vector<PosJump> out;
  for (const PosJump &j : jumps) {
    if (j.begin < n) out.push_back(j);
  }
  return out;
}

// n, or the start of the image that index n cuts (a share or a cut ends on
// an image's edge, never inside it).
inline std::uint32_t jump_floor(std::span<const PosJump> jumps, std::uint32_t n) {
  for (const PosJump &j : jumps) {
    if (j.begin < n && n < j.end()) return j.begin;
  }
  return n;
}

}  // namespace weft::detail
