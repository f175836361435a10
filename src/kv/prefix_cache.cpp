// KvManager's prefix reuse: finding a donor for a prefix, sharing its cells,
// and the prefix cache of cells no conversation holds any more.
#include <llama.h>

#include <algorithm>
#include <unordered_set>

#include "kv/kv_manager.hpp"

namespace weft::detail {
namespace {

std::uint32_t common(std::span<const Token> a, std::span<const Token> b, std::size_t from) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = std::min(from, n);
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<std::uint32_t>(i);
}

}  // namespace

KvManager::Donor KvManager::find_donor(std::span<const Token> want, int self, std::uint64_t salt) const {
  Donor best;
  if (!reuse_on() || want.size() < PrefixIndex::kBlock) return best;
  sync_index();
  const std::uint32_t blocks = index_.lookup(want, scratch_, salt);
  // Candidates agree on the hashed blocks; compare on from there, then
  // check the winner whole (a hash collision is then a miss, not a mistake).
  for (int seq : scratch_) {
    const KvHandle *d = holders_[seq];
    if (seq == self || d == nullptr || d->salt != salt) continue;
    const auto held = std::span(d->tokens).first(d->exact);
    const std::uint32_t m = common(want, held, blocks * PrefixIndex::kBlock);
    if (m > best.n) best = {d, m};
  }
  if (best.h != nullptr && common(want, std::span(best.h->tokens).first(best.n), 0) < best.n) return {};
  return best;
}

bool KvManager::covered(const KvHandle &h, std::uint32_t n) const {
  return find_donor(std::span(h.tokens).first(n), h.seq, h.salt).n >= n;
}

std::uint32_t KvManager::reuse(KvHandle &h, std::span<const Token> want, std::uint32_t limit, std::uint64_t salt) {
  const std::uint32_t pos = h.n();
  // After a shift its own cells are not a fresh decode: sharing fresh ones
  // behind them would give what neither path gives.
  // Under another adapter setting its KV differs too.
  if (!reuse_on() || h.seq < 0 || h.exact != pos || (pos > 0 && h.salt != salt) ||
      limit < pos + PrefixIndex::kBlock) {
    return 0;
  }
  Donor d = find_donor(want.first(limit), h.seq, salt);
  if (d.h != nullptr) d.n = jump_floor(d.h->jumps, d.n);  // an image is shared whole or not at all
  if (d.n <= pos) {
    ++counters_.prefix_misses;
    return 0;
  }
  // Same tokens, same images: the donor's positions are h's.
  auto *mem = llama_get_memory(ctx_);
  // A window's cells llama.cpp took from the donor would leave a gap behind
  // h's own, which holds() cannot see (it reads the lowest position).
  if (!family_.plain() && pos > 0 && llama_memory_seq_pos_min(mem, d.h->seq) > d.h->pos(pos)) {
    ++counters_.prefix_misses;
    return 0;
  }
  llama_memory_seq_cp(mem, d.h->seq, h.seq, d.h->pos(pos), d.h->pos(d.n));
  if (!family_.plain() && !family_.holds(mem, h.seq, 0, d.h->pos(d.n))) {
    seq_rm(h.seq, h.pos(pos), -1);  // the donor's window lost cells h would need
    ++counters_.prefix_misses;
    return 0;
  }
  for (const PosJump &j : d.h->jumps) {
    if (j.begin >= pos && j.begin < d.n) h.jumps.push_back(j);
  }
  const auto cells = std::span(d.h->cells).subspan(pos, d.n - pos);
  ledger_.retain(cells, h.live);
  h.cells.insert(h.cells.end(), cells.begin(), cells.end());
  h.tokens.insert(h.tokens.end(), want.begin() + pos, want.begin() + d.n);
  h.exact = d.n;
  h.salt = salt;
  reindex(h, pos);
  counters_.reused_tokens += d.n - pos;
  ++counters_.prefix_hits;
  if (!d.h->live) {
    ++counters_.prefix_cache_hits;
    // Most recently used goes last.
    auto it = std::find_if(cache_.begin(), cache_.end(), [&](const CacheEntry &e) { return &e.kv == d.h; });
    if (it != cache_.end()) cache_.splice(cache_.end(), cache_, it);
  }
  return d.n - pos;
}

bool KvManager::retire(KvHandle &h) {
  h.exact = jump_floor(h.jumps, h.exact);  // part of an image is not a prefix to share
  if (!reuse_on() || !h.live || h.seq < 0 || h.exact < PrefixIndex::kBlock || covered(h, h.exact)) return false;
  if (h.n() > h.exact) {
    seq_rm(h.seq, h.pos(h.exact), -1);
    ledger_.release(std::span(h.cells).subspan(h.exact), true);
    h.cells.resize(h.exact);
    h.tokens.resize(h.exact);
    trim_jumps(h.jumps, h.exact);
  }
  ledger_.convert(h.cells, false);
  auto &e = cache_.emplace_back();
  e.kv.seq = h.seq;
  e.kv.cells = std::move(h.cells);
  e.kv.tokens = std::move(h.tokens);
  e.kv.jumps = std::move(h.jumps);
  e.kv.exact = h.exact;
  e.kv.salt = h.salt;
  e.kv.live = false;
  holders_[h.seq] = &e.kv;  // indexed as it was: same sequence, same tokens
  h.seq = -1;
  h.cells.clear();
  h.tokens.clear();
  h.jumps.clear();
  h.exact = 0;
  trim_cache();
  return true;
}

void KvManager::keep_tail(const KvHandle &h, std::uint32_t pos) {
  // Only into a slot nobody uses: keeping a rewound tail never evicts. Part
  // of an image is not kept (its cells share one position).
  const std::uint32_t exact = jump_floor(h.jumps, h.exact);
  if (!reuse_on() || !h.live || exact < pos + PrefixIndex::kBlock || free_seqs_.empty() || covered(h, exact)) {
    return;
  }
  auto &e = cache_.emplace_back();
  e.kv.live = false;
  e.kv.seq = take_seq(&e.kv);
  llama_memory_seq_cp(llama_get_memory(ctx_), h.seq, e.kv.seq, 0, h.pos(exact));
  e.kv.jumps = jumps_before(h.jumps, exact);
  e.kv.cells.assign(h.cells.begin(), h.cells.begin() + exact);
  ledger_.retain(e.kv.cells, false);
  e.kv.tokens.assign(h.tokens.begin(), h.tokens.begin() + exact);
  e.kv.exact = exact;
  e.kv.salt = h.salt;
  reindex(e.kv, 0);
  trim_cache();
}

void KvManager::evict(std::list<CacheEntry>::iterator it) {
  KvHandle &k = it->kv;
  seq_rm(k.seq, -1, -1);
  ledger_.release(k.cells, false);
  free_seq(k.seq);
  cache_.erase(it);
  ++counters_.prefix_evictions;
}

bool KvManager::evict_lru() {
  if (cache_.empty()) return false;
  evict(cache_.begin());
  return true;
}

void KvManager::trim_cache() {
  while (ledger_.reclaimable() > cache_budget_ && evict_lru()) {
  }
}

void KvManager::evict_sharing(std::span<const std::uint32_t> cells) {
  if (cache_.empty() || cells.empty()) return;
  const std::unordered_set<std::uint32_t> set(cells.begin(), cells.end());
  for (auto it = cache_.begin(); it != cache_.end();) {
    const auto next = std::next(it);
    if (std::any_of(it->kv.cells.begin(), it->kv.cells.end(), [&](std::uint32_t c) { return set.count(c) > 0; })) {
      evict(it);
    }
    it = next;
  }
}

std::uint64_t KvManager::cells_saved() const noexcept {
  std::uint64_t positions = 0;
  for (const KvHandle *h : holders_) {
    if (h != nullptr && h->live) positions += h->n();
  }
  return positions - std::min<std::uint64_t>(positions, cells_used());
}

}  // namespace weft::detail
