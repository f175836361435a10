// weft's own training graph for the llama architecture: the forward pass of
// llama.cpp's `llm_build_llama` (get_rows embedding, RMSNorm, Q/K/V, RoPE in
// NORM mode, causal softmax attention, SwiGLU FFN, output norm and matrix)
// built with plain ggml ops that all have a backward pass, trained with
// ggml-opt in static-graph mode. Unlike llama.cpp's llama_opt_* path, every
// tensor trains: token_embd, attn_k and attn_v included. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ggml-opt.h>
#include <ggml.h>
#include <gguf.h>

namespace weft::detail {

struct NpcGraphSpec {
  int n_ctx = 256;     // tokens per sequence (positions 0 .. n_ctx-1)
  int n_seq = 1;       // sequences per optimizer step
  int n_threads = 1;
  // AdamW parameters per step (ggml-opt asks once per step). Null: a
  // forward-only graph, whose logits() can be read (ggml-opt's static graphs
  // compute on a private copy, so a training graph's logits cannot).
  ggml_opt_get_optimizer_params get_opt_pars = nullptr;
  void *get_opt_pars_ud = nullptr;
};

// Owns a copy of a llama-architecture f32 model's weights (read from `g` and
// its data context `data`, as gguf_init_from_file with no_alloc = false
// gives them) on the CPU backend, and the static forward/backward graphs.
class NpcGraph {
 public:
  NpcGraph(const gguf_context *g, ggml_context *data, const NpcGraphSpec &spec);
  ~NpcGraph();
  NpcGraph(const NpcGraph &) = delete;
  NpcGraph &operator=(const NpcGraph &) = delete;

  int n_vocab() const;
  int tokens_per_step() const;  // n_ctx * n_seq

  // tokens and labels: tokens_per_step() each, sequence after sequence.
  // One forward + backward pass and one AdamW step; adds to `result`.
  void train_step(const std::int32_t *tokens, const std::int32_t *labels, ggml_opt_result_t result);
  // Forward only. A training graph adds loss/accuracy to `result` (may be
  // null); a forward-only graph ignores `labels` and `result`.
  void forward(const std::int32_t *tokens, const std::int32_t *labels, ggml_opt_result_t result);
  // Logits of the last forward pass of a forward-only graph: n_vocab per token.
  std::vector<float> logits() const;
  // Copies the current weights into the matching tensors of `data`.
  void store(ggml_context *data) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void set_inputs(const std::int32_t *tokens, const std::int32_t *labels);
};

}  // namespace weft::detail
