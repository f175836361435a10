// weft/make_model.hpp — generate GGUF models with seeded random weights and a
// real tokenizer, for tests, demos and benchmarks: llama-architecture by
// default, or one of the families game developers ship (ModelArch): Gemma-3
// style sliding-window attention, an LFM2 conv/attention hybrid, a pure
// recurrent Mamba, a llama mixture of experts.
//
// Weights follow a well-conditioned GPT-2 style initialisation (normal, std
// 0.02; each block's output projections scaled by 1/sqrt(2*n_layer); norms 1)
// so that deep presets stay numerically comparable. Same spec and seed give a
// byte-identical file on the same platform.
//
// Thread-safety: make_model() is reentrant; calls on different paths may run
// concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "weft/export.hpp"

namespace weft {

enum class ModelPreset {
  tiny,   // 2 layers, 64 wide, 4 heads / 2 KV heads: property tests
  small,  // SmolLM2-135M shape: 30 layers, 576 wide, 9 heads / 3 KV heads
  b1,     // TinyLlama-1.1B shape: 22 layers, 2048 wide, 32 heads / 4 KV heads
  npc,    // trained on NPC dialogue (weft/train.hpp): 4 layers, 128 wide, f32
  embed,  // an embedding model: tiny's shape, bidirectional attention, mean
          // pooling (llama.attention.causal false, llama.pooling_type mean);
          // llama only
  npc_draft,  // npc's drafter for speculative decoding: trained on the same
              // corpus with the same vocabulary, 2 layers, 64 wide, f32
};

enum class WeightType { f32, f16, q8_0, q4_0 };

// The model family a random-weight preset is written as (docs/MODELS.md).
enum class ModelArch {
  llama,   // dense llama (the default)
  gemma3,  // Gemma-3 interleaved sliding-window attention: pattern min(n_layer, 6),
           // every pattern-th layer (the last of each group) full attention
  lfm2,    // LFM2 hybrid: even layers short convolution (recurrent), odd layers attention
  mamba,   // Mamba(1), every layer recurrent: inner 2*n_embd, state 16, conv 4, dt rank ceil(n_embd/16)
  moe,     // llama with 4 experts, 2 used per token (router + 3-D expert tensors)
};

struct ModelShape {
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_ff = 0;
  int n_ctx_train = 0;
  bool tied_output = false;  // output projection shares token_embd
  WeightType default_type = WeightType::f32;
};

// The shape of a preset. Pure.
WEFT_API ModelShape preset_shape(ModelPreset preset) noexcept;
// "tiny" | "small" | "1b" | "npc" | "embed" | "npc-draft" and back; parse
// throws Errc::invalid_argument.
WEFT_API const char *preset_name(ModelPreset preset) noexcept;
WEFT_API ModelPreset parse_preset(const std::string &name);
WEFT_API const char *weight_type_name(WeightType type) noexcept;
WEFT_API WeightType parse_weight_type(const std::string &name);
// "llama" | "gemma3" | "lfm2" | "mamba" | "moe" and back; parse throws
// Errc::invalid_argument naming the value and the accepted names.
WEFT_API const char *model_arch_name(ModelArch arch) noexcept;
WEFT_API ModelArch parse_model_arch(const std::string &name);
// The sliding window gemma3 gets when MakeModelParams::sliding_window is unset.
inline constexpr int kDefaultSlidingWindow = 16;

struct MakeModelParams {
  ModelPreset preset = ModelPreset::tiny;  // default tiny
  std::uint64_t seed = 0;                  // default 0
  // Matrix weight type; default: the preset's (tiny f32, small q8_0, 1b q4_0).
  std::optional<WeightType> type;
  // Another shape for a random-weight preset (tiny, small, 1b): its tensor
  // names and weight scheme with these sizes, e.g. tiny with 32-wide heads
  // for a quantised KV cache. Default none (the preset's shape). Refused with
  // Errc::invalid_argument for the trained presets and for sizes a llama model
  // cannot have: n_layer 1..256; n_head 1..256 dividing n_embd, with even
  // head width (RoPE); n_head_kv dividing n_head; n_ff >= 1; n_ctx_train >=
  // 16; n_embd and n_ff multiples of a quantised type's block (32); for
  // gemma3 and lfm2 n_layer >= 2 (both kinds of layer).
  std::optional<ModelShape> shape;
  // Model family of a random-weight preset (or `shape`). Default llama. The
  // trained presets are llama only (anything else: Errc::invalid_argument).
  ModelArch arch = ModelArch::llama;
  // gemma3's sliding window in tokens; default kDefaultSlidingWindow (16), so
  // that test prompts longer than it exercise it. Refused with
  // Errc::invalid_argument for other arches and outside [1, n_ctx_train).
  std::optional<int> sliding_window;
  // Output path. Required. Written atomically (temp file, then rename).
  std::string out;
  // GGUF holding the tokenizer to copy; default: llama.cpp's
  // models/ggml-vocab-llama-spm.gguf from the tree weft was built against
  // (for the trained presets: the vocabulary fitted to their corpus, TrainParams::vocab).
  std::string vocab;
  // Progress in [0, 1] on the calling thread. Default none.
  std::function<void(float progress)> on_progress;
};

// Writes the model. The trained presets (npc, npc_draft) train with
// train_npc_model() and npc_train_params(preset) (seed -> both weight and
// corpus seed; f32 only), which takes minutes (npc_draft: under 2 CPU-minutes);
// call train_npc_model() for its report and finer control.
// Throws Error: invalid_argument (bad shape or type),
// not_found/corrupt (vocabulary file), io (output not writable, disk full);
// never leaves a partial file at `out`.
WEFT_API void make_model(const MakeModelParams &params);

// The vocabulary path compiled in (may not exist on another machine).
WEFT_API const char *default_vocab_path() noexcept;

}  // namespace weft
