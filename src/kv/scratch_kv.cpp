#include "kv/scratch_kv.hpp"

#include <llama.h>

namespace weft::detail {

void ScratchKv::clear() { llama_memory_seq_rm(llama_get_memory(ctx_), -1, -1, -1); }

void ScratchKv::remove_from(std::int32_t pos) { llama_memory_seq_rm(llama_get_memory(ctx_), -1, pos, -1); }

bool ScratchKv::load(int seq, std::span<const std::uint8_t> data, std::int32_t next_pos) {
  const auto s = static_cast<llama_seq_id>(seq);
  return llama_state_seq_set_data_ext(ctx_, data.data(), data.size(), s, 0) != 0 &&
         llama_memory_seq_pos_max(llama_get_memory(ctx_), s) == next_pos - 1;
}

std::vector<std::uint8_t> ScratchKv::save(int seq) const {
  const auto s = static_cast<llama_seq_id>(seq);
  std::vector<std::uint8_t> out(llama_state_seq_get_size_ext(ctx_, s, 0));
  if (!out.empty() && llama_state_seq_get_data_ext(ctx_, out.data(), out.size(), s, 0) != out.size()) out.clear();
  return out;
}

std::vector<std::uint8_t> ScratchKv::take_from(int seq, std::int32_t from) {
  llama_memory_seq_rm(llama_get_memory(ctx_), static_cast<llama_seq_id>(seq), 0, from);
  return save(seq);
}

}  // namespace weft::detail
