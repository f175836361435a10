#include "kv/kv_ledger.hpp"

#include <cassert>

namespace weft::detail {

KvLedger::KvLedger(std::uint32_t n_cells) : refs_(n_cells, 0), live_(n_cells, 0) {
  free_.reserve(n_cells);
  // Hand out low ids first; the order has no meaning beyond determinism.
  for (std::uint32_t i = n_cells; i-- > 0;) free_.push_back(i);
}

void KvLedger::add(std::uint32_t c, bool live) {
  const bool was_cached_only = refs_[c] > 0 && live_[c] == 0;
  ++refs_[c];
  if (live) ++live_[c];
  const bool cached_only = live_[c] == 0;
  cached_only_ += static_cast<std::uint32_t>(cached_only) - static_cast<std::uint32_t>(was_cached_only);
}

void KvLedger::drop(std::uint32_t c, bool live) {
  assert(refs_[c] > 0 && (!live || live_[c] > 0));
  const bool was_cached_only = live_[c] == 0;
  --refs_[c];
  if (live) --live_[c];
  const bool cached_only = refs_[c] > 0 && live_[c] == 0;
  cached_only_ += static_cast<std::uint32_t>(cached_only) - static_cast<std::uint32_t>(was_cached_only);
  if (refs_[c] == 0) free_.push_back(c);
}

void KvLedger::alloc(std::uint32_t n, std::vector<std::uint32_t> &cells, bool live) {
  assert(n <= free());
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t c = free_.back();
    free_.pop_back();
    add(c, live);
    cells.push_back(c);
  }
}

void KvLedger::retain(std::span<const std::uint32_t> cells, bool live) {
  for (std::uint32_t c : cells) add(c, live);
}

void KvLedger::release(std::span<const std::uint32_t> cells, bool live) {
  for (std::uint32_t c : cells) drop(c, live);
}

void KvLedger::convert(std::span<const std::uint32_t> cells, bool to_live) {
  // Add the new kind first so the cell never looks free.
  for (std::uint32_t c : cells) {
    add(c, to_live);
    drop(c, !to_live);
  }
}

}  // namespace weft::detail
