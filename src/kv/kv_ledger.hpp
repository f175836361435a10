// KvLedger: exact accounting of the unified KV cache's cells.
//
// It mirrors llama.cpp's unified cache: a decoded token occupies one cell; a
// fork (llama_memory_seq_cp) adds a sequence to existing cells instead of
// copying, and a cell is free once no sequence holds it. Each conversation
// keeps the ledger ids of its positions; the ledger keeps a reference count
// per id. free() is then exactly what llama.cpp can still accept.
//
// A holder is live (a conversation, a pinned prefix) or cached (the prefix
// cache, which gives its cells up whenever real work needs them): a cell
// that only cached holders hold is reclaimable. Not thread-safe: the
// executor guards it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace weft::detail {

class KvLedger {
 public:
  explicit KvLedger(std::uint32_t n_cells);

  std::uint32_t capacity() const noexcept { return static_cast<std::uint32_t>(refs_.size()); }
  std::uint32_t free() const noexcept { return static_cast<std::uint32_t>(free_.size()); }
  std::uint32_t used() const noexcept { return capacity() - free(); }
  // Cells that only cached holders hold.
  std::uint32_t reclaimable() const noexcept { return cached_only_; }

  // Appends `n` fresh cells to `cells`. Requires free() >= n.
  void alloc(std::uint32_t n, std::vector<std::uint32_t> &cells, bool live = true);
  // Another holder for each cell (a fork, a shared prefix).
  void retain(std::span<const std::uint32_t> cells, bool live = true);
  // Drops one holder of each cell; cells with none left become free.
  void release(std::span<const std::uint32_t> cells, bool live = true);
  // One holder of each cell changes from live to cached, or back.
  void convert(std::span<const std::uint32_t> cells, bool to_live);
  bool shared(std::uint32_t cell) const noexcept { return refs_[cell] > 1; }

 private:
  void add(std::uint32_t cell, bool live);
  void drop(std::uint32_t cell, bool live);

  std::vector<std::uint32_t> refs_;  // holders per cell
  std::vector<std::uint32_t> live_;  // of which live
  std::vector<std::uint32_t> free_;
  std::uint32_t cached_only_ = 0;
};

}  // namespace weft::detail
