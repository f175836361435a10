// KvManager's recurrent-state checkpoints: llama-server keeps a slot's state
// a few tokens before each prompt's end (--ctx-checkpoints) so that a reply
// rewound or a prompt sent again goes on from there; weft keeps the state at
// each prompt's end, so a rewind into the reply, or a fork of the prompt,
// decodes from the prompt's end instead of from the start.
#include <llama.h>

#include <algorithm>

#include "kv/kv_layout.hpp"
#include "kv/kv_manager.hpp"

namespace weft::detail {

StateCheckpoint KvManager::copy_checkpoint(int seq, std::span<const float> logits) const {
  if (family_.cuts() || seq < 0) return {};
  const std::size_t size = llama_state_seq_get_size_ext(ctx_, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
  auto state = std::make_shared<std::vector<std::uint8_t>>(size);
  if (size == 0 ||
      llama_state_seq_get_data_ext(ctx_, state->data(), size, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) != size) {
    return {};  // none kept: a cut decodes from the start, as without
  }
  return {0, std::move(state), std::make_shared<const std::vector<float>>(logits.begin(), logits.end())};
}

void KvManager::checkpoint(KvHandle &h, const StateCheckpoint &c) {
  if (family_.cuts() || h.seq < 0 || h.n() == 0 || !c.state) return;
  if (!h.checkpoints.empty() && h.checkpoints.back().n == h.n()) return;
  if (h.checkpoints.size() >= kMaxCheckpoints) h.checkpoints.erase(h.checkpoints.begin());
  h.checkpoints.push_back({h.n(), c.state, c.logits});
}

const std::vector<float> *KvManager::checkpoint_logits(const KvHandle &h, std::span<const Token> history) const {
  const auto n = static_cast<std::uint32_t>(history.size());
  if (h.seq < 0 || h.n() < n) return nullptr;
  for (const StateCheckpoint &c : h.checkpoints) {
    if (c.n == n && c.logits && !c.logits->empty() && std::equal(history.begin(), history.end(), h.tokens.begin())) {
      return c.logits.get();
    }
  }
  return nullptr;
}

bool KvManager::cut_at_checkpoint(KvHandle &h, std::uint32_t pos) {
  while (!h.checkpoints.empty() && h.checkpoints.back().n > pos) h.checkpoints.pop_back();
  if (h.checkpoints.empty()) return false;
  const StateCheckpoint &c = h.checkpoints.back();
  const std::uint32_t n = c.n;
  auto *mem = llama_get_memory(ctx_);
  // The recurrent part is replaced whole; a hybrid's attention cells are
  // then cut as plain attention's are (the state no longer refuses it).
  if (llama_state_seq_set_data_ext(ctx_, c.state->data(), c.state->size(), h.seq,
                                   LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) == 0 ||
      llama_memory_seq_pos_max(mem, h.seq) != h.pos(n) - 1 ||
      !llama_memory_seq_rm(mem, h.seq, h.pos(n), -1)) {
    return false;  // redecode() drops whatever is there
  }
  ledger_.release(std::span(h.cells).subspan(n), h.live);
  h.cells.resize(n);
  h.tokens.resize(n);
  trim_jumps(h.jumps, n);
  h.exact = std::min(h.exact, n);
  reindex(h, n);
  ++counters_.redecodes;
  counters_.redecode_tokens += pos - n;
  return true;
}

}  // namespace weft::detail
