// Per-architecture metadata and tensor lists of the random-weight models
// (weft::ModelArch): which GGUF keys and tensors each family needs at the
// pinned llama.cpp, and how each tensor is filled. Internal to make_model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/make_model.hpp"

struct gguf_context;

namespace weft::detail {

// How a tensor's values are made.
enum class Fill {
  normal,   // seeded normal of standard deviation `std` (the tensor's own stream)
  ones,     // norms, Mamba's D
  zeros,    // biases
  ssm_a,    // Mamba's A = -exp(log(1..d_state)) = -(1..d_state), per inner channel
  dt_bias,  // Mamba's dt bias: softplus^-1 of dt log-spaced in [0.001, 0.1]
};

struct WeightSpec {
  std::string name;
  int64_t ne0 = 1, ne1 = 1, ne2 = 1;
  bool matrix = false;  // stored in the weight type (quantised per row); else f32
  Fill fill = Fill::normal;
  float std = 0;        // Fill::normal only
};

// Mamba's state sizes for a width: inner 2*n_embd (the only expansion llama.cpp
// supports), state 16, conv kernel 4, dt rank ceil(n_embd/16).
struct MambaSizes {
  int64_t d_inner, d_state, d_conv, dt_rank;
};
MambaSizes mamba_sizes(const ModelShape &s);

// gemma3's sliding_window_pattern for n_layer layers: llama.cpp makes layer
// il SWA when il % pattern < pattern - 1, so min(n_layer, 6) gives Gemma 3's
// 5 local : 1 global and, below 6 layers, a full-attention last layer.
uint32_t gemma3_swa_pattern(int n_layer);
// LFM2's layer kinds: even layers short convolution, odd layers attention.
inline bool lfm2_is_attention(int il) { return il % 2 == 1; }

inline constexpr int kMoeExperts = 4;
inline constexpr int kMoeExpertsUsed = 2;
inline constexpr int kLfm2ConvCache = 3;  // shortconv.l_cache (LFM2's)

// The value of general.architecture (moe is llama with experts).
const char *gguf_arch(ModelArch arch) noexcept;

// Writes the architecture's hyperparameter keys (`<arch>.*`). For llama the
// same keys in the same order as before ModelArch existed, so llama files
// keep their bytes.
void set_arch_keys(gguf_context *g, ModelArch arch, const ModelShape &s, int64_t n_vocab, int sliding_window);

// Every tensor of the model in file order. `std_embd`/`std_kv` override the
// default 0.02 of token_embd and attn_k/attn_v when > 0.
std::vector<WeightSpec> arch_tensor_list(ModelArch arch, const ModelShape &s, int64_t n_vocab, float std_embd,
                                         float std_kv);

// The tensor's values (size ne0*ne1*ne2) from `seed`.
void fill_weight(const WeightSpec &w, std::uint64_t seed, std::vector<float> &out);

}  // namespace weft::detail
