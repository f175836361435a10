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
// Prefix reuse (prefix_cache.cpp): every sequence's exact prefix is in a
// PrefixIndex; a conversation whose input continues tokens another sequence
// holds shares those cells (llama_memory_seq_cp) instead of decoding them.
// Cells a conversation lets go of (dispose, park, rewind) stay as a prefix
// cache entry — a sequence slot no conversation owns — least recently used
// first out, whenever real work needs a slot or cells, so cells_free() and
// slots_free() count them as free.
//
// Thread-safety: none of its own. The executor calls the bookkeeping
// (slots, ledger counts) under its state lock, and the operations that reach
// llama.cpp only at a step boundary (no llama_decode running).
#pragma once

#include <cstdint>
#include <list>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_family.hpp"
#include "kv/kv_ledger.hpp"
#include "kv/kv_positions.hpp"
#include "kv/prefix_index.hpp"
#include "kv/spill_store.hpp"
#include "weft/conversation.hpp"

struct llama_context;

namespace weft::detail {

// A recurrent or hybrid model's state after position n - 1 (its recurrent
// part only: llama.cpp's LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY), so that a cut
// at or after n decodes from n instead of from the start.
struct StateCheckpoint {
  std::uint32_t n = 0;
  std::shared_ptr<const std::vector<std::uint8_t>> state;  // shared by forks
  // The logits of position n - 1: a conversation cut back to n needs them
  // and gets them without decoding its last token again.
  std::shared_ptr<const std::vector<float>> logits;
};

struct KvHandle {
  int seq = -1;                      // llama.cpp sequence slot; -1 = none
  std::vector<std::uint32_t> cells;  // ledger id per position in the cache: 0..n-1
  std::vector<Token> tokens;         // the token at each of those positions
  // M-RoPE images among those positions (or, parked, among the parked
  // data's): where indices and llama.cpp's positions part (kv_positions.hpp).
  std::vector<PosJump> jumps;
  // Leading positions whose KV is what decoding tokens[0, exact) from
  // position 0 gives (a context shift ends it): what it may share. Kept
  // while parked.
  std::uint32_t exact = 0;
  // The adapter setting (AdapterConfig::key; 0 = none) those exact
  // positions were decoded under: only the same setting shares them.
  std::uint64_t salt = 0;
  bool live = true;  // false: a prefix cache entry, reclaimable
  // Where its KV data is. Parked (ram/disk): not in the cache; `parked` holds
  // the KV of its first `parked_n` positions. Recompute: tokens only.
  Residency where = Residency::resident;
  std::shared_ptr<ParkedKv> parked;
  std::uint32_t parked_n = 0;
  // Recurrent models only: the latest states kept (oldest first), resident
  // ones only (not saved, parked or loaded).
  std::vector<StateCheckpoint> checkpoints;

  std::uint32_t n() const noexcept { return static_cast<std::uint32_t>(cells.size()); }
  // llama.cpp's position of cell i (i == n(): of the next one).
  std::int32_t pos(std::uint32_t i) const { return pos_at(jumps, i); }
  bool has_slot() const noexcept { return seq >= 0; }
};

// Parks, restores and their cost, for ExecutorStats.
struct KvCounters {
  std::uint64_t parks = 0, restores = 0, recomputes = 0;
  double park_s = 0, restore_s = 0;
  // Prefix reuse: tokens shared instead of decoded; lookups that found a
  // prefix (hits, of which from the prefix cache) or none (misses);
  // cache entries evicted.
  std::uint64_t reused_tokens = 0, prefix_hits = 0, prefix_cache_hits = 0, prefix_misses = 0,
                prefix_evictions = 0;
  // Sequences dropped to be decoded again from their start (or from a
  // checkpoint), as the model's memory could not be cut where asked
  // (KvFamily), and the positions that are decoded again.
  std::uint64_t redecodes = 0, redecode_tokens = 0;
};

class KvManager {
 public:
  // prefix_cache_cells: most reclaimable cells the prefix cache keeps; 0
  // turns prefix reuse off altogether.
  // scratch_seq: a sequence id beyond n_seq_max the context has for the
  // manager's own use (partial exports), or -1.
  KvManager(llama_context *ctx, std::uint32_t n_seq_max, const SpillConfig &spill, bool recompute,
            std::uint32_t prefix_cache_cells = 0, int scratch_seq = -1);
  ~KvManager();
  KvManager(const KvManager &) = delete;
  KvManager &operator=(const KvManager &) = delete;

  // Cells and slots; the prefix cache's count as free (taken back on demand).
  std::uint32_t cells_free() const noexcept { return ledger_.free() + ledger_.reclaimable(); }
  std::uint32_t cells_used() const noexcept { return ledger_.used() - ledger_.reclaimable(); }
  // Every cell llama.cpp holds, the prefix cache's included: what attention
  // spans without flash attention.
  std::uint32_t cells_held() const noexcept { return ledger_.used(); }
  std::uint32_t slots_free() const noexcept { return static_cast<std::uint32_t>(free_seqs_.size() + cache_.size()); }
  bool can_shift() const noexcept { return can_shift_; }
  const KvFamily &family() const noexcept { return family_; }
  // Whether any tier can take parked data (or recompute is allowed), i.e.
  // whether a slot can ever be freed by parking.
  bool spill_on() const noexcept;

  // Takes a free slot for h (no KV data moves), evicting a prefix cache
  // entry if need be (a llama.cpp call: at a step boundary only). False
  // when none is free.
  bool acquire_slot(KvHandle &h);
  // A slot nobody holds, without evicting: no llama.cpp call, so safe off
  // the boundary (under the state lock while a step decodes).
  bool acquire_unused_slot(KvHandle &h);
  // Evicts prefix cache entries until llama.cpp has `n` free cells (before
  // a decode). False when it cannot.
  bool make_room(std::uint32_t n);
  // Drops all of h's KV data and gives its slot back; h becomes empty and
  // resident (nothing decoded).
  void release(KvHandle &h);
  // `tokens` were decoded into h's next positions, under adapter setting
  // `salt`: account for them. grid_n_pos: when they begin an M-RoPE image
  // (its cells all at one position), the positions it advances, and
  // grid_cells its cells (0: as many as `tokens`; more: the image goes in
  // pieces, the rest committed later with grid_n_pos 0); 0: one per token.
  void commit(KvHandle &h, std::span<const Token> tokens, std::uint64_t salt = 0, std::uint32_t grid_n_pos = 0,
              std::uint32_t grid_cells = 0);
  // `n` positions were decoded for input that has changed since: accounted
  // for (until reconcile takes them out), never shared.
  void commit_stale(KvHandle &h, std::uint32_t n, std::uint32_t grid_n_pos = 0, std::uint32_t grid_cells = 0);
  // Removes positions [pos, end) of h from the cache (keeps the slot). A pos
  // inside an M-RoPE image removes the whole image (its cells share one
  // position), and a cut the model's memory cannot make exactly (a
  // recurrent state; a window whose cells llama.cpp reused) removes all:
  // h.n() may end below pos, and the caller queues the rest again.
  void truncate(KvHandle &h, std::uint32_t pos);
  // After a failed or aborted llama_decode: removes whatever llama.cpp kept
  // of h's sequence beyond what is accounted for. False when that cannot be
  // done exactly (a recurrent state moved on): h then holds nothing and its
  // conversation must be queued again from its start. Not for h ending
  // inside an M-RoPE image (what the decode left cannot be told from the
  // image's cells): truncate to the image's start instead.
  bool roll_back(KvHandle &h);
  // A recurrent model's state of sequence `seq` as it is now, with the
  // logits of its last position (empty `state` on failure or for other
  // families). Touches only llama.cpp's data of `seq`: callable with the
  // state lock released, by the stepping thread, between decodes.
  StateCheckpoint copy_checkpoint(int seq, std::span<const float> logits) const;
  // h's input decoded up to now (a prompt's end), `c` copied just after:
  // kept, so that a later cut at or after this position (a reply rewound,
  // a fork of the prompt) decodes from here (the latest kMaxCheckpoints).
  void checkpoint(KvHandle &h, const StateCheckpoint &c);
  static constexpr std::size_t kMaxCheckpoints = 2;
  // The logits a checkpoint of h kept for `history`'s last position, when h
  // (resident, holding `history` or more) has one there; else null.
  const std::vector<float> *checkpoint_logits(const KvHandle &h, std::span<const Token> history) const;
  // Removes positions [p0, p1) and shifts the rest down, when the cache can
  // shift; moved cells another sequence shares are copied for h first
  // (unshare_tail). False (nothing changed) when it cannot shift or copy.
  bool erase_shift(KvHandle &h, std::uint32_t p0, std::uint32_t p1);
  // dst (a slot, nothing decoded) shares src's first n positions: a copy of
  // cell references, not of data. Returns the positions shared: n, or 0
  // where the model's memory cannot share them (a recurrent state shares
  // only the whole sequence; a window whose cells llama.cpp reused).
  std::uint32_t share_prefix(const KvHandle &src, KvHandle &dst, std::uint32_t n);

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
  Restore restore(KvHandle &h, std::span<const Token> history, std::uint64_t conv_id);
  // The same in three parts (as park): reserve a slot (under the lock; -1:
  // no room), load the parked data into it (no lock; `why` says why not),
  // finish (under the lock).
  int reserve_restore(const KvHandle &h);
  // `jumps`: h's (a copy: read without the lock). `why` is left empty when
  // the data is good but was rewound past what it can go on from.
  bool load_parked(int seq, const ParkedKv &blob, std::uint32_t n, std::span<const PosJump> jumps, std::string &why);
  // `history` holds at least n tokens: those of the restored positions.
  Restore finish_restore(KvHandle &h, int seq, bool ok, std::span<const Token> history, const std::string &why,
                         double seconds, std::uint64_t conv_id);
  // dst (no slot) starts parked with a copy of src's KV data, for a fork
  // that gets no slot; false (dst unchanged) when no tier takes it.
  bool park_copy(const KvHandle &src, KvHandle &dst, std::uint64_t conv_id);
  // dst (no slot) shares src's parked data: stored once.
  void share_parked(const KvHandle &src, KvHandle &dst);

  // `bytes` (a sequence's data holding exactly h's next n positions, made by
  // another context of the same model and cache types) go into the cache
  // after h's cells, through the scratch sequence; commit() accounts for
  // them as after a decode. False (nothing changed) without a scratch
  // sequence, room, or when llama.cpp refuses the data.
  bool append_data(const KvHandle &h, std::span<const std::uint8_t> bytes, std::uint32_t n);
  void set_v_transposed(bool transposed) { v_trans_ = transposed; }
  // The KV data of h's sequence (or its parked blob), for saving.
  std::vector<std::uint8_t> export_kv(const KvHandle &h) const;
  // Only positions [from, n) of resident h (from > 0), through the scratch
  // sequence; empty when there is none.
  std::vector<std::uint8_t> export_tail(const KvHandle &h, std::uint32_t from);
  // Loads `bytes` (the KV of `history`, `exact` of its positions exact)
  // into h: resident when a slot and the cells are free, else parked in the
  // spill store (or recompute). Positions another sequence holds already are
  // shared instead of copied. Throws Errc::corrupt when llama.cpp refuses
  // the data.
  // With from > 0, `bytes` hold positions [from, n) only, and the first
  // `from` must be shared from a sequence that holds them exactly: without
  // one (or without room now) h becomes recompute and false is returned.
  // `salt`: the adapter setting its exact positions were decoded under;
  // `jumps`: the history's M-RoPE images.
  bool import_kv(KvHandle &h, std::vector<std::uint8_t> &&bytes, std::span<const Token> history, std::uint32_t exact,
                 std::uint32_t from, std::uint64_t conv_id, std::uint64_t salt = 0,
                 std::span<const PosJump> jumps = {});
  // src's handle moves to dst (dst empty).
  void move(KvHandle &dst, KvHandle &&src);

  // Prefix reuse (prefix_cache.cpp). h has a slot and holds want[0, h.n());
  // shares the longest prefix of want[0, limit) that another sequence holds
  // exactly, beyond h.n(), decoded under adapter setting `salt` (as h's
  // own exact positions must be). Returns the positions it gained.
  std::uint32_t reuse(KvHandle &h, std::span<const Token> want, std::uint32_t limit, std::uint64_t salt = 0);
  bool reuse_on() const noexcept { return cache_budget_ > 0; }
  // Cells only the prefix cache holds; entries; blocks in the index.
  std::uint32_t cache_cells() const noexcept { return ledger_.reclaimable(); }
  std::size_t cache_entries() const noexcept { return cache_.size(); }
  std::size_t index_blocks() const {
    sync_index();
    return index_.size();
  }
  // Positions held by live handles beyond the cells they use: what sharing saves.
  std::uint64_t cells_saved() const noexcept;

  // Checks the ledger against llama.cpp's view of h's sequence; throws
  // Errc::backend on a mismatch. Debug and sanitizer builds call it after
  // every step.
  void verify(const KvHandle &h) const;

  const SpillStore &store() const noexcept { return store_; }
  // Why KV data read from the cache can no longer be trusted (an RPC peer
  // holding layers failed: reads come back as zeros); empty while it can.
  // copy_out refuses while it says so, so no state or spill holds zeros.
  void set_failure_probe(std::function<std::string()> probe) { failure_ = std::move(probe); }

  const KvCounters &counters() const noexcept { return counters_; }
  void count_recompute() noexcept { ++counters_.recomputes; }

 private:
  // What loading KV data into a sequence came to: `stale` when the data was
  // good but, cut to n positions (rewound since it was taken), no longer
  // holds what the next position needs (a window's cells, a state's position).
  enum class Loaded { ok, refused, stale };
  Loaded load_into(int seq, std::span<const std::uint8_t> bytes, std::uint32_t n, std::span<const PosJump> jumps,
                   std::uint32_t from = 0);
  // The one way KV data leaves the cache: seq's state into `out` (resized).
  bool copy_out(int seq, std::vector<std::uint8_t> &out) const;
  std::string failure() const { return failure_ ? failure_() : std::string(); }
  std::function<std::string()> failure_;

  void set_parked(KvHandle &h, std::shared_ptr<ParkedKv> blob, std::uint32_t n);
  // Drops all of h's cells, keeping its slot, the first `again` of them to
  // be decoded again (counted).
  void redecode(KvHandle &h, std::uint32_t again);
  // A recurrent h cut at pos from its latest checkpoint at or before pos
  // (kv_checkpoint.cpp). False when it has none or llama.cpp refused it.
  bool cut_at_checkpoint(KvHandle &h, std::uint32_t pos);
  // Whether h's sequence holds its n() positions as the family needs.
  bool intact(const KvHandle &h) const;
  void seq_rm(int seq, std::int32_t p0, std::int32_t p1);
  int take_seq(KvHandle *holder);
  void free_seq(int seq);
  void reindex(const KvHandle &h, std::uint32_t from);
  void sync_index() const;  // before every lookup
  void drop(KvHandle &h);  // release without keeping anything
  void clear(KvHandle &h);  // all of h's cells and what it knows of them go; its slot stays
  // Gives h cells of its own, with the same data, for positions [from, n)
  // (copy-on-write through the scratch sequence). False: no scratch or no
  // room (nothing changed).
  bool unshare_tail(KvHandle &h, std::uint32_t from);

  // The prefix cache (prefix_cache.cpp).
  struct CacheEntry {
    KvHandle kv;  // live = false; the list's order is the LRU order
  };
  struct Donor {
    const KvHandle *h = nullptr;
    std::uint32_t n = 0;
  };
  Donor find_donor(std::span<const Token> want, int self, std::uint64_t salt) const;
  bool covered(const KvHandle &h, std::uint32_t n) const;
  // h (live, about to let go of its cells) leaves them to a cache entry
  // when they are worth keeping; true when it did (h is then empty).
  bool retire(KvHandle &h);
  // Keeps h's positions [pos, exact) as a cache entry before a truncation.
  void keep_tail(const KvHandle &h, std::uint32_t pos);
  void evict(std::list<CacheEntry>::iterator it);
  bool evict_lru();
  void trim_cache();
  void evict_sharing(std::span<const std::uint32_t> cells);

  llama_context *ctx_;
  KvFamily family_;
  bool can_shift_;
  bool recompute_;
  KvLedger ledger_;
  SpillStore store_;
  std::vector<int> free_seqs_;
  KvCounters counters_;
  std::vector<KvHandle *> holders_;  // by seq: who holds it
  // The index follows the handles lazily: index_from_[seq] is the first
  // position of seq's tokens changed since it was last hashed.
  static constexpr std::uint32_t kIndexed = UINT32_MAX;
  mutable PrefixIndex index_;
  mutable std::vector<std::uint32_t> index_from_;
  std::list<CacheEntry> cache_;  // oldest use first
  std::uint32_t cache_budget_;
  int scratch_seq_;
  // Whether this context stores V transposed (flash attention off): set by
  // the executor, else learnt from the first data copied out. KV data of the
  // other layout (saved where the other kernel was chosen) is converted.
  mutable std::optional<bool> v_trans_;
  mutable std::vector<int> scratch_;
};

}  // namespace weft::detail
