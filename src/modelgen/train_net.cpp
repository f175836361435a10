// weft::detail::build_npc_forward / build_npc_backward. See train_net.hpp.
//
// Notation: ggml_mul_mat(a, b)[r, c] = sum_k a[k, r] * b[k, c]. A weight W is
// [in, out] and y = mul_mat(W, x); for a gradient g of y,
//   dW = mul_mat(xᵀ, gᵀ)   (reduces over the tokens)
//   dx = mul_mat(Wᵀ, g)    (reduces over out)
// with ᵀ a contiguous transposed copy, so every product is sgemm-shaped.
// ggml's sgemm (llamafile) takes a product only when the reduced length is a
// multiple of the SIMD width and the rows of the first operand a multiple of
// 4; the vocabulary (2,814 in the npc model) is neither, so the products over
// it are padded with zeros or turned round.
#include "modelgen/train_net.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#endif

namespace weft::detail {
namespace {

constexpr std::int64_t kPad = 16;  // the widest SIMD (AVX-512) in floats

std::int64_t pad_up(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }

const float *at(const ggml_tensor *t, std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) {
  return reinterpret_cast<const float *>(static_cast<const char *>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] +
                                         i2 * t->nb[2] + i3 * t->nb[3]);
}

// One 8 x 8 block: d row c, column r = s row r, column c (strides in bytes).
void block8_plain(const char *s, std::size_t sr, char *d, std::size_t dr) {
  float t[8][8];
  for (int r = 0; r < 8; ++r) std::memcpy(t[r], s + r * sr, sizeof t[r]);
  for (int c = 0; c < 8; ++c) {
    float *out = reinterpret_cast<float *>(d + c * dr);
    for (int r = 0; r < 8; ++r) out[r] = t[r][c];
  }
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
// The same in AVX registers (unpack/shuffle/permute), where the CPU has AVX:
// three times fewer instructions than the scalar block.
__attribute__((target("avx"))) void block8_avx(const char *s, std::size_t sr, char *d, std::size_t dr) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float *>(s + i * sr));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(reinterpret_cast<float *>(d + i * dr), _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(reinterpret_cast<float *>(d + (i + 4) * dr), _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

using Block8 = void (*)(const char *, std::size_t, char *, std::size_t);
Block8 pick_block8() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") ? block8_avx : block8_plain;
}
#else
using Block8 = void (*)(const char *, std::size_t, char *, std::size_t);
Block8 pick_block8() { return block8_plain; }
#endif

// dst[i0, i1] = src[i1, i0] (dims 2, 3 kept), zero where i0 >= src->ne[1].
// ggml's own copy of a transposed view moves one element per memcpy call;
// this moves 8 x 8 blocks, tiles of 64 rows per task.
void transpose_op(ggml_tensor *dst, int ith, int nth, void *) {
  static const Block8 block8 = pick_block8();
  const ggml_tensor *src = dst->src[0];
  constexpr std::int64_t kTile = 64, kB = 8;
  const std::int64_t n0 = src->ne[1], tiles1 = (dst->ne[1] + kTile - 1) / kTile;
  const std::int64_t units = tiles1 * dst->ne[2] * dst->ne[3];
  const std::size_t sr = src->nb[1], dr = dst->nb[1];
  for (std::int64_t u = ith; u < units; u += nth) {
    const std::int64_t i1a = (u % tiles1) * kTile, i2 = (u / tiles1) % dst->ne[2], i3 = u / tiles1 / dst->ne[2];
    const std::int64_t i1b = std::min(i1a + kTile, dst->ne[1]);
    const char *s0 = static_cast<const char *>(src->data) + i2 * src->nb[2] + i3 * src->nb[3];
    char *d0 = static_cast<char *>(dst->data) + i2 * dst->nb[2] + i3 * dst->nb[3];
    const bool blocks = src->nb[0] == sizeof(float);
    for (std::int64_t i1 = i1a; i1 < i1b; i1 += kB) {
      const std::int64_t n1 = std::min(kB, i1b - i1);
      std::int64_t i0 = 0;
      for (; blocks && n1 == kB && i0 + kB <= n0; i0 += kB) {
        block8(s0 + i0 * sr + i1 * sizeof(float), sr, d0 + i1 * dr + i0 * sizeof(float), dr);
      }
      for (std::int64_t c = 0; c < n1; ++c) {
        float *d = reinterpret_cast<float *>(d0 + (i1 + c) * dr);
        for (std::int64_t j = i0; j < n0; ++j) d[j] = *at(src, i1 + c, j, i2, i3);
        std::fill(d + n0, d + dst->ne[0], 0.0f);
      }
    }
  }
}

// dst[i0, i1] = src[i0, i1], zero where i0 >= src->ne[0] (src rows contiguous).
void pad_rows_op(ggml_tensor *dst, int ith, int nth, void *) {
  const ggml_tensor *src = dst->src[0];
  const std::int64_t rows = dst->ne[1] * dst->ne[2] * dst->ne[3];
  for (std::int64_t r = ith; r < rows; r += nth) {
    const std::int64_t i1 = r % dst->ne[1], i2 = (r / dst->ne[1]) % dst->ne[2], i3 = r / dst->ne[1] / dst->ne[2];
    float *d = reinterpret_cast<float *>(static_cast<char *>(dst->data) + i1 * dst->nb[1] + i2 * dst->nb[2] +
                                         i3 * dst->nb[3]);
    std::memcpy(d, at(src, 0, i1, i2, i3), static_cast<std::size_t>(src->ne[0]) * sizeof(float));
    std::fill(d + src->ne[0], d + dst->ne[0], 0.0f);
  }
}

// A contiguous transposed copy, its new rows padded with zeros to `pad`.
ggml_tensor *tr(ggml_context *ctx, ggml_tensor *x, std::int64_t pad = 1) {
  ggml_tensor *args[] = {x};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, pad_up(x->ne[1], pad), x->ne[0], x->ne[2], x->ne[3], args, 1,
                        transpose_op, GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor *pad_rows(ggml_context *ctx, ggml_tensor *x, std::int64_t pad) {
  ggml_tensor *args[] = {x};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, pad_up(x->ne[0], pad), x->ne[1], x->ne[2], x->ne[3], args, 1,
                        pad_rows_op, GGML_N_TASKS_MAX, nullptr);
}

// [hd, heads, T, B] <-> [hd, T, heads, B]: the permutation is its own inverse.
ggml_tensor *swap12(ggml_context *ctx, ggml_tensor *x) { return ggml_cont(ctx, ggml_permute(ctx, x, 0, 2, 1, 3)); }

struct Rope {
  const NpcNet &net;
  ggml_tensor *fwd(ggml_context *ctx, ggml_tensor *x) const {
    return ggml_rope_ext(ctx, x, net.pos, nullptr, net.n_rot, GGML_ROPE_TYPE_NORMAL, net.n_ctx_train, net.freq_base,
                         /*freq_scale=*/1.0f, /*ext_factor=*/0.0f, /*attn_factor=*/1.0f, /*beta_fast=*/32.0f,
                         /*beta_slow=*/1.0f);
  }
  ggml_tensor *back(ggml_context *ctx, ggml_tensor *g) const {
    return ggml_rope_ext_back(ctx, g, net.pos, nullptr, net.n_rot, GGML_ROPE_TYPE_NORMAL, net.n_ctx_train,
                              net.freq_base, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
  }
};

// rms_norm(x) * w; *n: rms_norm(x), which the backward pass reads again.
ggml_tensor *norm(ggml_context *ctx, const NpcNet &net, ggml_tensor *x, ggml_tensor *w, ggml_tensor **n) {
  *n = ggml_rms_norm(ctx, x, net.eps);
  return ggml_mul(ctx, *n, w);
}

// Gradients of norm(x, w) (n = rms_norm(x)) given dy: sets dw, returns dx.
ggml_tensor *norm_back(ggml_context *ctx, const NpcNet &net, ggml_tensor *x, ggml_tensor *n, ggml_tensor *w,
                       ggml_tensor *dy, ggml_tensor **dw) {
  *dw = ggml_repeat_back(ctx, ggml_mul(ctx, n, dy), w);
  return ggml_rms_norm_back(ctx, ggml_mul(ctx, dy, w), x, net.eps);
}

}  // namespace

// llm_build_llama, op for op (attention as build_attn_mha without flash
// attention: kq = K*Q, causal softmax scaled by 1/sqrt(head_dim), V*kq).
NpcActs build_npc_forward(ggml_context *ctx, const NpcNet &net, bool differentiable) {
  const int T = net.n_ctx, B = net.n_seq, N = T * B, E = net.n_embd, H = net.n_head, hd = E / H;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Rope rope{net};
  NpcActs a;
  ggml_tensor *x = ggml_get_rows(ctx, net.tok_embd, net.tokens);  // [E, N]
  for (const NpcLayer &L : net.layers) {
    NpcLayerActs s{};
    s.x_in = x;
    s.cur1 = norm(ctx, net, x, L.attn_norm, &s.n1);
    ggml_tensor *q = rope.fwd(ctx, ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wq, s.cur1), hd, H, N));
    ggml_tensor *k = rope.fwd(ctx, ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wk, s.cur1), hd, H, N));
    ggml_tensor *v = ggml_mul_mat(ctx, L.wv, s.cur1);
    s.q4 = swap12(ctx, ggml_reshape_4d(ctx, q, hd, H, T, B));  // [hd, T, H, B]
    s.k4 = swap12(ctx, ggml_reshape_4d(ctx, k, hd, H, T, B));
    s.vt = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, v, hd, H, T, B), 1, 2, 0, 3));  // [T, hd, H, B]
    ggml_tensor *kq = ggml_mul_mat(ctx, s.k4, s.q4);  // [T_k, T_q, H, B]
    kq = ggml_diag_mask_inf(ctx, kq, 0);
    s.p = ggml_soft_max_ext(ctx, kq, nullptr, kq_scale, 0.0f);
    ggml_tensor *kqv = ggml_mul_mat(ctx, s.vt, s.p);                        // [hd, T_q, H, B]
    s.o = ggml_reshape_2d(ctx, swap12(ctx, kqv), E, N);                     // [E, N]
    s.x_mid = ggml_add(ctx, ggml_mul_mat(ctx, L.wo, s.o), x);
    s.cur2 = norm(ctx, net, s.x_mid, L.ffn_norm, &s.n2);
    s.g = ggml_mul_mat(ctx, L.gate, s.cur2);
    s.u = ggml_mul_mat(ctx, L.up, s.cur2);
    s.h = ggml_swiglu_split(ctx, s.g, s.u);
    x = ggml_add(ctx, ggml_mul_mat(ctx, L.down, s.h), s.x_mid);
    a.layers.push_back(s);
  }
  a.x_last = x;
  a.cur_last = norm(ctx, net, x, net.out_norm, &a.n_last);
  // [n_vocab, N]; the fast way round computes [N, n_vocab] and transposes it
  // (ggml cannot differentiate the custom transpose).
  a.logits = differentiable ? ggml_mul_mat(ctx, net.output, a.cur_last) : tr(ctx, ggml_mul_mat(ctx, a.cur_last, net.output));
  return a;
}

std::vector<ggml_tensor *> npc_params(const NpcNet &net) {
  std::vector<ggml_tensor *> p{net.tok_embd};
  for (const NpcLayer &L : net.layers) {
    p.insert(p.end(), {L.attn_norm, L.wq, L.wk, L.wv, L.wo, L.ffn_norm, L.gate, L.up, L.down});
  }
  p.push_back(net.out_norm);
  if (net.output != net.tok_embd) p.push_back(net.output);
  return p;
}

std::vector<ggml_tensor *> build_npc_backward(ggml_context *ctx, const NpcNet &net, const NpcActs &a,
                                              ggml_tensor *dlogits) {
  const int T = net.n_ctx, B = net.n_seq, N = T * B, E = net.n_embd, H = net.n_head, hd = E / H;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Rope rope{net};
  auto wgrad = [&](ggml_tensor *xt, ggml_tensor *g) { return ggml_mul_mat(ctx, xt, tr(ctx, g)); };
  auto xgrad = [&](ggml_tensor *w, ggml_tensor *g) { return ggml_mul_mat(ctx, tr(ctx, w), g); };

  std::vector<ggml_tensor *> layer_grads;  // 9 per layer, last layer first
  ggml_tensor *d_output = wgrad(tr(ctx, a.cur_last), dlogits);
  ggml_tensor *d_out_norm = nullptr;
  ggml_tensor *dcur_last = ggml_mul_mat(ctx, tr(ctx, net.output, kPad), pad_rows(ctx, dlogits, kPad));
  ggml_tensor *dx = norm_back(ctx, net, a.x_last, a.n_last, net.out_norm, dcur_last, &d_out_norm);
  for (std::size_t l = net.layers.size(); l-- > 0;) {
    const NpcLayer &L = net.layers[l];
    const NpcLayerActs &s = a.layers[l];
    // FFN: x_out = x_mid + down * swiglu(gate * cur2, up * cur2)
    ggml_tensor *d_down = wgrad(tr(ctx, s.h), dx);
    ggml_tensor *dh = xgrad(L.down, dx);
    ggml_tensor *dg = ggml_silu_back(ctx, ggml_mul(ctx, dh, s.u), s.g);
    ggml_tensor *du = ggml_mul(ctx, ggml_silu(ctx, s.g), dh);
    ggml_tensor *cur2t = tr(ctx, s.cur2);
    ggml_tensor *d_gate = wgrad(cur2t, dg), *d_up = wgrad(cur2t, du);
    ggml_tensor *d_ffn_norm = nullptr;
    ggml_tensor *dx_mid =
        ggml_add(ctx, dx, norm_back(ctx, net, s.x_mid, s.n2, L.ffn_norm,
                                    ggml_add(ctx, xgrad(L.gate, dg), xgrad(L.up, du)), &d_ffn_norm));
    // Attention: x_mid = x_in + wo * o
    ggml_tensor *d_wo = wgrad(tr(ctx, s.o), dx_mid);
    ggml_tensor *dkqv = swap12(ctx, ggml_reshape_4d(ctx, xgrad(L.wo, dx_mid), hd, H, T, B));  // [hd, T_q, H, B]
    ggml_tensor *dp = ggml_mul_mat(ctx, tr(ctx, s.vt), dkqv);                                 // [T_k, T_q, H, B]
    ggml_tensor *dv4 = ggml_mul_mat(ctx, tr(ctx, dkqv), tr(ctx, s.p));                        // [hd, T_k, H, B]
    // Masked entries have p = 0, so their gradient is 0 already.
    ggml_tensor *dkq = ggml_soft_max_ext_back(ctx, dp, s.p, kq_scale, 0.0f);
    ggml_tensor *dq4 = ggml_mul_mat(ctx, tr(ctx, s.k4), dkq);             // [hd, T_q, H, B]
    ggml_tensor *dk4 = ggml_mul_mat(ctx, tr(ctx, s.q4), tr(ctx, dkq));    // [hd, T_k, H, B]
    auto unheads = [&](ggml_tensor *d4) { return ggml_reshape_3d(ctx, swap12(ctx, d4), hd, H, N); };
    ggml_tensor *dq = ggml_reshape_2d(ctx, rope.back(ctx, unheads(dq4)), E, N);
    ggml_tensor *dk = ggml_reshape_2d(ctx, rope.back(ctx, unheads(dk4)), E, N);
    ggml_tensor *dv = ggml_reshape_2d(ctx, swap12(ctx, dv4), E, N);
    ggml_tensor *cur1t = tr(ctx, s.cur1);
    ggml_tensor *d_wq = wgrad(cur1t, dq), *d_wk = wgrad(cur1t, dk), *d_wv = wgrad(cur1t, dv);
    ggml_tensor *dcur1 = ggml_add(ctx, ggml_add(ctx, xgrad(L.wq, dq), xgrad(L.wk, dk)), xgrad(L.wv, dv));
    ggml_tensor *d_attn_norm = nullptr;
    dx = ggml_add(ctx, dx_mid, norm_back(ctx, net, s.x_in, s.n1, L.attn_norm, dcur1, &d_attn_norm));
    layer_grads.insert(layer_grads.end(), {d_attn_norm, d_wq, d_wk, d_wv, d_wo, d_ffn_norm, d_gate, d_up, d_down});
  }
  ggml_tensor *d_tok_embd = ggml_get_rows_back(ctx, dx, net.tokens, net.tok_embd);
  if (net.output == net.tok_embd) d_tok_embd = ggml_add(ctx, d_tok_embd, d_output);

  std::vector<ggml_tensor *> grads{d_tok_embd};
  for (std::size_t l = 0; l < net.layers.size(); ++l) {
    const auto first = layer_grads.begin() + static_cast<std::ptrdiff_t>((net.layers.size() - 1 - l) * 9);
    grads.insert(grads.end(), first, first + 9);
  }
  grads.push_back(d_out_norm);
  if (net.output != net.tok_embd) grads.push_back(d_output);
  return grads;
}

}  // namespace weft::detail
