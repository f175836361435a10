// KvFamily: what a model's memory can do with a sequence's positions.
//
// Plain attention keeps the cells of every position: any cut, share or
// partial copy is exact. A sliding window (Gemma 3's interleaved layers)
// keeps, in its layers' cache, only the cells the window still sees, once
// llama.cpp reuses the others: a cut or a share is exact only while the
// cells the next position's window needs are there, which holds() checks.
// A recurrent model (Mamba) or a hybrid (LFM2, Jamba: attention beside a
// recurrent state) keeps one state per sequence, of its last position
// only: it cannot be cut inside (the sequence is decoded again from its
// start) nor shared in part.
//
// Thread-safety: immutable after construction; holds() reads llama.cpp's
// memory, so only where the KV manager may call llama.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "weft/model.hpp"

struct llama_model;
struct llama_memory_i;

namespace weft::detail {

class KvFamily {
 public:
  explicit KvFamily(const llama_model *model);

  Model::Memory memory() const noexcept { return memory_; }
  bool plain() const noexcept { return memory_ == Model::Memory::plain; }
  // Whether positions can be removed from a sequence's end (and a prefix
  // copied) without decoding it again.
  bool cuts() const noexcept { return plain() || memory_ == Model::Memory::sliding_window; }
  int window() const noexcept { return n_swa_; }
  // "plain attention", "a sliding window of 16 tokens (gemma3)", "recurrent
  // (mamba)", "hybrid (lfm2)": for messages.
  const std::string &name() const noexcept { return name_; }

  // Whether `seq` holds what decoding position `next` exactly needs, its
  // data starting at position `first` (0 but for partial copies): the
  // positions [first, next) for plain attention; the window's cells before
  // `next` for a sliding window; the state of position next - 1 for a
  // recurrent model.
  bool holds(llama_memory_i *mem, int seq, std::int32_t first, std::int32_t next) const;

 private:
  Model::Memory memory_ = Model::Memory::plain;
  int n_swa_ = 0;
  std::string name_;
};

}  // namespace weft::detail
