// weft/make_adapter.hpp — seeded random LoRA adapters and control vectors for
// a base GGUF model, in the files stock llama.cpp loads (`--lora`,
// `--control-vector`; docs/ADAPTER_FILES.md).
//
// The adapters carry no meaning: they exist so tests, demos and benchmarks of
// per-conversation adapters have real files whose effect on the logits is
// clearly visible but not destructive. Their size is set relative to the base
// model's own weights and activations, so one `strength` means about the same
// on the random presets. Same base, parameters and seed give a byte-identical file.
//
// Thread-safety: make_adapter() is reentrant; calls writing different paths
// may run concurrently. It only reads `base` (control vectors also load it in
// llama.cpp, on the CPU, for a moment).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "weft/adapter.hpp"
#include "weft/export.hpp"

namespace weft {

// AdapterKind (lora, control_vector) and adapter_kind_name() are weft/adapter.hpp's.
// "lora" | "cvec" (also "control_vector") -> kind, for command lines;
// anything else throws Errc::invalid_argument.
WEFT_API AdapterKind parse_adapter_kind(const std::string &name);

struct MakeAdapterParams {
  // Base model GGUF; its architecture, shapes and weight scale are read from
  // it. Required.
  std::string base;
  // Output path. Required. Written atomically (temp file, fsync, rename).
  std::string out;
  AdapterKind kind = AdapterKind::lora;
  std::uint64_t seed = 1;
  // LoRA rank, 1 .. the smallest dimension of any target tensor.
  int rank = 8;
  // Written as adapter.lora.alpha: llama.cpp scales B·A by alpha / rank. The
  // weights are drawn so that the effective (alpha / rank)·B·A has the RMS
  // `strength` asks for whatever rank and alpha are, so alpha only changes how
  // the scale is split between the file's weights and its metadata. > 0.
  float alpha = 16.0f;
  // Nominal effect size (> 0, finite): at adapter scale 1, strength s moves
  // a prompt's last-token logits by a mean |Δlogit| of roughly s times
  // their spread (std over the vocabulary) on the random presets; 1.13 is
  // where the logits no longer correlate with the base at all. The mapping
  // is empirical (docs/ADAPTER_FILES.md):
  //  - lora: RMS((alpha/rank)·B·A) = 6·strength/n_layer · RMS(W), per
  //    target tensor W (read from the base);
  //  - control_vector: each layer's direction has per-element std
  //    1.5·strength·scale(l)/sqrt(n_layer-1), scale(l) the robust std of the
  //    residual stream after block l, measured by decoding a fixed 32-token
  //    prompt on the base with llama.cpp (CPU; seconds for `small`).
  // Default 0.5, measured mean |Δlogit|/std: LoRA 0.54 (tiny), 0.32 (small);
  // control vector 0.51 (tiny), 0.65 (small); the logits' own spread stays
  // within 1% and the top token usually changes: visible, not destructive.
  // The trained npc model is more sensitive to control vectors (0.5 gives
  // 2.1 and shrinks its logits' spread by 30%): use ~0.1 there (0.34).
  float strength = 0.5f;
  // LoRA targets, per block: base tensors blk.<i>.<target>.weight. Known:
  // attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down, and
  // "output" (the untied output projection). Ignored for control vectors.
  std::vector<std::string> targets = {"attn_q",      "attn_k",   "attn_v", "attn_output",
                                      "ffn_gate",    "ffn_up",   "ffn_down"};
  // Progress in [0, 1] on the calling thread. Default none.
  std::function<void(float progress)> on_progress;
};

// Writes the adapter. Throws Error:
//  - not_found: `base` does not exist;
//  - corrupt: `base` is not a readable GGUF, lacks its shape metadata, or
//    its tensor data lies outside the file;
//  - invalid_argument: empty path, rank < 1 or above the target's smallest
//    dimension, alpha/strength not positive and finite, unknown or repeated
//    target, empty target list, `base` is itself an adapter;
//  - incompatible: a known target the base does not have (e.g. "output" on
//    a tied-output model) or a tensor type ggml cannot read;
//  - io: `out` not writable, disk full.
// Never leaves a partial file at `out`; a previous file there stays intact.
WEFT_API void make_adapter(const MakeAdapterParams &params);

}  // namespace weft
