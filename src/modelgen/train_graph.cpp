// weft::detail::NpcGraph: the llama architecture as llama.cpp's
// llm_build_llama computes it, in ggml ops that all have a backward pass,
// trained with ggml-opt's static graphs (the flow of llama.cpp's
// examples/mnist). See train_graph.hpp.
#include "modelgen/train_graph.hpp"

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/internal.hpp"

namespace weft::detail {
namespace {

struct Layer {
  ggml_tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *gate, *up, *down;
};

std::uint32_t get_u32(const gguf_context *g, const char *key) {
  const int64_t i = gguf_find_key(g, key);
  if (i < 0) fail(Errc::corrupt, fmt::format("training graph: the model has no '{}'", key));
  return gguf_get_val_u32(g, i);
}

float get_f32(const gguf_context *g, const char *key) {
  const int64_t i = gguf_find_key(g, key);
  if (i < 0) fail(Errc::corrupt, fmt::format("training graph: the model has no '{}'", key));
  return gguf_get_val_f32(g, i);
}

}  // namespace

struct NpcGraph::Impl {
  NpcGraphSpec spec;
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, n_ff = 0, n_rot = 0, n_ctx_train = 0, n_vocab = 0;
  float eps = 1e-5f, freq_base = 10000.0f;

  ggml_backend_t backend = nullptr;
  ggml_backend_sched_t sched = nullptr;
  ggml_context *ctx_static = nullptr;   // weights, tokens, positions
  ggml_context *ctx_compute = nullptr;  // everything the graphs compute
  ggml_backend_buffer_t buf = nullptr;
  ggml_opt_context_t opt = nullptr;  // training only
  ggml_cgraph *gf = nullptr;         // forward only

  std::vector<ggml_tensor *> weights;  // named as in the GGUF
  ggml_tensor *tok_embd = nullptr, *out_norm = nullptr, *output = nullptr;
  std::vector<Layer> layers;
  ggml_tensor *tokens = nullptr, *pos = nullptr, *logits = nullptr;
  std::vector<float> labels_host;

  ~Impl() {
    ggml_opt_free(opt);
    ggml_backend_sched_free(sched);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx_compute);
    ggml_free(ctx_static);
    ggml_backend_free(backend);
  }

  ggml_tensor *weight(const gguf_context *g, ggml_context *data, const std::string &name, bool required = true) {
    const ggml_tensor *src = ggml_get_tensor(data, name.c_str());
    if (src == nullptr) {
      if (required) fail(Errc::corrupt, fmt::format("training graph: the model has no tensor '{}'", name));
      return nullptr;
    }
    if (src->type != GGML_TYPE_F32) fail(Errc::invalid_argument, fmt::format("training graph: '{}' is not f32", name));
    (void)g;
    ggml_tensor *t = ggml_dup_tensor(ctx_static, src);
    ggml_set_name(t, name.c_str());
    weights.push_back(t);
    return t;
  }

  // llm_build_llama, op for op (attention as build_attn_mha without flash
  // attention: kq = K*Q, causal softmax scaled by 1/sqrt(head_dim), V*kq).
  ggml_tensor *build(ggml_context *ctx) {
    const int T = spec.n_ctx, B = spec.n_seq, N = T * B;
    const int hd = n_embd / n_head;
    const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hd));
    auto rope = [&](ggml_tensor *x) {
      return ggml_rope_ext(ctx, x, pos, nullptr, n_rot, GGML_ROPE_TYPE_NORMAL, n_ctx_train, freq_base,
                           /*freq_scale=*/1.0f, /*ext_factor=*/0.0f, /*attn_factor=*/1.0f, /*beta_fast=*/32.0f,
                           /*beta_slow=*/1.0f);
    };
    ggml_tensor *x = ggml_get_rows(ctx, tok_embd, tokens);  // [n_embd, N]
    for (const Layer &L : layers) {
      ggml_tensor *cur = ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), L.attn_norm);
      ggml_tensor *q = rope(ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wq, cur), hd, n_head, N));
      ggml_tensor *k = rope(ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wk, cur), hd, n_head_kv, N));
      ggml_tensor *v = ggml_mul_mat(ctx, L.wv, cur);
      // [hd, heads, T, B] -> [hd, T, heads, B]; V transposed to [T, hd, heads, B].
      q = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, q, hd, n_head, T, B), 0, 2, 1, 3));
      k = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, k, hd, n_head_kv, T, B), 0, 2, 1, 3));
      ggml_tensor *vt = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, v, hd, n_head_kv, T, B), 1, 2, 0, 3));
      ggml_tensor *kq = ggml_mul_mat(ctx, k, q);  // [T_k, T_q, heads, B]
      kq = ggml_diag_mask_inf(ctx, kq, 0);
      kq = ggml_soft_max_ext(ctx, kq, nullptr, kq_scale, 0.0f);
      ggml_tensor *kqv = ggml_mul_mat(ctx, vt, kq);  // [hd, T_q, heads, B]
      ggml_tensor *o = ggml_cont(ctx, ggml_permute(ctx, kqv, 0, 2, 1, 3));  // [hd, heads, T, B]
      o = ggml_mul_mat(ctx, L.wo, ggml_reshape_2d(ctx, o, n_embd, N));
      x = ggml_add(ctx, o, x);
      cur = ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), L.ffn_norm);
      ggml_tensor *h = ggml_swiglu_split(ctx, ggml_mul_mat(ctx, L.gate, cur), ggml_mul_mat(ctx, L.up, cur));
      x = ggml_add(ctx, ggml_mul_mat(ctx, L.down, h), x);
    }
    x = ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), out_norm);
    return ggml_mul_mat(ctx, output, x);  // [n_vocab, N]
  }
};

NpcGraph::NpcGraph(const gguf_context *g, ggml_context *data, const NpcGraphSpec &spec) : impl_(new Impl) {
  Impl &m = *impl_;
  m.spec = spec;
  m.n_layer = static_cast<int>(get_u32(g, "llama.block_count"));
  m.n_embd = static_cast<int>(get_u32(g, "llama.embedding_length"));
  m.n_head = static_cast<int>(get_u32(g, "llama.attention.head_count"));
  m.n_head_kv = static_cast<int>(get_u32(g, "llama.attention.head_count_kv"));
  m.n_ff = static_cast<int>(get_u32(g, "llama.feed_forward_length"));
  m.n_rot = static_cast<int>(get_u32(g, "llama.rope.dimension_count"));
  m.n_ctx_train = static_cast<int>(get_u32(g, "llama.context_length"));
  m.freq_base = get_f32(g, "llama.rope.freq_base");
  m.eps = get_f32(g, "llama.attention.layer_norm_rms_epsilon");
  if (m.n_head_kv != m.n_head) fail(Errc::invalid_argument, "training graph: grouped-query attention is not supported");

  const std::size_t n_tensors = 4 + 9 * static_cast<std::size_t>(m.n_layer) + 4;
  ggml_init_params sp{ggml_tensor_overhead() * n_tensors, nullptr, /*no_alloc=*/true};
  m.ctx_static = ggml_init(sp);
  m.tok_embd = m.weight(g, data, "token_embd.weight");
  m.n_vocab = static_cast<int>(m.tok_embd->ne[1]);
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    m.layers.push_back({m.weight(g, data, b + "attn_norm.weight"), m.weight(g, data, b + "attn_q.weight"),
                        m.weight(g, data, b + "attn_k.weight"), m.weight(g, data, b + "attn_v.weight"),
                        m.weight(g, data, b + "attn_output.weight"), m.weight(g, data, b + "ffn_norm.weight"),
                        m.weight(g, data, b + "ffn_gate.weight"), m.weight(g, data, b + "ffn_up.weight"),
                        m.weight(g, data, b + "ffn_down.weight")});
  }
  m.out_norm = m.weight(g, data, "output_norm.weight");
  m.output = m.weight(g, data, "output.weight", /*required=*/false);
  if (m.output == nullptr) m.output = m.tok_embd;  // tied output, as llama.cpp does

  const int N = spec.n_ctx * spec.n_seq;
  m.tokens = ggml_new_tensor_1d(m.ctx_static, GGML_TYPE_I32, N);
  ggml_set_name(m.tokens, "tokens");
  m.pos = ggml_new_tensor_1d(m.ctx_static, GGML_TYPE_I32, N);
  ggml_set_name(m.pos, "pos");

  m.backend = ggml_backend_cpu_init();
  if (m.backend == nullptr) fail(Errc::backend, "training graph: no CPU backend");
  ggml_backend_cpu_set_n_threads(m.backend, std::max(1, spec.n_threads));
  m.buf = ggml_backend_alloc_ctx_tensors(m.ctx_static, m.backend);
  if (m.buf == nullptr) fail(Errc::backend, "training graph: could not allocate the weights");
  for (ggml_tensor *t : m.weights) {
    ggml_backend_tensor_set(t, ggml_get_tensor(data, ggml_get_name(t))->data, 0, ggml_nbytes(t));
  }
  std::vector<std::int32_t> positions(static_cast<std::size_t>(N));
  for (int i = 0; i < N; ++i) positions[static_cast<std::size_t>(i)] = i % spec.n_ctx;
  ggml_backend_tensor_set(m.pos, positions.data(), 0, ggml_nbytes(m.pos));
  std::vector<std::int32_t> zeros(static_cast<std::size_t>(N), 0);
  ggml_backend_tensor_set(m.tokens, zeros.data(), 0, ggml_nbytes(m.tokens));

  const bool train = spec.get_opt_pars != nullptr;
  if (train) {
    for (ggml_tensor *t : m.weights) ggml_set_param(t);
  }
  constexpr std::size_t kGraph = 16384;
  ggml_init_params cp{ggml_tensor_overhead() * kGraph + 4 * ggml_graph_overhead_custom(kGraph, true), nullptr, true};
  m.ctx_compute = ggml_init(cp);
  m.logits = m.build(m.ctx_compute);

  ggml_backend_t backends[] = {m.backend};
  m.sched = ggml_backend_sched_new(backends, nullptr, 1, kGraph, false, false);

  m.labels_host.assign(static_cast<std::size_t>(m.n_vocab) * static_cast<std::size_t>(N), 0.0f);
  if (!train) {
    // Forward only (logits for checking against llama.cpp): one static graph.
    m.gf = ggml_new_graph_custom(m.ctx_compute, kGraph, false);
    ggml_build_forward_expand(m.gf, m.logits);
    if (!ggml_backend_sched_alloc_graph(m.sched, m.gf)) fail(Errc::backend, "training graph: could not allocate");
    return;
  }
  ggml_opt_params op = ggml_opt_default_params(m.sched, GGML_OPT_LOSS_TYPE_CROSS_ENTROPY);
  op.ctx_compute = m.ctx_compute;
  op.inputs = m.tokens;
  op.outputs = m.logits;
  op.build_type = GGML_OPT_BUILD_TYPE_OPT;
  op.opt_period = 1;
  op.get_opt_pars = spec.get_opt_pars;
  op.get_opt_pars_ud = spec.get_opt_pars_ud;
  op.optimizer = GGML_OPT_OPTIMIZER_TYPE_ADAMW;
  m.opt = ggml_opt_init(op);
}

NpcGraph::~NpcGraph() = default;

int NpcGraph::n_vocab() const { return impl_->n_vocab; }
int NpcGraph::tokens_per_step() const { return impl_->spec.n_ctx * impl_->spec.n_seq; }

void NpcGraph::set_inputs(const std::int32_t *tokens, const std::int32_t *labels) {
  Impl &m = *impl_;
  const int N = tokens_per_step();
  for (int i = 0; i < N; ++i) {
    if (tokens[i] < 0 || tokens[i] >= m.n_vocab || labels[i] < 0 || labels[i] >= m.n_vocab) {
      fail(Errc::invalid_argument, fmt::format("training graph: token {} outside the vocabulary", i));
    }
  }
  ggml_backend_tensor_set(m.tokens, tokens, 0, ggml_nbytes(m.tokens));
  if (m.opt == nullptr) return;
  std::fill(m.labels_host.begin(), m.labels_host.end(), 0.0f);
  for (int i = 0; i < N; ++i) {
    m.labels_host[static_cast<std::size_t>(i) * static_cast<std::size_t>(m.n_vocab) +
                  static_cast<std::size_t>(labels[i])] = 1.0f;
  }
  ggml_backend_tensor_set(ggml_opt_labels(m.opt), m.labels_host.data(), 0, ggml_nbytes(ggml_opt_labels(m.opt)));
}

void NpcGraph::train_step(const std::int32_t *tokens, const std::int32_t *labels, ggml_opt_result_t result) {
  if (impl_->spec.get_opt_pars == nullptr) fail(Errc::invalid_argument, "training graph: built for forward only");
  ggml_opt_alloc(impl_->opt, /*backward=*/true);
  set_inputs(tokens, labels);
  ggml_opt_eval(impl_->opt, result);
}

void NpcGraph::forward(const std::int32_t *tokens, const std::int32_t *labels, ggml_opt_result_t result) {
  if (impl_->opt == nullptr) {
    set_inputs(tokens, labels);
    ggml_backend_sched_graph_compute(impl_->sched, impl_->gf);
    return;
  }
  ggml_opt_alloc(impl_->opt, /*backward=*/false);
  set_inputs(tokens, labels);
  ggml_opt_eval(impl_->opt, result);
}

std::vector<float> NpcGraph::logits() const {
  if (impl_->opt != nullptr) fail(Errc::invalid_argument, "training graph: logits() needs a forward-only graph");
  std::vector<float> out(static_cast<std::size_t>(ggml_nelements(impl_->logits)));
  ggml_backend_tensor_get(impl_->logits, out.data(), 0, ggml_nbytes(impl_->logits));
  return out;
}

void NpcGraph::store(ggml_context *data) const {
  for (ggml_tensor *t : impl_->weights) {
    ggml_tensor *dst = ggml_get_tensor(data, ggml_get_name(t));
    ggml_backend_tensor_get(t, dst->data, 0, ggml_nbytes(t));
  }
}

}  // namespace weft::detail
