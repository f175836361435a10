// Internal to weft::make_mmproj: what the vision kinds (make_mmproj.cpp) and
// the audio kind (make_mmproj_audio.cpp) share.
#pragma once

#include <gguf.h>

#include <cstdint>
#include <string>
#include <vector>

#include "weft/make_mmproj.hpp"

namespace weft::detail::mmproj {

// What the projector needs from the text model.
struct TextModel {
  std::string arch;
  int64_t n_embd = 0;
  double embd_rms = 0.02;  // RMS of token_embd (the scale media embeddings match)
};

// One tensor of the file: name, ggml shape, and how to fill it.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;
  float std;         // normal(0, std); ignored when constant is set
  bool constant = false;
  float value = 0;   // the constant (norm weights 1, biases 0)
};

// Pre-norm transformer blocks "<prefix>.blk.N.*" (clip's build_vit): LayerNorm
// with biases, attention and a GELU FFN, the residual outputs scaled down with
// depth. k_bias false leaves out attn_k.bias (Whisper's encoder has none).
void push_blocks(std::vector<TensorSpec> &t, const MakeMmprojParams &p, const std::string &prefix, bool k_bias);

// The qwen2a kind: its clip.audio.* keys and its tensors.
void set_qwen2a_keys(gguf_context *g, const MakeMmprojParams &p, const TextModel &text);
std::vector<TensorSpec> qwen2a_tensors(const MakeMmprojParams &p, const TextModel &text);

}  // namespace weft::detail::mmproj
