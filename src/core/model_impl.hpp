// The state behind weft::Model. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "weft/adapter.hpp"
#include "weft/model.hpp"

#include "core/rpc.hpp"

struct llama_model;
struct llama_vocab;

namespace weft {

struct Model::Impl {
  llama_model *model = nullptr;
  const llama_vocab *vocab = nullptr;
  std::string path;
  std::int32_t n_vocab = 0;
  // The vocabulary's end-of-generation tokens, ascending (GenerateParams::ignore_eos masks them).
  std::vector<std::int32_t> eog;
  std::uint64_t fingerprint = 0;
  // Whether any layer runs on a GPU (flash attention's default follows it).
  bool on_gpu = false;
  // Adapters loaded for it (Model::load_adapter), for states that name one
  // by fingerprint. Expired entries are dropped on the next load.
  mutable std::mutex adapters_mu;
  mutable std::vector<std::weak_ptr<const Adapter::Impl>> adapters;
  // RPC peers' relays (ModelParams::rpc); kept past llama_model_free, since
  // freeing the model's buffers still talks to them.
  std::vector<detail::RpcWatch> rpc;
  // Every token's text as Model::token_piece gives it, built once on first
  // use (SamplerParams::banned_strings masks the vocabulary by it).
  const std::vector<std::string> &pieces() const;
  // Why the model can no longer decode (an RPC peer failed); empty while it can.
  std::string failure() const { return detail::rpc_failure(rpc); }

  mutable std::once_flag pieces_once;
  mutable std::vector<std::string> pieces_;

  Impl() = default;
  Impl(const Impl &) = delete;
  Impl &operator=(const Impl &) = delete;
  ~Impl();
};

namespace detail {
// Model::memory() of a llama.cpp model, from its own queries (is_hybrid,
// is_recurrent, n_swa): one reading for the public API and the KV manager.
Model::Memory memory_of(const llama_model *model) noexcept;
// "plain attention", "a sliding window", "recurrent", "hybrid": for messages.
const char *memory_name(Model::Memory memory) noexcept;
}  // namespace detail

}  // namespace weft
