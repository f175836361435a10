// KvLedger: exact accounting of the unified KV cache's cells.
//
// It mirrors llama.cpp's unified cache: a decoded token occupies one cell; a
// fork (llama_memory_seq_cp) adds a sequence to existing cells instead of
// copying, and a cell is free once no sequence holds it. Each conversation
// keeps the ledger ids of its positions; the ledger keeps a reference count
// per id. free() is then exactly what llama.cpp can still accept. Not
// thread-safe: the executor guards it.
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

  // Appends `n` fresh cells to `cells`. Requires free() >= n.
  void alloc(std::uint32_t n, std::vector<std::uint32_t> &cells);
  // Another holder for each cell (a fork).
  void retain(std::span<const std::uint32_t> cells);
  // Drops one holder of each cell; cells with none left become free.
  void release(std::span<const std::uint32_t> cells);
  bool shared(std::uint32_t cell) const noexcept { return refs_[cell] > 1; }

 private:
  std::vector<std::uint32_t> refs_;
  std::vector<std::uint32_t> free_;
};

}  // namespace weft::detail
