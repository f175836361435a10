// KvFamily: a model's memory family, from llama.cpp's own model queries.
#include "kv/kv_family.hpp"

#include <llama.h>

#include <fmt/format.h>

#include <algorithm>

#include "core/model_impl.hpp"

namespace weft::detail {

KvFamily::KvFamily(const llama_model *model) : memory_(memory_of(model)) {
  char arch[64] = "";
  llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch);
  if (memory_ == Model::Memory::sliding_window) n_swa_ = llama_model_n_swa(model);
  name_ = plain()    ? std::string(memory_name(memory_))
          : n_swa_ > 0 ? fmt::format("{} of {} tokens ({})", memory_name(memory_), n_swa_, arch)
                       : fmt::format("{} ({})", memory_name(memory_), arch);
}

bool KvFamily::holds(llama_memory_i *mem, int seq, std::int32_t first, std::int32_t next) const {
  const llama_pos lo = llama_memory_seq_pos_min(mem, seq);
  const llama_pos hi = llama_memory_seq_pos_max(mem, seq);
  if (next <= first) return hi == -1;
  if (hi != next - 1) return false;
  switch (memory_) {
    case Model::Memory::plain: return lo == first;
    // A token at p sees the cells at p - n_swa + 1 .. p (llama.cpp's
    // standard window; a chunked window needs no more), and llama.cpp
    // reuses only cells out of their sequence's window, and then drops the
    // sequence's positions below them: what is there runs without gaps from
    // `lo` on. Weft keeps it so: it copies no cells in behind a gap (reuse,
    // unshare_tail). (For a sliding window llama.cpp reports the window
    // layers' lowest position.)
    case Model::Memory::sliding_window: return lo >= first && lo <= std::max(first, next - n_swa_ + 1);
    // One state, of position hi (a hybrid reports the larger of its two
    // lowest positions, the state's).
    case Model::Memory::recurrent:
    case Model::Memory::hybrid: return first == 0;
  }
  return false;
}

}  // namespace weft::detail
