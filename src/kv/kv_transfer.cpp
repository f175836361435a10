// KvManager's transfers of KV data in and out of a sequence as bytes: a
// conversation's state for save and load, an image's cells made on the side
// context, a tail for a compact snapshot.
#include <llama.h>

#include <fmt/format.h>

#include "core/internal.hpp"
#include "kv/kv_manager.hpp"

namespace weft::detail {

std::vector<std::uint8_t> KvManager::export_kv(const KvHandle &h) const {
  if (h.seq < 0) return h.parked ? h.parked->bytes() : std::vector<std::uint8_t>{};
  std::vector<std::uint8_t> out;
  if (h.cells.empty()) return out;
  if (!copy_out(h.seq, out)) {
    const std::string lost = failure();
    fail(Errc::backend, lost.empty() ? fmt::format("llama.cpp could not copy out the KV data of sequence {}", h.seq)
                                     : fmt::format("cannot copy out the KV data of sequence {}: {}", h.seq, lost));
  }
  return out;
}

bool KvManager::import_kv(KvHandle &h, std::vector<std::uint8_t> &&bytes, std::span<const Token> history,
                          std::uint32_t exact, std::uint32_t from, std::uint64_t conv_id, std::uint64_t salt,
                          std::span<const PosJump> jumps) {
  const auto n = static_cast<std::uint32_t>(history.size());
  if (n == 0) return true;
  if (h.n() > 0) fail(Errc::backend, fmt::format("KV import into sequence {}, which holds {} cells", h.seq, h.n()));
  if (h.seq >= 0) drop(h);  // a slot claimed before the data came (empty): the import takes one of its own
  exact = std::min(exact, n);
  if (slots_free() > 0 && cells_free() >= n) {
    const int seq = take_seq(nullptr);
    make_room(n);  // cannot fail: cells_free() counted what the cache gives back
    // What another sequence holds exactly is shared, not kept twice.
    // (Plain attention only: a window's or a state's cells are not a prefix's.)
    Donor d = reuse_on() && family_.plain() ? find_donor(history.first(std::max(exact, from)), seq, salt) : Donor{};
    d.n = jump_floor(jumps, d.n);  // an image is shared whole or not at all
    if (from > 0 && d.n < from) {
      free_seq(seq);
      to_recompute(h, true);
      return false;
    }
    if (const Loaded r = load_into(seq, bytes, n, jumps, from); r != Loaded::ok) {
      free_seq(seq);
      if (r == Loaded::stale) {  // rewound before the import, past what the data can go on from
        to_recompute(h, true);
        return false;
      }
      fail(Errc::corrupt, fmt::format("llama.cpp refused the KV data of the conversation state ({} bytes for {} "
                                      "tokens): another context type or a damaged file",
                                      bytes.size(), n));
    }
    h.seq = seq;
    holders_[seq] = &h;
    d.n = from > 0 ? from : std::min(d.n, exact);
    if (d.n > 0) {
      if (from == 0) seq_rm(seq, 0, pos_at(jumps, d.n));
      llama_memory_seq_cp(llama_get_memory(ctx_), d.h->seq, seq, 0, pos_at(jumps, d.n));
      h.cells.assign(d.h->cells.begin(), d.h->cells.begin() + d.n);
      ledger_.retain(h.cells, h.live);
      counters_.reused_tokens += d.n;
      ++counters_.prefix_hits;
    }
    ledger_.alloc(n - d.n, h.cells, h.live);
    h.tokens.assign(history.begin(), history.end());
    h.jumps.assign(jumps.begin(), jumps.end());
    h.exact = exact;
    h.salt = salt;
    reindex(h, 0);
    h.where = Residency::resident;
    return true;
  }
  if (from > 0) {
    to_recompute(h, true);  // its data needs a sequence that is not there now
    return false;
  }
  // No room now: parked in RAM (or further), restored when it runs.
  set_parked(h, store_.put(std::move(bytes), conv_id), n);
  h.jumps.assign(jumps.begin(), jumps.end());
  h.exact = exact;
  h.salt = salt;
  return true;
}

bool KvManager::append_data(const KvHandle &h, std::span<const std::uint8_t> bytes, std::uint32_t n) {
  if (scratch_seq_ < 0 || h.seq < 0 || n == 0 || bytes.empty() || !make_room(n)) return false;
  auto *mem = llama_get_memory(ctx_);
  const llama_pos p0 = h.pos(h.n());
  const bool ok = llama_state_seq_set_data_ext(ctx_, bytes.data(), bytes.size(), scratch_seq_, 0) != 0 &&
                  llama_memory_seq_pos_min(mem, scratch_seq_) == p0 &&
                  llama_memory_seq_pos_max(mem, scratch_seq_) == p0 + static_cast<llama_pos>(n) - 1;
  if (ok) llama_memory_seq_cp(mem, scratch_seq_, h.seq, p0, -1);
  seq_rm(scratch_seq_, -1, -1);
  return ok;
}

std::vector<std::uint8_t> KvManager::export_tail(const KvHandle &h, std::uint32_t from) {
  std::vector<std::uint8_t> out;
  // A tail loads only behind a shared prefix, which plain attention alone has.
  if (scratch_seq_ < 0 || h.seq < 0 || from == 0 || from >= h.n() || !family_.plain()) return out;
  llama_memory_seq_cp(llama_get_memory(ctx_), h.seq, scratch_seq_, h.pos(from), -1);
  const bool ok = copy_out(scratch_seq_, out);
  seq_rm(scratch_seq_, -1, -1);
  if (!ok) out.clear();
  return out;
}

}  // namespace weft::detail
