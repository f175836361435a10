// The state behind weft::Adapter, and a conversation's adapter setting as
// the executor applies it. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weft/adapter.hpp"
#include "weft/model.hpp"

struct llama_adapter_lora;
struct llama_context;

namespace weft {

struct Adapter::Impl {
  std::shared_ptr<const Model::Impl> model;  // keeps the weights the adapter refers to alive
  AdapterKind kind = AdapterKind::lora;
  std::string path, name;
  std::uint64_t fingerprint = 0;
  llama_adapter_lora *lora = nullptr;  // LoRA: owned, freed before the model
  // Control vector: n_embd floats per layer 1..n_layer-1 (layer 1 at [0]),
  // zero where the file has no direction.
  std::vector<float> cvec;
  std::int32_t n_embd = 0, n_layers = 0;

  Impl() = default;
  Impl(const Impl &) = delete;
  Impl &operator=(const Impl &) = delete;
  ~Impl();
};

namespace detail {

// One conversation's adapter setting, immutable once made and shared by
// every conversation (and history span) that uses it.
struct AdapterConfig {
  std::vector<AdapterUse> uses;  // as set (validated), for Conversation::adapters()
  // 0 when nothing applies (no adapters, or only zero scales): the base
  // model. Otherwise a hash of what applies, in a canonical order.
  std::uint64_t key = 0;
  // What llama.cpp is given.
  std::vector<llama_adapter_lora *> loras;
  std::vector<float> lora_scales;
  std::vector<float> cvec;  // every control vector, scaled, summed (layer 1 at [0])
  std::int32_t cvec_start = -1, cvec_end = -1;
  std::vector<std::uint64_t> canon;  // (fingerprint, scale, range, kind) words of what applies, sorted
};
using AdapterConfigPtr = std::shared_ptr<const AdapterConfig>;

// Whether two settings decode alike (null = the base model).
bool same_adapters(const AdapterConfig *a, const AdapterConfig *b) noexcept;
inline std::uint64_t adapter_key(const AdapterConfig *c) noexcept { return c == nullptr ? 0 : c->key; }

// Validates `uses` for `model` and builds the setting; null when the list is
// empty. Throws Errc::invalid_argument naming the bad value (empty handle,
// another model's adapter, a scale that is not finite, a layer range
// outside [1, n_layer - 1] or given for a LoRA, an adapter listed twice).
AdapterConfigPtr make_adapter_config(const Model::Impl &model, std::span<const AdapterUse> uses);

// Makes `ctx`, which decodes under `prev`, decode under `cfg` (null = no
// adapters). Each change costs llama.cpp a graph re-reserve in the next
// decode: call it only when !same_adapters(prev, cfg). Throws Errc::backend
// when llama.cpp refuses the control vector.
void apply_adapter_config(llama_context *ctx, const Model::Impl &model, const AdapterConfig *cfg,
                          const AdapterConfig *prev);

// The adapters loaded for `model` with this fingerprint (the first that is
// still alive), for loading states; empty when none.
Adapter find_adapter(const Model::Impl &model, std::uint64_t fingerprint);

}  // namespace detail
}  // namespace weft
