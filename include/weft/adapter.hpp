// weft/adapter.hpp — LoRA adapters and control vectors, per conversation.
//
// An Adapter is loaded once per model (Model::load_adapter) and used by any
// number of conversations, each with its own set and scales
// (Conversation::set_adapters). A step decodes conversations of different
// sets in separate llama_decode calls, switching the context's adapters
// between them (docs/EXECUTOR.md, "Adapters").
//
// Ownership: Adapter is a cheap, copyable handle to an immutable,
// reference-counted adapter. It keeps its model's weights alive: an adapter
// is never used after its model is gone, whatever order handles are dropped
// in. A default-constructed handle is empty; using it throws
// Errc::invalid_argument.
// Thread-safety: every const method may be called from any thread at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "weft/export.hpp"

namespace weft {

enum class AdapterKind {
  lora,            // low-rank deltas to weight matrices (GGUF, adapter.type "lora")
  control_vector,  // a direction added to each layer's output (llama.cpp's cvec GGUF)
};

WEFT_API const char *adapter_kind_name(AdapterKind kind) noexcept;

class WEFT_API Adapter {
 public:
  Adapter() = default;

  // Throws Errc::invalid_argument on an empty handle.
  AdapterKind kind() const;
  // The file it was loaded from.
  const std::string &path() const;
  // general.name when the file has one, else the file name.
  const std::string &name() const;
  // 64-bit identity of the file's contents (as Model::fingerprint): state
  // files name adapters by it, so a conversation saved under an adapter
  // loads under any load of the same file.
  std::uint64_t fingerprint() const;
  // Control vectors: the highest layer that has a direction (layers run
  // 1..n_layer-1; layer 0 never has one, as in llama.cpp). 0 for LoRA.
  std::int32_t n_layers() const;
  explicit operator bool() const noexcept { return impl_ != nullptr; }

  struct Impl;
  // For weft's own internals; not part of the stable API.
  const std::shared_ptr<const Impl> &impl() const noexcept { return impl_; }
  explicit Adapter(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Impl> impl_;
};

// One adapter of a conversation's set, with how strongly it applies.
struct AdapterUse {
  // Required; must be loaded for the executor's model (the same Model).
  Adapter adapter;
  // Finite. LoRA: the scale llama.cpp multiplies the adapter's delta by
  // (alpha / rank applied on top, as llama.cpp does); control vector: the
  // direction's multiplier. 0 is as if absent. Default 1.
  float scale = 1.0f;
  // Control vectors only: the layers it is added to, both inclusive, within
  // [1, n_layer - 1]; -1 = from layer 1 / to the last layer. Must stay -1
  // for LoRA. Default -1, -1 (every layer).
  std::int32_t layer_start = -1;
  std::int32_t layer_end = -1;
};

}  // namespace weft
