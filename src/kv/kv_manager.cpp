// KvManager: every llama_memory_* and llama_state_seq_* call in weft.
#include "kv/kv_manager.hpp"

#include <llama.h>

#include <fmt/format.h>

#include <chrono>

#include "core/internal.hpp"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Residency residency_of(const ParkedKv &blob) { return blob.tier() == Tier::ram ? Residency::ram : Residency::disk; }

}  // namespace

KvManager::KvManager(llama_context *ctx, std::uint32_t n_seq_max, const SpillConfig &spill, bool recompute)
    : ctx_(ctx),
      can_shift_(llama_memory_can_shift(llama_get_memory(ctx))),
      recompute_(recompute),
      ledger_(llama_n_ctx(ctx)),
      store_(spill) {
  for (int s = static_cast<int>(n_seq_max); s-- > 0;) free_seqs_.push_back(s);
}

bool KvManager::spill_on() const noexcept {
  return recompute_ || store_.config().ram_bytes > 0 || !store_.config().disk_dir.empty();
}

void KvManager::seq_rm(int seq, std::int32_t p0, std::int32_t p1) {
  // Fails only for a partial range of a recurrent model's sequence, which
  // weft never creates: a failure means the ledger is wrong.
  if (!llama_memory_seq_rm(llama_get_memory(ctx_), seq, p0, p1)) {
    fail(Errc::backend, fmt::format("llama.cpp refused to remove positions [{}, {}) of sequence {}", p0, p1, seq));
  }
}

bool KvManager::acquire_slot(KvHandle &h) {
  if (h.seq >= 0) return true;
  if (free_seqs_.empty()) return false;
  h.seq = free_seqs_.back();
  free_seqs_.pop_back();
  return true;
}

void KvManager::release(KvHandle &h) {
  if (h.seq >= 0) {
    seq_rm(h.seq, -1, -1);
    free_seqs_.push_back(h.seq);
    h.seq = -1;
  }
  ledger_.release(h.cells);
  h.cells.clear();
  h.parked.reset();
  h.parked_n = 0;
  h.where = Residency::resident;
}

void KvManager::commit(KvHandle &h, std::uint32_t n) { ledger_.alloc(n, h.cells); }

void KvManager::truncate(KvHandle &h, std::uint32_t pos) {
  if (h.seq < 0 || pos >= h.n()) return;
  seq_rm(h.seq, static_cast<llama_pos>(pos), -1);
  ledger_.release(std::span(h.cells).subspan(pos));
  h.cells.resize(pos);
}

void KvManager::roll_back(const KvHandle &h) {
  if (h.seq < 0) return;
  if (llama_memory_seq_pos_max(llama_get_memory(ctx_), h.seq) >= static_cast<llama_pos>(h.n())) {
    seq_rm(h.seq, static_cast<llama_pos>(h.n()), -1);
  }
}

bool KvManager::erase_shift(KvHandle &h, std::uint32_t p0, std::uint32_t p1) {
  if (h.seq < 0 || p0 >= p1 || p1 > h.n() || !can_shift_) return false;
  const auto tail = std::span(h.cells).subspan(p1);
  for (std::uint32_t cell : tail) {
    if (ledger_.shared(cell)) return false;  // a fork sees these positions too
  }
  seq_rm(h.seq, static_cast<llama_pos>(p0), static_cast<llama_pos>(p1));
  llama_memory_seq_add(llama_get_memory(ctx_), h.seq, static_cast<llama_pos>(p1), -1,
                       -static_cast<llama_pos>(p1 - p0));
  ledger_.release(std::span(h.cells).subspan(p0, p1 - p0));
  h.cells.erase(h.cells.begin() + p0, h.cells.begin() + p1);
  return true;
}

void KvManager::share_prefix(const KvHandle &src, KvHandle &dst, std::uint32_t n) {
  if (n == 0) return;
  truncate(dst, 0);  // whatever dst held goes: it starts with src's prefix
  llama_memory_seq_cp(llama_get_memory(ctx_), src.seq, dst.seq, 0, static_cast<llama_pos>(n));
  const auto shared = std::span(src.cells).first(n);
  ledger_.retain(shared);
  dst.cells.assign(shared.begin(), shared.end());
}

void KvManager::set_parked(KvHandle &h, std::shared_ptr<ParkedKv> blob, std::uint32_t n) {
  h.parked = std::move(blob);
  h.parked_n = h.parked ? n : 0;
  h.where = h.parked ? residency_of(*h.parked) : Residency::recompute;
}

void KvManager::to_recompute(KvHandle &h, bool has_history) {
  h.parked.reset();
  h.parked_n = 0;
  h.where = has_history ? Residency::recompute : Residency::resident;
}

bool KvManager::copy_out(int seq, std::vector<std::uint8_t> &out) const {
  const std::size_t size = llama_state_seq_get_size_ext(ctx_, seq, 0);
  out.resize(size);
  return size > 0 && llama_state_seq_get_data_ext(ctx_, out.data(), size, seq, 0) == size;
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
  return true;
}

void KvManager::share_parked(const KvHandle &src, KvHandle &dst) {
  dst.parked = src.parked;
  dst.parked_n = src.parked_n;
  dst.where = src.where;
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
  release(h);
  set_parked(h, std::move(blob), n);
  ++counters_.parks;
  return true;
}

bool KvManager::load_into(int seq, std::span<const std::uint8_t> bytes, std::uint32_t n) {
  auto *mem = llama_get_memory(ctx_);
  const bool ok = !bytes.empty() && llama_state_seq_set_data_ext(ctx_, bytes.data(), bytes.size(), seq, 0) != 0 &&
                  llama_memory_seq_pos_min(mem, seq) == 0 &&
                  llama_memory_seq_pos_max(mem, seq) >= static_cast<llama_pos>(n) - 1;
  if (!ok) {
    seq_rm(seq, -1, -1);
    return false;
  }
  // The data may hold more positions (rewound while parked): keep n.
  if (llama_memory_seq_pos_max(mem, seq) >= static_cast<llama_pos>(n)) seq_rm(seq, static_cast<llama_pos>(n), -1);
  return true;
}

KvManager::Restore KvManager::restore(KvHandle &h, std::uint32_t n_decoded, std::uint64_t conv_id) {
  if (h.where == Residency::resident || h.where == Residency::recompute) {
    return acquire_slot(h) ? Restore::done : Restore::no_room;  // nothing to copy in
  }
  const int seq = reserve_restore(h);
  if (seq < 0) return Restore::no_room;
  const auto t0 = Clock::now();
  std::string why;
  const bool ok = load_parked(seq, *h.parked, n_decoded, why);
  return finish_restore(h, seq, ok, n_decoded, why, since(t0), conv_id);
}

int KvManager::reserve_restore(const KvHandle &h) {
  if (free_seqs_.empty() || ledger_.free() < h.parked_n) return -1;
  const int seq = free_seqs_.back();
  free_seqs_.pop_back();
  return seq;
}

bool KvManager::load_parked(int seq, const ParkedKv &blob, std::uint32_t n, std::string &why) {
  try {
    // RAM: straight from the blob; disk: read into a buffer first.
    std::vector<std::uint8_t> read;
    std::span<const std::uint8_t> bytes = blob.ram();
    if (blob.tier() != Tier::ram) bytes = read = blob.bytes();
    if (load_into(seq, bytes, n)) return true;
    why = "llama.cpp refused the KV data";
  } catch (const Error &e) {
    why = e.what();
  }
  return false;
}

KvManager::Restore KvManager::finish_restore(KvHandle &h, int seq, bool ok, std::uint32_t n, const std::string &why,
                                             double seconds, std::uint64_t conv_id) {
  counters_.restore_s += seconds;
  if (!ok) {
    // Nothing is lost: the tokens are still there.
    free_seqs_.push_back(seq);
    log_warning(fmt::format("restoring conversation {} failed ({}); re-decoding it from its tokens", conv_id, why));
    to_recompute(h, true);
    return Restore::recompute;
  }
  h.seq = seq;
  ledger_.alloc(n, h.cells);
  h.parked.reset();
  h.parked_n = 0;
  h.where = Residency::resident;
  ++counters_.restores;
  return Restore::done;
}

std::vector<std::uint8_t> KvManager::export_kv(const KvHandle &h) const {
  if (h.seq < 0) return h.parked ? h.parked->bytes() : std::vector<std::uint8_t>{};
  std::vector<std::uint8_t> out;
  if (h.cells.empty()) return out;
  if (!copy_out(h.seq, out)) {
    fail(Errc::backend, fmt::format("llama.cpp could not copy out the KV data of sequence {}", h.seq));
  }
  return out;
}

void KvManager::import_kv(KvHandle &h, std::vector<std::uint8_t> &&bytes, std::uint32_t n, std::uint64_t conv_id) {
  if (n == 0) return;
  if (!free_seqs_.empty() && ledger_.free() >= n) {
    if (!load_into(free_seqs_.back(), bytes, n)) {
      fail(Errc::corrupt, fmt::format("llama.cpp refused the KV data of the conversation state ({} bytes for {} "
                                      "tokens): another context type or a damaged file",
                                      bytes.size(), n));
    }
    h.seq = free_seqs_.back();
    free_seqs_.pop_back();
    ledger_.alloc(n, h.cells);
    h.where = Residency::resident;
    return;
  }
  // No room now: parked in RAM (or further), restored when it runs.
  set_parked(h, store_.put(std::move(bytes), conv_id), n);
}

void KvManager::verify(const KvHandle &h) const {
  if (h.seq < 0) return;
  auto *mem = llama_get_memory(ctx_);
  const llama_pos lo = llama_memory_seq_pos_min(mem, h.seq);
  const llama_pos hi = llama_memory_seq_pos_max(mem, h.seq);
  const bool ok = h.cells.empty() ? hi == -1 : lo == 0 && hi == static_cast<llama_pos>(h.n()) - 1;
  if (!ok) {
    fail(Errc::backend, fmt::format("KV ledger out of step with llama.cpp: sequence {} holds positions [{}, {}], the "
                                    "ledger {} positions",
                                    h.seq, lo, hi, h.n()));
  }
}

}  // namespace weft::detail
