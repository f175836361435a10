// KvManager: every llama_memory_* and llama_state_seq_* call in weft.
#include "kv/kv_manager.hpp"

#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/internal.hpp"
#include "kv/kv_layout.hpp"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Residency residency_of(const ParkedKv &blob) { return blob.tier() == Tier::ram ? Residency::ram : Residency::disk; }

}  // namespace

KvManager::KvManager(llama_context *ctx, std::uint32_t n_seq_max, const SpillConfig &spill, bool recompute,
                     std::uint32_t prefix_cache_cells, int scratch_seq)
    : ctx_(ctx),
      family_(llama_get_model(ctx)),
      can_shift_(llama_memory_can_shift(llama_get_memory(ctx))),
      recompute_(recompute),
      ledger_(llama_n_ctx(ctx)),
      store_(spill),
      holders_(n_seq_max, nullptr),
      index_from_(n_seq_max, kIndexed),
      // A recurrent state is of one position: no prefix of it to keep.
      cache_budget_(family_.cuts() ? prefix_cache_cells : 0),
      scratch_seq_(scratch_seq) {
  for (int s = static_cast<int>(n_seq_max); s-- > 0;) free_seqs_.push_back(s);
}

KvManager::~KvManager() = default;

bool KvManager::spill_on() const noexcept {
  return recompute_ || store_.config().ram_bytes > 0 || !store_.config().disk_dir.empty();
}

void KvManager::seq_rm(int seq, std::int32_t p0, std::int32_t p1) {
  // Fails only for a partial range of a recurrent model's sequence, which
  // weft never asks for (KvFamily): a failure means the ledger is wrong.
  if (!llama_memory_seq_rm(llama_get_memory(ctx_), seq, p0, p1)) {
    fail(Errc::backend, fmt::format("llama.cpp refused to remove positions [{}, {}) of sequence {}", p0, p1, seq));
  }
}

int KvManager::take_seq(KvHandle *holder) {
  if (free_seqs_.empty() && !evict_lru()) return -1;
  const int seq = free_seqs_.back();
  free_seqs_.pop_back();
  holders_[seq] = holder;
  return seq;
}

void KvManager::free_seq(int seq) {
  index_.erase(seq);
  index_from_[seq] = kIndexed;
  holders_[seq] = nullptr;
  free_seqs_.push_back(seq);
}

void KvManager::reindex(const KvHandle &h, std::uint32_t from) {
  // Noted now, hashed at the next lookup: a step that only generates
  // (no lookups) neither hashes nor allocates for the index.
  if (h.seq >= 0 && reuse_on()) index_from_[h.seq] = std::min(index_from_[h.seq], from);
}

void KvManager::sync_index() const {
  for (std::size_t seq = 0; seq < index_from_.size(); ++seq) {
    if (index_from_[seq] == kIndexed) continue;
    if (const KvHandle *h = holders_[seq]) {
      index_.update(static_cast<int>(seq), std::span(h->tokens).first(h->exact), index_from_[seq], h->salt);
    }
    index_from_[seq] = kIndexed;
  }
}

bool KvManager::acquire_unused_slot(KvHandle &h) {
  if (h.seq >= 0) return true;
  if (free_seqs_.empty()) return false;
  h.seq = take_seq(&h);
  return true;
}

bool KvManager::acquire_slot(KvHandle &h) {
  if (h.seq >= 0) return true;
  h.seq = take_seq(&h);
  return h.seq >= 0;
}

bool KvManager::make_room(std::uint32_t n) {
  while (ledger_.free() < n) {
    if (!evict_lru()) return false;
  }
  return true;
}

void KvManager::clear(KvHandle &h) {
  if (h.seq >= 0) seq_rm(h.seq, -1, -1);
  ledger_.release(h.cells, h.live);
  h.cells.clear();
  h.tokens.clear();
  h.jumps.clear();
  h.checkpoints.clear();
  h.exact = 0;
}

void KvManager::drop(KvHandle &h) {
  clear(h);
  if (h.seq >= 0) {
    free_seq(h.seq);
    h.seq = -1;
  }
}

void KvManager::release(KvHandle &h) {
  if (!retire(h)) drop(h);
  h.parked.reset();
  h.parked_n = 0;
  h.where = Residency::resident;
}

void KvManager::commit(KvHandle &h, std::span<const Token> tokens, std::uint64_t salt, std::uint32_t grid_n_pos,
                       std::uint32_t grid_cells) {
  const std::uint32_t from = h.n();
  const auto n = static_cast<std::uint32_t>(tokens.size());
  if (grid_n_pos != 0) h.jumps.push_back({from, std::max(n, grid_cells), grid_n_pos});
  // Room for a whole context at once: no reallocation while it generates.
  if (h.tokens.capacity() < h.tokens.size() + tokens.size()) {
    h.tokens.reserve(std::max<std::size_t>(ledger_.capacity(), h.tokens.size() + tokens.size()));
  }
  ledger_.alloc(static_cast<std::uint32_t>(tokens.size()), h.cells, h.live);
  h.tokens.insert(h.tokens.end(), tokens.begin(), tokens.end());
  // Exactness goes on only under the same adapter setting.
  if (h.exact == from && (from == 0 || h.salt == salt)) {
    h.salt = salt;
    h.exact = h.n();
    reindex(h, from);
  }
}

void KvManager::commit_stale(KvHandle &h, std::uint32_t n, std::uint32_t grid_n_pos, std::uint32_t grid_cells) {
  if (grid_n_pos != 0) h.jumps.push_back({h.n(), std::max(n, grid_cells), grid_n_pos});
  ledger_.alloc(n, h.cells, h.live);
  h.tokens.insert(h.tokens.end(), n, Token{-1});
}

void KvManager::truncate(KvHandle &h, std::uint32_t pos) {
  if (h.seq < 0 || pos >= h.n()) return;
  pos = jump_floor(h.jumps, pos);
  if (pos > 0 && !family_.cuts()) {
    if (!cut_at_checkpoint(h, pos)) redecode(h, pos);
    return;
  }
  keep_tail(h, pos);
  seq_rm(h.seq, h.pos(pos), -1);
  ledger_.release(std::span(h.cells).subspan(pos), h.live);
  h.cells.resize(pos);
  h.tokens.resize(pos);
  trim_jumps(h.jumps, pos);
  if (h.exact > pos) {
    h.exact = pos;
    reindex(h, pos);
  }
  if (!intact(h)) redecode(h, h.n());
}

bool KvManager::roll_back(KvHandle &h) {
  if (h.seq < 0) return true;
  const llama_pos next = h.pos(h.n());
  if (llama_memory_seq_pos_max(llama_get_memory(ctx_), h.seq) >= next) {
    // llama.cpp takes a failed batch's positions out itself, but a
    // recurrent state it moved on cannot be taken back.
    if (next > 0 && !family_.cuts()) {
      redecode(h, h.n());
      return false;
    }
    seq_rm(h.seq, next, -1);
  }
  if (intact(h)) return true;
  redecode(h, h.n());  // the batch's window cells took the place of ones h needs
  return false;
}

bool KvManager::intact(const KvHandle &h) const {
  return family_.plain() || family_.holds(llama_get_memory(ctx_), h.seq, 0, h.pos(h.n()));
}

void KvManager::redecode(KvHandle &h, std::uint32_t again) {
  ++counters_.redecodes;
  counters_.redecode_tokens += again;
  clear(h);
  reindex(h, 0);
}

bool KvManager::erase_shift(KvHandle &h, std::uint32_t p0, std::uint32_t p1) {
  // M-RoPE models cannot shift (llama.cpp's seq_add aborts on them).
  if (h.seq < 0 || p0 >= p1 || p1 > h.n() || !can_shift_ || !h.jumps.empty()) return false;
  evict_sharing(std::span(h.cells).subspan(p1));  // the cache gives way to a shift
  // Another sequence sees these cells too (a fork, a shared prefix): a shift
  // would move them for it as well, so h takes copies of its own first.
  // Its result then never depends on who else holds its cells.
  const auto tail = std::span(h.cells).subspan(p1);
  if (std::any_of(tail.begin(), tail.end(), [&](std::uint32_t c) { return ledger_.shared(c); }) &&
      !unshare_tail(h, p1)) {
    return false;
  }
  seq_rm(h.seq, static_cast<llama_pos>(p0), static_cast<llama_pos>(p1));
  llama_memory_seq_add(llama_get_memory(ctx_), h.seq, static_cast<llama_pos>(p1), -1,
                       -static_cast<llama_pos>(p1 - p0));
  ledger_.release(std::span(h.cells).subspan(p0, p1 - p0), h.live);
  h.cells.erase(h.cells.begin() + p0, h.cells.begin() + p1);
  h.tokens.erase(h.tokens.begin() + p0, h.tokens.begin() + p1);
  // Shifted KV is not what a fresh decode gives: not shared from p0 on.
  if (h.exact > p0) {
    h.exact = p0;
    reindex(h, p0);
  }
  if (!intact(h)) redecode(h, h.n());  // the caller queues it again
  return true;
}

bool KvManager::unshare_tail(KvHandle &h, std::uint32_t from) {
  const std::uint32_t n = h.n() - from;
  // Both copies exist for a moment: the new cells must be free now.
  if (scratch_seq_ < 0 || n == 0 || !make_room(n)) return n == 0;
  auto *mem = llama_get_memory(ctx_);
  const auto p = static_cast<llama_pos>(from);
  std::vector<std::uint8_t> bytes;
  llama_memory_seq_cp(mem, h.seq, scratch_seq_, p, -1);
  const bool ok = copy_out(scratch_seq_, bytes);
  seq_rm(scratch_seq_, -1, -1);
  // Loading a sequence's data makes new cells: the scratch holds the copies.
  if (!ok || load_into(scratch_seq_, bytes, h.n(), h.jumps, from) != Loaded::ok) return false;
  // A window's data holds the cells its window sees, not the whole tail: h
  // would have a gap where the tail's older ones were.
  if (!family_.plain() && llama_memory_seq_pos_min(mem, scratch_seq_) != p) {
    seq_rm(scratch_seq_, -1, -1);
    return false;
  }
  seq_rm(h.seq, p, -1);
  llama_memory_seq_cp(mem, scratch_seq_, h.seq, p, -1);
  seq_rm(scratch_seq_, -1, -1);
  ledger_.release(std::span(h.cells).subspan(from), h.live);
  h.cells.resize(from);
  ledger_.alloc(n, h.cells, h.live);
  return true;
}

std::uint32_t KvManager::share_prefix(const KvHandle &src, KvHandle &dst, std::uint32_t n) {
  n = jump_floor(src.jumps, n);  // the caller floors too: an image is shared whole
  // A recurrent state is of the source's last position only.
  if (n == 0 || (!family_.cuts() && n != src.n())) return 0;
  truncate(dst, 0);  // whatever dst held goes: it starts with src's prefix
  auto *mem = llama_get_memory(ctx_);
  llama_memory_seq_cp(mem, src.seq, dst.seq, 0, src.pos(n));
  if (!family_.plain() && !family_.holds(mem, dst.seq, 0, src.pos(n))) {
    seq_rm(dst.seq, -1, -1);
    return 0;
  }
  dst.jumps = jumps_before(src.jumps, n);
  const auto shared = std::span(src.cells).first(n);
  ledger_.retain(shared, dst.live);
  dst.cells.assign(shared.begin(), shared.end());
  dst.tokens.assign(src.tokens.begin(), src.tokens.begin() + n);
  dst.exact = std::min(src.exact, n);
  dst.salt = src.salt;
  dst.checkpoints = src.checkpoints;  // a recurrent fork is whole (above): its states are dst's
  reindex(dst, 0);
  return n;
}

void KvManager::set_parked(KvHandle &h, std::shared_ptr<ParkedKv> blob, std::uint32_t n) {
  h.parked = std::move(blob);
  h.parked_n = h.parked ? n : 0;
  h.where = h.parked ? residency_of(*h.parked) : Residency::recompute;
}

void KvManager::to_recompute(KvHandle &h, bool has_history) {
  h.jumps.clear();  // decoded again, image by image
  h.exact = 0;      // nothing decoded: what it will decode is exact again from 0
  h.parked.reset();
  h.parked_n = 0;
  h.where = has_history ? Residency::recompute : Residency::resident;
}

bool KvManager::copy_out(int seq, std::vector<std::uint8_t> &out) const {
  const std::size_t size = llama_state_seq_get_size_ext(ctx_, seq, 0);
  out.resize(size);
  const bool ok = size > 0 && llama_state_seq_get_data_ext(ctx_, out.data(), size, seq, 0) == size && failure().empty();
  if (ok && !v_trans_) v_trans_ = v_transposed(out);
  return ok;
}

std::shared_ptr<ParkedKv> KvManager::copy_to_store(int seq, std::uint64_t conv_id) {
  // A recycled buffer: no zero fill, no page faults.
  std::vector<std::uint8_t> bytes = store_.buffer(llama_state_seq_get_size_ext(ctx_, seq, 0));
  if (!copy_out(seq, bytes)) {
    store_.recycle(std::move(bytes));
    return nullptr;
  }
  return store_.put(std::move(bytes), conv_id);
}

bool KvManager::park_copy(const KvHandle &src, KvHandle &dst, std::uint64_t conv_id) {
  if (src.seq < 0 || src.cells.empty()) return false;
  auto blob = copy_to_store(src.seq, conv_id);
  if (!blob) return false;
  set_parked(dst, std::move(blob), src.n());
  dst.jumps = src.jumps;
  return true;
}

void KvManager::share_parked(const KvHandle &src, KvHandle &dst) {
  dst.parked = src.parked;
  dst.parked_n = src.parked_n;
  dst.where = src.where;
  dst.jumps = src.jumps;
}

bool KvManager::park(KvHandle &h, std::uint64_t conv_id) {
  if (h.seq < 0 || h.cells.empty()) return false;
  const auto t0 = Clock::now();
  auto blob = copy_to_store(h.seq, conv_id);
  return finish_park(h, std::move(blob), since(t0));
}

bool KvManager::finish_park(KvHandle &h, std::shared_ptr<ParkedKv> blob, double seconds) {
  counters_.park_s += seconds;
  if (!blob && !recompute_) return false;
  const std::uint32_t n = h.n();
  const std::uint32_t exact = h.exact;
  std::vector<PosJump> jumps = std::move(h.jumps);
  release(h);
  set_parked(h, std::move(blob), n);
  h.exact = h.parked ? exact : 0;
  if (h.parked) h.jumps = std::move(jumps);  // the parked data's positions
  ++counters_.parks;
  return true;
}

KvManager::Loaded KvManager::load_into(int seq, std::span<const std::uint8_t> bytes, std::uint32_t n,
                                       std::span<const PosJump> jumps, std::uint32_t from) {
  auto *mem = llama_get_memory(ctx_);
  std::vector<std::uint8_t> flipped;
  bytes = in_v_layout(bytes, v_trans_, flipped);
  const llama_pos first = pos_at(jumps, from);
  bool ok = !bytes.empty() && n > from &&
            llama_state_seq_set_data_ext(ctx_, bytes.data(), bytes.size(), seq, 0) != 0 &&
            llama_memory_seq_pos_max(mem, seq) >= pos_at(jumps, n - 1);
  if (ok && family_.plain()) ok = llama_memory_seq_pos_min(mem, seq) == first;
  // The data may hold more positions (rewound while parked): keep n. Not
  // when n ends inside an M-RoPE image (part of it decoded): data taken
  // then holds exactly n, as cuts fall on an image's edges. Nor for a
  // recurrent state, which is of its last position only (holds() refuses).
  bool cut = false;
  if (ok && family_.cuts() && jump_floor(jumps, n) == n && llama_memory_seq_pos_max(mem, seq) >= pos_at(jumps, n)) {
    seq_rm(seq, pos_at(jumps, n), -1);
    cut = true;
  }
  Loaded out = ok ? Loaded::ok : Loaded::refused;
  if (ok && !family_.plain() && !family_.holds(mem, seq, first, pos_at(jumps, n))) out = cut ? Loaded::stale : Loaded::refused;
  if (out != Loaded::ok) seq_rm(seq, -1, -1);
  return out;
}

KvManager::Restore KvManager::restore(KvHandle &h, std::span<const Token> history, std::uint64_t conv_id) {
  if (h.where == Residency::resident || h.where == Residency::recompute) {
    return acquire_slot(h) ? Restore::done : Restore::no_room;  // nothing to copy in
  }
  const int seq = reserve_restore(h);
  if (seq < 0) return Restore::no_room;
  const auto t0 = Clock::now();
  std::string why;
  const auto n = static_cast<std::uint32_t>(history.size());
  const bool ok = load_parked(seq, *h.parked, n, h.jumps, why);
  return finish_restore(h, seq, ok, history, why, since(t0), conv_id);
}

int KvManager::reserve_restore(const KvHandle &h) {
  if (slots_free() == 0 || cells_free() < h.parked_n) return -1;
  // Its slot is held by nobody until finish_restore hands it to h.
  const int seq = take_seq(nullptr);
  if (seq >= 0 && !make_room(h.parked_n)) {
    free_seq(seq);
    return -1;
  }
  return seq;
}

bool KvManager::load_parked(int seq, const ParkedKv &blob, std::uint32_t n, std::span<const PosJump> jumps,
                            std::string &why) {
  try {
    // RAM: straight from the blob; disk: read into a buffer first.
    std::vector<std::uint8_t> read;
    std::span<const std::uint8_t> bytes = blob.ram();
    if (blob.tier() != Tier::ram) bytes = read = blob.bytes();
    const Loaded r = load_into(seq, bytes, n, jumps);
    if (r == Loaded::ok) return true;
    if (r == Loaded::refused) why = "llama.cpp refused the KV data";  // stale: no news, decoded again
  } catch (const Error &e) {
    why = e.what();
  }
  return false;
}

KvManager::Restore KvManager::finish_restore(KvHandle &h, int seq, bool ok, std::span<const Token> history,
                                             const std::string &why, double seconds, std::uint64_t conv_id) {
  counters_.restore_s += seconds;
  const auto n = static_cast<std::uint32_t>(history.size());
  if (!ok) {
    // Nothing is lost: the tokens are still there.
    free_seq(seq);
    if (!why.empty()) {
      log_warning(fmt::format("restoring conversation {} failed ({}); re-decoding it from its tokens", conv_id, why));
    }
    to_recompute(h, true);
    return Restore::recompute;
  }
  h.seq = seq;
  holders_[seq] = &h;
  ledger_.alloc(n, h.cells, h.live);
  h.tokens.assign(history.begin(), history.end());
  h.exact = std::min(h.exact, n);
  trim_jumps(h.jumps, n);
  reindex(h, 0);
  h.parked.reset();
  h.parked_n = 0;
  h.where = Residency::resident;
  ++counters_.restores;
  return Restore::done;
}

void KvManager::move(KvHandle &dst, KvHandle &&src) {
  dst = std::move(src);
  if (dst.seq >= 0) holders_[dst.seq] = &dst;
  src = KvHandle{};
}

void KvManager::verify(const KvHandle &h) const {
  if (h.seq < 0) return;
  if (holders_[h.seq] != &h || h.tokens.size() != h.cells.size() || h.exact > h.n()) {
    fail(Errc::backend, fmt::format("KV handle of sequence {} out of step with its manager ({}; {} tokens, {} cells, "
                                    "{} exact)",
                                    h.seq, holders_[h.seq] == &h ? "held by it" : "held by another", h.tokens.size(),
                                    h.cells.size(), h.exact));
  }
  auto *mem = llama_get_memory(ctx_);
  const llama_pos lo = llama_memory_seq_pos_min(mem, h.seq);
  const llama_pos hi = llama_memory_seq_pos_max(mem, h.seq);
  // An M-RoPE image's cells share one position: plain attention checks the ends.
  const bool ok = h.cells.empty()   ? hi == -1
                  : family_.plain() ? lo == 0 && hi == h.pos(h.n() - 1)
                                    : family_.holds(mem, h.seq, 0, h.pos(h.n()));
  if (!ok) {
    fail(Errc::backend, fmt::format("KV ledger out of step with llama.cpp: sequence {} holds positions [{}, {}], the "
                                    "ledger {} cells ending at position {} ({} M-RoPE images)",
                                    h.seq, lo, hi, h.n(), h.n() > 0 ? h.pos(h.n() - 1) : -1, h.jumps.size()));
  }
}

}  // namespace weft::detail
