// KvManager: the one owner of the KV cache.
//
// Every change to llama.cpp's memory goes through it — sequence slots, cell
// accounting (the ledger), forks, truncation, shifts, parking to the spill
// store and restoring, export and import of a sequence's KV data — so that
// nothing else in weft calls llama_memory_* or llama_state_seq_* (the decode
// call aside). Each conversation holds a KvHandle: its slot, the ledger id of
// each decoded position, and where its KV data is when it is not resident.
//
// Modelled on llama.cpp's llama_memory_i: the operations say what they do to
// a sequence, not how. Every llama.cpp result is checked; a refusal is an
// error (Errc::backend) or a `false` the caller can act on, never ignored.
//
// Thread-safety: none of its own. The executor calls the bookkeeping
// (slots, ledger counts) under its state lock, and the operations that reach
// llama.cpp only at a step boundary (no llama_decode running).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_ledger.hpp"
#include "kv/spill_store.hpp"
#include "weft/conversation.hpp"

struct llama_context;

namespace weft::detail {

struct KvHandle {
  int seq = -1;                      // llama.cpp sequence slot; -1 = none
  std::vector<std::uint32_t> cells;  // ledger id per position in the cache: 0..n-1
  // Where its KV data is. Parked (ram/disk): not in the cache; `parked` holds
  // the KV of its first `parked_n` positions. Recompute: tokens only.
  Residency where = Residency::resident;
  std::shared_ptr<ParkedKv> parked;
  std::uint32_t parked_n = 0;

  std::uint32_t n() const noexcept { return static_cast<std::uint32_t>(cells.size()); }
  bool has_slot() const noexcept { return seq >= 0; }
};

// Parks, restores and their cost, for ExecutorStats.
struct KvCounters {
  std::uint64_t parks = 0, restores = 0, recomputes = 0;
  double park_s = 0, restore_s = 0;
};

class KvManager {
 public:
  KvManager(llama_context *ctx, std::uint32_t n_seq_max, const SpillConfig &spill, bool recompute);
  KvManager(const KvManager &) = delete;
  KvManager &operator=(const KvManager &) = delete;

  // Cells and slots.
  std::uint32_t cells_free() const noexcept { return ledger_.free(); }
  std::uint32_t cells_used() const noexcept { return ledger_.used(); }
  std::uint32_t slots_free() const noexcept { return static_cast<std::uint32_t>(free_seqs_.size()); }
  bool can_shift() const noexcept { return can_shift_; }
  // Whether any tier can take parked data (or recompute is allowed), i.e.
  // whether a slot can ever be freed by parking.
  bool spill_on() const noexcept;

  // Takes a free slot for h (no KV data moves). False when none is free.
  bool acquire_slot(KvHandle &h);
  // Drops all of h's KV data and gives its slot back; h becomes empty and
  // resident (nothing decoded).
  void release(KvHandle &h);
  // The next `n` positions were decoded into h's sequence: account for them.
  void commit(KvHandle &h, std::uint32_t n);
  // Removes positions [pos, end) of h from the cache (keeps the slot).
  void truncate(KvHandle &h, std::uint32_t pos);
  // After a failed or aborted llama_decode: removes whatever llama.cpp kept
  // of h's sequence beyond what is accounted for.
  void roll_back(const KvHandle &h);
  // Removes positions [p0, p1) and shifts the rest down, when the cache can
  // shift and no fork shares the moved cells; false (nothing changed) else.
  bool erase_shift(KvHandle &h, std::uint32_t p0, std::uint32_t p1);
  // dst (a slot, nothing decoded) shares src's first n positions: a copy of
  // cell references, not of data.
  void share_prefix(const KvHandle &src, KvHandle &dst, std::uint32_t n);

  // Parking: copies h's KV data into the spill store (or, with recompute on,
  // drops it) and frees its cells and slot. False: no tier took it and
  // recompute is off (nothing changed).
  bool park(KvHandle &h, std::uint64_t conv_id);
  // The same in two parts, so the executor can release its state lock
  // during the copy (milliseconds for a long conversation): copy_to_store
  // touches only llama.cpp's data of `seq` and the spill store (callers
  // hold the step boundary, so nobody else does); finish_park then frees
  // the cells and slot (under the lock).
  std::shared_ptr<ParkedKv> copy_to_store(int seq, std::uint64_t conv_id);
  bool finish_park(KvHandle &h, std::shared_ptr<ParkedKv> blob, double seconds);
  // A parked or recompute handle without KV (tokens only from now on).
  void to_recompute(KvHandle &h, bool has_history);
  // Brings a parked h back into a free slot with its first `n_decoded`
  // positions. False: no slot or not enough cells. When llama.cpp refuses the
  // data, h becomes recompute (the caller re-decodes; `why` says so).
  enum class Restore { done, no_room, recompute };
  Restore restore(KvHandle &h, std::uint32_t n_decoded, std::uint64_t conv_id);
  // The same in three parts (as park): reserve a slot (under the lock; -1:
  // no room), load the parked data into it (no lock; `why` says why not),
  // finish (under the lock).
  int reserve_restore(const KvHandle &h);
  bool load_parked(int seq, const ParkedKv &blob, std::uint32_t n, std::string &why);
  Restore finish_restore(KvHandle &h, int seq, bool ok, std::uint32_t n, const std::string &why, double seconds,
                         std::uint64_t conv_id);
  // dst (no slot) starts parked with a copy of src's KV data, for a fork
  // that gets no slot; false (dst unchanged) when no tier takes it.
  bool park_copy(const KvHandle &src, KvHandle &dst, std::uint64_t conv_id);
  // dst (no slot) shares src's parked data: stored once.
  void share_parked(const KvHandle &src, KvHandle &dst);

  // The KV data of h's sequence (or its parked blob), for saving.
  std::vector<std::uint8_t> export_kv(const KvHandle &h) const;
  // Loads `bytes` (positions 0..n-1) into h: resident when a slot and n
  // cells are free, else parked in the spill store (or recompute). Throws
  // Errc::corrupt when llama.cpp refuses the data.
  void import_kv(KvHandle &h, std::vector<std::uint8_t> &&bytes, std::uint32_t n, std::uint64_t conv_id);

  // Checks the ledger against llama.cpp's view of h's sequence; throws
  // Errc::backend on a mismatch. Debug and sanitizer builds call it after
  // every step.
  void verify(const KvHandle &h) const;

  const SpillStore &store() const noexcept { return store_; }
  const KvCounters &counters() const noexcept { return counters_; }
  void count_recompute() noexcept { ++counters_.recomputes; }

 private:
  bool load_into(int seq, std::span<const std::uint8_t> bytes, std::uint32_t n);
  // The one way KV data leaves the cache: seq's state into `out` (resized).
  bool copy_out(int seq, std::vector<std::uint8_t> &out) const;

  void set_parked(KvHandle &h, std::shared_ptr<ParkedKv> blob, std::uint32_t n);
  void seq_rm(int seq, std::int32_t p0, std::int32_t p1);

  llama_context *ctx_;
  bool can_shift_;
  bool recompute_;
  KvLedger ledger_;
  SpillStore store_;
  std::vector<int> free_seqs_;
  KvCounters counters_;
};

}  // namespace weft::detail
