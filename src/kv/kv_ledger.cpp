#include "kv/kv_ledger.hpp"

#include <cassert>

namespace weft::detail {

KvLedger::KvLedger(std::uint32_t n_cells) : refs_(n_cells, 0) {
  free_.reserve(n_cells);
  // Hand out low ids first; the order has no meaning beyond determinism.
  for (std::uint32_t i = n_cells; i-- > 0;) free_.push_back(i);
}

void KvLedger::alloc(std::uint32_t n, std::vector<std::uint32_t> &cells) {
  assert(n <= free());
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t c = free_.back();
    free_.pop_back();
    refs_[c] = 1;
    cells.push_back(c);
  }
}

void KvLedger::retain(std::span<const std::uint32_t> cells) {
  for (std::uint32_t c : cells) ++refs_[c];
}

void KvLedger::release(std::span<const std::uint32_t> cells) {
  for (std::uint32_t c : cells) {
    assert(refs_[c] > 0);
    if (--refs_[c] == 0) free_.push_back(c);
  }
}

}  // namespace weft::detail
