// ScratchKv: sequence operations on a context that is not the executor's
// cache — the side context that decodes non-causal images
// (exec/media/media_side.cpp) and the attention probe's scratch context
// (exec/attention_probe.cpp). KvManager owns the executor's cache; these
// contexts hold copies for one step or one measurement and are emptied
// after, so they keep no ledger. Here so that every llama_memory_* and
// llama_state_seq_* call of weft is in kv/.
//
// Thread-safety: none; one thread uses a context at a time, with no
// llama_decode running on it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

struct llama_context;

namespace weft::detail {

class ScratchKv {
 public:
  explicit ScratchKv(llama_context *ctx) : ctx_(ctx) {}

  // Empties every sequence.
  void clear();
  // Removes every sequence's positions >= pos.
  void remove_from(std::int32_t pos);
  // Loads KV data (KvManager::export_kv's, or save()'s) into sequence `seq`,
  // which must be empty; false when llama.cpp refuses it or the sequence
  // then does not end right before `next_pos`.
  bool load(int seq, std::span<const std::uint8_t> data, std::int32_t next_pos);
  // Sequence `seq`'s KV data (empty when llama.cpp gives none).
  std::vector<std::uint8_t> save(int seq) const;
  // Drops sequence `seq`'s positions before `from` and returns the data of
  // those left (empty on failure).
  std::vector<std::uint8_t> take_from(int seq, std::int32_t from);

 private:
  llama_context *ctx_;
};

}  // namespace weft::detail
