// The llama architecture as ggml ops for weft's trainer: the forward pass of
// llama.cpp's `llm_build_llama` and its backward pass written out by hand.
//
// Why by hand: ggml's automatic backward pass computes every matrix product's
// gradients with GGML_OP_OUT_PROD, whose CPU kernel is a row-by-row
// multiply-add. Profiled on the npc model it took 58% of a training step on
// an AVX-512 CPU, and about twice that share of time on AVX2-only CPUs. Here
// the same gradients are ordinary matrix products of transposed copies, which
// ggml runs through its blocked sgemm. The test
// `Train.HandWrittenGradientsEqualGgmlsAutomaticOnes` checks every gradient
// against ggml's automatic backward pass. Internal.
#pragma once

#include <vector>

#include <ggml.h>

namespace weft::detail {

struct NpcLayer {
  ggml_tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *gate, *up, *down;
};

// Shape and weights; the tensors live in the caller's contexts.
struct NpcNet {
  int n_ctx = 256, n_seq = 1;  // one step: n_seq sequences of n_ctx tokens
  int n_embd = 0, n_head = 0, n_rot = 0, n_ctx_train = 0;
  float eps = 1e-5f, freq_base = 10000.0f;
  ggml_tensor *tok_embd = nullptr, *out_norm = nullptr, *output = nullptr;  // output may be tok_embd (tied)
  std::vector<NpcLayer> layers;
  ggml_tensor *tokens = nullptr, *pos = nullptr;  // I32 [n_ctx * n_seq]
};

// What the backward pass reads from the forward pass, per layer.
struct NpcLayerActs {
  ggml_tensor *x_in, *n1, *cur1, *q4, *k4, *vt, *p, *o, *x_mid, *n2, *cur2, *g, *u, *h;  // n: rms_norm
};
struct NpcActs {
  std::vector<NpcLayerActs> layers;
  ggml_tensor *x_last = nullptr, *n_last = nullptr, *cur_last = nullptr, *logits = nullptr;  // logits: [n_vocab, N]
};

// `differentiable`: only ops ggml's automatic backward pass knows (for the
// test that checks build_npc_backward against it); otherwise faster ones.
NpcActs build_npc_forward(ggml_context *ctx, const NpcNet &net, bool differentiable = false);

// Gradients of the loss whose gradient with respect to the logits is
// `dlogits`, one per tensor of `params` (as listed by npc_params).
std::vector<ggml_tensor *> build_npc_backward(ggml_context *ctx, const NpcNet &net, const NpcActs &acts,
                                              ggml_tensor *dlogits);

// Every trained tensor once (a tied output is token_embd): token_embd, per
// layer its nine, output_norm, then output when untied.
std::vector<ggml_tensor *> npc_params(const NpcNet &net);

}  // namespace weft::detail
