// weft's own training graph for the llama architecture: the forward pass of
// llama.cpp's `llm_build_llama` (get_rows embedding, RMSNorm, Q/K/V, RoPE in
// NORM mode, causal softmax attention, SwiGLU FFN, output norm and matrix),
// its backward pass written out (train_net.hpp says why) and ggml's AdamW
// step, in static graphs. Unlike llama.cpp's llama_opt_* path, every tensor
// trains: token_embd, attn_k and attn_v included. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ggml-opt.h>
#include <ggml.h>
#include <gguf.h>

namespace weft::detail {

// Loss and next-token accuracy summed over forward passes.
struct NpcTally {
  double loss_sum = 0;  // per pass: mean cross-entropy over its tokens (nats)
  std::int64_t passes = 0, tokens = 0, correct = 0;
  double loss() const { return passes > 0 ? loss_sum / double(passes) : 0.0; }
  double accuracy() const { return tokens > 0 ? double(correct) / double(tokens) : 0.0; }
};

struct NpcGraphSpec {
  int n_ctx = 256;     // tokens per sequence (positions 0 .. n_ctx-1)
  int n_seq = 1;       // sequences per optimizer step
  int n_threads = 1;
  // AdamW parameters, asked once per train_step (ggml-opt's type; only its
  // adamw fields are read). Null: a forward-only graph (no optimizer state).
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
  // One forward + backward pass and one AdamW step; adds to `tally`.
  void train_step(const std::int32_t *tokens, const std::int32_t *labels, NpcTally *tally);
  // Forward only; adds loss/accuracy to `tally` (may be null).
  void forward(const std::int32_t *tokens, const std::int32_t *labels, NpcTally *tally);
  // Logits of the last forward pass: n_vocab per token.
  std::vector<float> logits() const;
  // The gradient of every weight (in GGUF tensor order) for one batch, by the
  // hand-written backward pass or by ggml's automatic one (for tests: the
  // independent path). Needs a training graph; changes no weight.
  std::vector<std::vector<float>> gradients(const std::int32_t *tokens, const std::int32_t *labels, bool automatic);
  // Copies the current weights into the matching tensors of `data`.
  void store(ggml_context *data) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void set_inputs(const std::int32_t *tokens, const std::int32_t *labels);
};

}  // namespace weft::detail
