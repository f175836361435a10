// weft::detail::NpcGraph: the llama architecture as llama.cpp's
// llm_build_llama computes it (train_net.cpp), with its hand-written backward
// pass and ggml's AdamW step in one static graph per use. See train_graph.hpp.
#include "modelgen/train_graph.hpp"

#include <ggml-alloc.h>
#include <ggml-backend.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/internal.hpp"
#include "modelgen/model_writer.hpp"
#include "modelgen/train_net.hpp"

namespace weft::detail {
namespace {

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

constexpr std::size_t kGraph = 16384;

}  // namespace

// Named, not anonymous: NpcGraph::Impl holds them, and a unity build would
// warn of a type with linkage using the anonymous namespace.
struct TrainSchedFree {
  void operator()(ggml_backend_sched *s) const { ggml_backend_sched_free(s); }
};
using TrainSchedPtr = std::unique_ptr<ggml_backend_sched, TrainSchedFree>;

// One graph with its own tensors and scheduler: ggml's allocator keeps a
// tensor's address once given, so graphs that shared tensors could not be
// allocated in turn (ggml-opt copies its graphs for the same reason).
struct TrainPass {
  GgmlPtr ctx;
  TrainSchedPtr sched;
  ggml_cgraph *graph = nullptr;
  NpcActs acts;
  ggml_tensor *loss = nullptr, *pred = nullptr;
  std::vector<ggml_tensor *> grads;
  bool allocated = false;
};

struct NpcGraph::Impl {
  NpcGraphSpec spec;
  NpcNet net;
  int n_layer = 0, n_head_kv = 0, n_vocab = 0;

  ggml_backend_t backend = nullptr;
  ggml_context *ctx_static = nullptr;  // weights, optimizer moments, inputs
  ggml_backend_buffer_t buf = nullptr;

  std::vector<ggml_tensor *> weights;  // named as in the GGUF, in its order
  std::vector<ggml_tensor *> moment1, moment2;  // training only, parallel to weights
  ggml_tensor *labels = nullptr;       // f32 one-hot [n_vocab, N]
  ggml_tensor *one = nullptr;          // the loss's own gradient, 1
  ggml_tensor *adamw_pars = nullptr;   // f32 [7], as ggml_opt_step_adamw reads them
  TrainPass eval, train;                    // train: training graphs only
  const TrainPass *last = nullptr;          // the pass logits() reads
  std::int64_t iter = 1;               // AdamW's bias correction counts from 1
  std::vector<float> labels_host;

  ~Impl() {
    eval = {};
    train = {};
    ggml_backend_buffer_free(buf);
    ggml_free(ctx_static);
    ggml_backend_free(backend);
  }

  ggml_tensor *weight(ggml_context *data, const std::string &name, bool required = true) {
    const ggml_tensor *src = ggml_get_tensor(data, name.c_str());
    if (src == nullptr) {
      if (required) fail(Errc::corrupt, fmt::format("training graph: the model has no tensor '{}'", name));
      return nullptr;
    }
    if (src->type != GGML_TYPE_F32) fail(Errc::invalid_argument, fmt::format("training graph: '{}' is not f32", name));
    ggml_tensor *t = ggml_dup_tensor(ctx_static, src);
    ggml_set_name(t, name.c_str());
    weights.push_back(t);
    return t;
  }

  // The forward pass with its loss and prediction; with `grads` the backward
  // pass too; with `step` also one AdamW update of every weight after it.
  TrainPass make_pass(bool grads, bool step) {
    TrainPass p;
    ggml_init_params cp{ggml_tensor_overhead() * kGraph + ggml_graph_overhead_custom(kGraph, false), nullptr, true};
    p.ctx.reset(ggml_init(cp));
    ggml_context *ctx = p.ctx.get();
    p.acts = build_npc_forward(ctx, net);
    p.loss = ggml_cross_entropy_loss(ctx, p.acts.logits, labels);
    p.pred = ggml_argmax(ctx, p.acts.logits);
    p.graph = ggml_new_graph_custom(ctx, kGraph, false);
    for (ggml_tensor *t : {p.acts.logits, p.loss, p.pred}) {
      ggml_set_output(t);
      ggml_build_forward_expand(p.graph, t);
    }
    if (grads) {
      p.grads = build_npc_backward(ctx, net, p.acts, ggml_cross_entropy_loss_back(ctx, one, p.acts.logits, labels));
      if (p.grads.size() != weights.size()) fail(Errc::backend, "training graph: a weight without a gradient");
      for (ggml_tensor *d : p.grads) {
        ggml_set_output(d);
        ggml_build_forward_expand(p.graph, d);
      }
    }
    // Every read of a weight is in the graph before the first update of one.
    for (std::size_t i = 0; step && i < weights.size(); ++i) {
      ggml_build_forward_expand(p.graph, ggml_opt_step_adamw(ctx, weights[i], p.grads[i], moment1[i], moment2[i],
                                                             adamw_pars));
    }
    ggml_backend_t backends[] = {backend};
    p.sched.reset(ggml_backend_sched_new(backends, nullptr, 1, kGraph, false, false));
    return p;
  }

  // The inputs are set; computes the pass (allocated on first use).
  void compute(TrainPass &p) {
    if (!p.allocated) {
      if (!ggml_backend_sched_alloc_graph(p.sched.get(), p.graph)) fail(Errc::backend, "training graph: could not allocate");
      p.allocated = true;
    }
    if (ggml_backend_sched_graph_compute(p.sched.get(), p.graph) != GGML_STATUS_SUCCESS) {
      fail(Errc::backend, "training graph: the CPU backend failed to compute a step");
    }
    last = &p;
  }

  void tally(const TrainPass &pass, NpcTally *t, const std::int32_t *labels_in) {
    if (t == nullptr) return;
    float l = 0;
    ggml_backend_tensor_get(pass.loss, &l, 0, sizeof l);
    const int N = net.n_ctx * net.n_seq;
    std::vector<std::int32_t> p(static_cast<std::size_t>(N));
    ggml_backend_tensor_get(pass.pred, p.data(), 0, ggml_nbytes(pass.pred));
    t->loss_sum += l;
    t->passes += 1;
    t->tokens += N;
    for (int i = 0; i < N; ++i) t->correct += p[static_cast<std::size_t>(i)] == labels_in[i] ? 1 : 0;
  }
};

NpcGraph::NpcGraph(const gguf_context *g, ggml_context *data, const NpcGraphSpec &spec) : impl_(new Impl) {
  Impl &m = *impl_;
  NpcNet &net = m.net;
  m.spec = spec;
  net.n_ctx = spec.n_ctx;
  net.n_seq = spec.n_seq;
  m.n_layer = static_cast<int>(get_u32(g, "llama.block_count"));
  net.n_embd = static_cast<int>(get_u32(g, "llama.embedding_length"));
  net.n_head = static_cast<int>(get_u32(g, "llama.attention.head_count"));
  m.n_head_kv = static_cast<int>(get_u32(g, "llama.attention.head_count_kv"));
  net.n_rot = static_cast<int>(get_u32(g, "llama.rope.dimension_count"));
  net.n_ctx_train = static_cast<int>(get_u32(g, "llama.context_length"));
  net.freq_base = get_f32(g, "llama.rope.freq_base");
  net.eps = get_f32(g, "llama.attention.layer_norm_rms_epsilon");
  if (m.n_head_kv != net.n_head) fail(Errc::invalid_argument, "training graph: grouped-query attention is not supported");

  const bool train = spec.get_opt_pars != nullptr;
  const std::size_t n_weights = 3 + 9 * static_cast<std::size_t>(m.n_layer);
  ggml_init_params sp{ggml_tensor_overhead() * (3 * n_weights + 8), nullptr, /*no_alloc=*/true};
  m.ctx_static = ggml_init(sp);
  net.tok_embd = m.weight(data, "token_embd.weight");
  m.n_vocab = static_cast<int>(net.tok_embd->ne[1]);
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    net.layers.push_back({m.weight(data, b + "attn_norm.weight"), m.weight(data, b + "attn_q.weight"),
                          m.weight(data, b + "attn_k.weight"), m.weight(data, b + "attn_v.weight"),
                          m.weight(data, b + "attn_output.weight"), m.weight(data, b + "ffn_norm.weight"),
                          m.weight(data, b + "ffn_gate.weight"), m.weight(data, b + "ffn_up.weight"),
                          m.weight(data, b + "ffn_down.weight")});
  }
  net.out_norm = m.weight(data, "output_norm.weight");
  net.output = m.weight(data, "output.weight", /*required=*/false);
  if (net.output == nullptr) net.output = net.tok_embd;  // tied output, as llama.cpp does
  if (train) {
    for (ggml_tensor *w : m.weights) {
      ggml_set_param(w);  // ggml_opt_step_adamw updates parameters only
      m.moment1.push_back(ggml_dup_tensor(m.ctx_static, w));
      m.moment2.push_back(ggml_dup_tensor(m.ctx_static, w));
    }
  }

  const int N = spec.n_ctx * spec.n_seq;
  net.tokens = ggml_new_tensor_1d(m.ctx_static, GGML_TYPE_I32, N);
  net.pos = ggml_new_tensor_1d(m.ctx_static, GGML_TYPE_I32, N);
  m.labels = ggml_new_tensor_2d(m.ctx_static, GGML_TYPE_F32, m.n_vocab, N);
  m.one = ggml_new_tensor_1d(m.ctx_static, GGML_TYPE_F32, 1);
  m.adamw_pars = ggml_new_tensor_1d(m.ctx_static, GGML_TYPE_F32, 7);

  // Through the registry: a portable build's CPU backend is a module loaded
  // at run time (weft/backend.hpp), not linked.
  m.backend = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
  if (m.backend == nullptr) fail(Errc::backend, "training graph: no CPU backend");
  ggml_backend_reg_t cpu_reg = ggml_backend_dev_backend_reg(ggml_backend_get_device(m.backend));
  auto set_threads = reinterpret_cast<ggml_backend_set_n_threads_t>(
      ggml_backend_reg_get_proc_address(cpu_reg, "ggml_backend_set_n_threads"));
  if (set_threads != nullptr) set_threads(m.backend, std::max(1, spec.n_threads));
  m.buf = ggml_backend_alloc_ctx_tensors(m.ctx_static, m.backend);
  if (m.buf == nullptr) fail(Errc::backend, "training graph: could not allocate the weights");
  ggml_backend_buffer_clear(m.buf, 0);  // AdamW's moments start at zero
  for (ggml_tensor *t : m.weights) {
    ggml_backend_tensor_set(t, ggml_get_tensor(data, ggml_get_name(t))->data, 0, ggml_nbytes(t));
  }
  std::vector<std::int32_t> positions(static_cast<std::size_t>(N));
  for (int i = 0; i < N; ++i) positions[static_cast<std::size_t>(i)] = i % spec.n_ctx;
  ggml_backend_tensor_set(net.pos, positions.data(), 0, ggml_nbytes(net.pos));
  const float one = 1.0f;
  ggml_backend_tensor_set(m.one, &one, 0, sizeof one);

  m.labels_host.assign(static_cast<std::size_t>(m.n_vocab) * static_cast<std::size_t>(N), 0.0f);
  m.eval = m.make_pass(false, false);
  if (train) m.train = m.make_pass(true, true);
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
  ggml_backend_tensor_set(m.net.tokens, tokens, 0, ggml_nbytes(m.net.tokens));
  std::fill(m.labels_host.begin(), m.labels_host.end(), 0.0f);
  for (int i = 0; i < N; ++i) {
    m.labels_host[static_cast<std::size_t>(i) * static_cast<std::size_t>(m.n_vocab) +
                  static_cast<std::size_t>(labels[i])] = 1.0f;
  }
  ggml_backend_tensor_set(m.labels, m.labels_host.data(), 0, ggml_nbytes(m.labels));
}

void NpcGraph::train_step(const std::int32_t *tokens, const std::int32_t *labels, NpcTally *tally) {
  Impl &m = *impl_;
  if (m.train.graph == nullptr) fail(Errc::invalid_argument, "training graph: built for forward only");
  const ggml_opt_optimizer_params op = m.spec.get_opt_pars(m.spec.get_opt_pars_ud);
  const auto &a = op.adamw;
  if (!(a.alpha > 0 && a.beta1 >= 0 && a.beta1 < 1 && a.beta2 >= 0 && a.beta2 < 1 && a.eps >= 0 && a.wd >= 0 &&
        a.wd <= 1)) {
    fail(Errc::invalid_argument, fmt::format("training graph: AdamW alpha = {}, beta1 = {}, beta2 = {}, eps = {}, wd = "
                                             "{} (expected alpha > 0, betas in [0, 1), eps >= 0, wd in [0, 1])",
                                             a.alpha, a.beta1, a.beta2, a.eps, a.wd));
  }
  // As ggml-opt fills them: bias corrections from the 1-based step count.
  const float pars[7] = {a.alpha, a.beta1, a.beta2, a.eps, a.wd,
                         1.0f / (1.0f - std::pow(a.beta1, static_cast<float>(m.iter))),
                         1.0f / (1.0f - std::pow(a.beta2, static_cast<float>(m.iter)))};
  ggml_backend_tensor_set(m.adamw_pars, pars, 0, sizeof pars);
  set_inputs(tokens, labels);
  m.compute(m.train);
  ++m.iter;
  m.tally(m.train, tally, labels);
}

void NpcGraph::forward(const std::int32_t *tokens, const std::int32_t *labels, NpcTally *tally) {
  set_inputs(tokens, labels);
  impl_->compute(impl_->eval);
  impl_->tally(impl_->eval, tally, labels);
}

std::vector<float> NpcGraph::logits() const {
  if (impl_->last == nullptr) fail(Errc::invalid_argument, "training graph: logits() before a forward pass");
  const ggml_tensor *l = impl_->last->acts.logits;
  std::vector<float> out(static_cast<std::size_t>(ggml_nelements(l)));
  ggml_backend_tensor_get(l, out.data(), 0, ggml_nbytes(l));
  return out;
}

std::vector<std::vector<float>> NpcGraph::gradients(const std::int32_t *tokens, const std::int32_t *labels,
                                                    bool automatic) {
  Impl &m = *impl_;
  if (m.train.graph == nullptr) fail(Errc::invalid_argument, "training graph: built for forward only");
  set_inputs(tokens, labels);
  std::vector<std::vector<float>> out;
  auto read = [&out](const ggml_tensor *t) {
    out.emplace_back(static_cast<std::size_t>(ggml_nelements(t)));
    ggml_backend_tensor_get(t, out.back().data(), 0, ggml_nbytes(t));
  };
  if (!automatic) {
    TrainPass p = m.make_pass(true, false);
    m.compute(p);
    m.last = nullptr;
    for (ggml_tensor *d : p.grads) read(d);
    return out;
  }
  // ggml's automatic backward pass over a second copy of the forward graph.
  ggml_init_params cp{ggml_tensor_overhead() * kGraph + 2 * ggml_graph_overhead_custom(kGraph, true), nullptr, true};
  GgmlPtr ctx(ggml_init(cp));
  const NpcActs acts = build_npc_forward(ctx.get(), m.net, /*differentiable=*/true);
  ggml_tensor *loss = ggml_cross_entropy_loss(ctx.get(), acts.logits, m.labels);
  ggml_set_loss(loss);
  ggml_cgraph *gb = ggml_new_graph_custom(ctx.get(), kGraph, /*grads=*/true);
  ggml_build_forward_expand(gb, loss);
  ggml_build_backward_expand(ctx.get(), gb, nullptr);
  ggml_set_input(ggml_graph_get_grad_acc(gb, loss));
  for (ggml_tensor *w : m.weights) {
    ggml_tensor *d = ggml_graph_get_grad(gb, w);
    if (d == nullptr) fail(Errc::backend, fmt::format("training graph: ggml found no gradient for '{}'", ggml_get_name(w)));
    ggml_set_output(d);
    ggml_build_forward_expand(gb, d);
  }
  ggml_backend_t backends[] = {m.backend};
  TrainSchedPtr sched(ggml_backend_sched_new(backends, nullptr, 1, kGraph, false, false));
  if (!ggml_backend_sched_alloc_graph(sched.get(), gb)) fail(Errc::backend, "training graph: could not allocate");
  ggml_graph_reset(gb);  // the loss's own gradient 1
  if (ggml_backend_sched_graph_compute(sched.get(), gb) != GGML_STATUS_SUCCESS) {
    fail(Errc::backend, "training graph: the CPU backend failed to compute the gradients");
  }
  for (ggml_tensor *w : m.weights) read(ggml_graph_get_grad(gb, w));
  return out;
}

void NpcGraph::store(ggml_context *data) const {
  for (ggml_tensor *t : impl_->weights) {
    ggml_tensor *dst = ggml_get_tensor(data, ggml_get_name(t));
    ggml_backend_tensor_get(t, dst->data, 0, ggml_nbytes(t));
  }
}

}  // namespace weft::detail
