// The qwen2a kind of weft::make_mmproj: a seeded random Qwen2-Audio style
// audio projector in the layout clip.cpp loads for PROJECTOR_TYPE_QWEN2A and
// models/whisper-enc.cpp runs:
//
//   mel [3000 frames, n_mel] -> conv1d k3 s1 + GELU -> conv1d k3 s2 + GELU
//   -> + learned positions (1500) -> pre-norm blocks (a.blk.N, no k bias)
//   -> average pool 2 -> a.post_ln -> mm.a.fc -> [750, text n_embd]
//
// Shapes are ggml's (ne0 first); a conv1d kernel is [k, in, out] and its bias
// [1, out] (convert_hf_to_gguf unsqueezes it so it broadcasts over frames).
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "modelgen/make_mmproj_internal.hpp"

namespace weft::detail::mmproj {
namespace {

// Whisper's encoder sees 30 s chunks of 3000 mel frames; after the stride-2
// conv they are 1500 positions (Qwen2-Audio's max_source_positions), the
// length whisper-enc.cpp asserts the position table covers.
constexpr int64_t kAudioPositions = 1500;

}  // namespace

void set_qwen2a_keys(gguf_context *g, const MakeMmprojParams &p, const TextModel &text) {
  // The sample rate, FFT and hop (16 kHz, 400, 160) and the 30 s chunk are
  // clip.cpp's fixed values for this projector type, not keys.
  gguf_set_val_u32(g, "clip.audio.num_mel_bins", static_cast<uint32_t>(p.n_mel_bins));
  gguf_set_val_u32(g, "clip.audio.embedding_length", static_cast<uint32_t>(p.n_embd));
  gguf_set_val_u32(g, "clip.audio.feed_forward_length", static_cast<uint32_t>(p.n_ff));
  gguf_set_val_u32(g, "clip.audio.block_count", static_cast<uint32_t>(p.n_layer));
  gguf_set_val_u32(g, "clip.audio.attention.head_count", static_cast<uint32_t>(p.n_head));
  gguf_set_val_f32(g, "clip.audio.attention.layer_norm_epsilon", 1e-5f);  // Whisper's
  gguf_set_val_u32(g, "clip.audio.projection_dim", static_cast<uint32_t>(text.n_embd));
}

std::vector<TensorSpec> qwen2a_tensors(const MakeMmprojParams &p, const TextModel &text) {
  const int64_t e = p.n_embd, mel = p.n_mel_bins;
  std::vector<TensorSpec> t;
  // Both convs at unit gain over their 3 * in inputs: whisper's log-mel is
  // O(1) (log10, floored 8 below the peak, (x + 4) / 4), so the conv output
  // is too, and it dominates the learned positions (std 0.1).
  t.push_back({"a.conv1d.1.weight", {3, mel, e}, 1.0f / std::sqrt(float(3 * mel))});
  t.push_back({"a.conv1d.1.bias", {1, e}, 0, true, 0});
  t.push_back({"a.conv1d.2.weight", {3, e, e}, 1.0f / std::sqrt(float(3 * e))});
  t.push_back({"a.conv1d.2.bias", {1, e}, 0, true, 0});
  t.push_back({"a.position_embd.weight", {e, kAudioPositions}, 0.1f});
  push_blocks(t, p, "a", /*k_bias=*/false);
  // Whisper's final LayerNorm (after clip's average pooling) makes every
  // token unit RMS; mm.a.fc at this std gives the text model's token_embd RMS.
  t.push_back({"a.post_ln.weight", {e}, 0, true, 1});
  t.push_back({"a.post_ln.bias", {e}, 0, true, 0});
  t.push_back({"mm.a.fc.weight", {e, text.n_embd}, static_cast<float>(text.embd_rms / std::sqrt(double(e)))});
  t.push_back({"mm.a.fc.bias", {text.n_embd}, 0, true, 0});
  return t;
}

}  // namespace weft::detail::mmproj
