// Per-architecture GGUF keys and tensors of the random-weight models, after
// the pinned llama.cpp's src/models/{llama,gemma3,lfm2,mamba}.cpp loaders.
#include "modelgen/model_arch.hpp"

#include <gguf.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "modelgen/splitmix.hpp"

namespace weft::detail {
namespace {

struct Keys {
  gguf_context *g;
  std::string arch;
  std::string key(const char *k) const { return arch + "." + k; }
  void u32(const char *k, int64_t v) const { gguf_set_val_u32(g, key(k).c_str(), static_cast<uint32_t>(v)); }
  void f32(const char *k, float v) const { gguf_set_val_f32(g, key(k).c_str(), v); }
};

// Tensor list builder: matrices in the weight type, vectors f32 and 1.
struct List {
  std::vector<WeightSpec> t;
  void mat(std::string name, int64_t ne0, int64_t ne1, float std, int64_t ne2 = 1) {
    t.push_back({std::move(name), ne0, ne1, ne2, true, Fill::normal, std});
  }
  void f32(std::string name, int64_t ne0, int64_t ne1, Fill fill, float std = 0) {
    t.push_back({std::move(name), ne0, ne1, 1, false, fill, std});
  }
  void norm(std::string name, int64_t n) { f32(std::move(name), n, 1, Fill::ones); }
};

}  // namespace

MambaSizes mamba_sizes(const ModelShape &s) {
  return {2 * int64_t(s.n_embd), 16, 4, (int64_t(s.n_embd) + 15) / 16};
}

uint32_t gemma3_swa_pattern(int n_layer) { return static_cast<uint32_t>(std::min(n_layer, 6)); }

const char *gguf_arch(ModelArch arch) noexcept {
  switch (arch) {
    case ModelArch::llama:
    case ModelArch::moe: return "llama";
    case ModelArch::gemma3: return "gemma3";
    case ModelArch::lfm2: return "lfm2";
    case ModelArch::mamba: return "mamba";
  }
  return "llama";
}

void set_arch_keys(gguf_context *g, ModelArch arch, const ModelShape &s, int64_t n_vocab, int sliding_window) {
  const Keys k{g, gguf_arch(arch)};
  const int64_t head = s.n_embd / s.n_head;
  k.u32("context_length", s.n_ctx_train);
  k.u32("embedding_length", s.n_embd);
  k.u32("block_count", s.n_layer);
  switch (arch) {
    case ModelArch::llama:
    case ModelArch::moe:
      k.u32("feed_forward_length", s.n_ff);
      k.u32("attention.head_count", s.n_head);
      k.u32("attention.head_count_kv", s.n_head_kv);
      k.u32("rope.dimension_count", head);
      k.f32("rope.freq_base", 10000.0f);
      k.f32("attention.layer_norm_rms_epsilon", 1e-5f);
      k.u32("vocab_size", n_vocab);
      if (arch == ModelArch::moe) {
        k.u32("expert_count", kMoeExperts);
        k.u32("expert_used_count", kMoeExpertsUsed);
      }
      return;
    case ModelArch::gemma3:
      k.u32("feed_forward_length", s.n_ff);
      k.u32("attention.head_count", s.n_head);
      k.u32("attention.head_count_kv", s.n_head_kv);
      k.u32("attention.key_length", head);
      k.u32("attention.value_length", head);
      // Gemma 3's: 1e6 for the global layers, 1e4 for the local ones.
      k.f32("rope.freq_base", 1000000.0f);
      k.f32("rope.freq_base_swa", 10000.0f);
      k.f32("attention.layer_norm_rms_epsilon", 1e-6f);
      k.u32("attention.sliding_window", sliding_window);
      k.u32("attention.sliding_window_pattern", gemma3_swa_pattern(s.n_layer));
      return;
    case ModelArch::lfm2: {
      k.u32("feed_forward_length", s.n_ff);
      k.u32("attention.head_count", s.n_head);
      // Per layer: 0 KV heads marks a short-convolution (recurrent) layer.
      std::vector<int32_t> kv(static_cast<std::size_t>(s.n_layer));
      for (int il = 0; il < s.n_layer; ++il) kv[std::size_t(il)] = lfm2_is_attention(il) ? s.n_head_kv : 0;
      gguf_set_arr_data(g, k.key("attention.head_count_kv").c_str(), GGUF_TYPE_INT32, kv.data(), kv.size());
      k.f32("rope.freq_base", 1000000.0f);
      k.f32("attention.layer_norm_rms_epsilon", 1e-5f);
      k.u32("shortconv.l_cache", kLfm2ConvCache);
      k.u32("vocab_size", n_vocab);
      return;
    }
    case ModelArch::mamba: {
      const MambaSizes m = mamba_sizes(s);
      k.u32("feed_forward_length", 0);
      k.u32("attention.head_count", 0);
      k.f32("attention.layer_norm_rms_epsilon", 1e-5f);
      k.u32("ssm.conv_kernel", m.d_conv);
      k.u32("ssm.inner_size", m.d_inner);
      k.u32("ssm.state_size", m.d_state);
      k.u32("ssm.time_step_rank", m.dt_rank);
      k.u32("vocab_size", n_vocab);
      return;
    }
  }
}

std::vector<WeightSpec> arch_tensor_list(ModelArch arch, const ModelShape &s, int64_t n_vocab, float std_embd,
                                         float std_kv) {
  const int64_t head = s.n_embd / s.n_head;
  const int64_t q = head * s.n_head, kv = head * s.n_head_kv;
  const float std = 0.02f;
  if (std_embd <= 0) std_embd = std;
  if (std_kv <= 0) std_kv = std;
  // Each block's output projections, scaled for depth (GPT-2).
  const float proj = std / std::sqrt(2.0f * static_cast<float>(s.n_layer));
  const float fan_in_embd = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  List l;
  l.mat("token_embd.weight", s.n_embd, n_vocab, std_embd);
  auto attention = [&](const std::string &b, bool qk_norm) {
    l.mat(b + "attn_q.weight", s.n_embd, q, std);
    l.mat(b + "attn_k.weight", s.n_embd, kv, std_kv);
    l.mat(b + "attn_v.weight", s.n_embd, kv, std_kv);
    l.mat(b + "attn_output.weight", q, s.n_embd, proj);
    if (qk_norm) {
      l.norm(b + "attn_q_norm.weight", head);
      l.norm(b + "attn_k_norm.weight", head);
    }
  };
  auto ffn = [&](const std::string &b) {
    l.mat(b + "ffn_gate.weight", s.n_embd, s.n_ff, std);
    l.mat(b + "ffn_up.weight", s.n_embd, s.n_ff, std);
    l.mat(b + "ffn_down.weight", s.n_ff, s.n_embd, proj);
  };
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string b = fmt::format("blk.{}.", il);
    switch (arch) {
      case ModelArch::llama:
      case ModelArch::moe:
        l.norm(b + "attn_norm.weight", s.n_embd);
        attention(b, false);
        l.norm(b + "ffn_norm.weight", s.n_embd);
        if (arch == ModelArch::llama) {
          ffn(b);
        } else {
          // The router stays f32, as llama-quantize leaves it.
          l.f32(b + "ffn_gate_inp.weight", s.n_embd, kMoeExperts, Fill::normal, std);
          l.mat(b + "ffn_gate_exps.weight", s.n_embd, s.n_ff, std, kMoeExperts);
          l.mat(b + "ffn_up_exps.weight", s.n_embd, s.n_ff, std, kMoeExperts);
          l.mat(b + "ffn_down_exps.weight", s.n_ff, s.n_embd, proj, kMoeExperts);
        }
        break;
      case ModelArch::gemma3:
        l.norm(b + "attn_norm.weight", s.n_embd);
        attention(b, true);
        l.norm(b + "post_attention_norm.weight", s.n_embd);
        l.norm(b + "ffn_norm.weight", s.n_embd);
        ffn(b);
        l.norm(b + "post_ffw_norm.weight", s.n_embd);
        break;
      case ModelArch::lfm2:
        l.norm(b + "attn_norm.weight", s.n_embd);  // LFM2's operator norm
        if (lfm2_is_attention(il)) {
          attention(b, true);
        } else {
          // Kernels f32, as llama-quantize leaves them.
          l.f32(b + "shortconv.conv.weight", kLfm2ConvCache, s.n_embd, Fill::normal,
                1.0f / std::sqrt(float(kLfm2ConvCache)));
          // Fan-in scale: B * conv(C * x) multiplies three projections, which
          // at 0.02 would leave the convolution a vanishing share of the residual.
          l.mat(b + "shortconv.in_proj.weight", s.n_embd, 3 * int64_t(s.n_embd), fan_in_embd);
          l.mat(b + "shortconv.out_proj.weight", s.n_embd, s.n_embd, proj);
        }
        l.norm(b + "ffn_norm.weight", s.n_embd);
        ffn(b);
        break;
      case ModelArch::mamba: {
        const MambaSizes m = mamba_sizes(s);
        l.norm(b + "attn_norm.weight", s.n_embd);
        // Mamba's own fan-in initialisation inside the block (its products of
        // x, B, C and dt would vanish at 0.02), the output projection as llama's.
        l.mat(b + "ssm_in.weight", s.n_embd, 2 * m.d_inner, fan_in_embd);
        l.f32(b + "ssm_conv1d.weight", m.d_conv, m.d_inner, Fill::normal, 1.0f / std::sqrt(float(m.d_conv)));
        l.f32(b + "ssm_conv1d.bias", m.d_inner, 1, Fill::zeros);
        l.mat(b + "ssm_x.weight", m.d_inner, m.dt_rank + 2 * m.d_state, 1.0f / std::sqrt(float(m.d_inner)));
        // dt_rank-wide rows (4 for tiny) fit no quantised block: f32.
        l.f32(b + "ssm_dt.weight", m.dt_rank, m.d_inner, Fill::normal, 1.0f / std::sqrt(float(m.dt_rank)));
        l.f32(b + "ssm_dt.bias", m.d_inner, 1, Fill::dt_bias);
        l.f32(b + "ssm_a", m.d_state, m.d_inner, Fill::ssm_a);
        l.f32(b + "ssm_d", m.d_inner, 1, Fill::ones);
        l.mat(b + "ssm_out.weight", m.d_inner, s.n_embd, proj);
        break;
      }
    }
  }
  l.norm(arch == ModelArch::lfm2 ? "token_embd_norm.weight" : "output_norm.weight", s.n_embd);
  if (!s.tied_output) l.mat("output.weight", s.n_embd, n_vocab, std);
  return std::move(l.t);
}

void fill_weight(const WeightSpec &w, std::uint64_t seed, std::vector<float> &out) {
  out.resize(static_cast<std::size_t>(w.ne0 * w.ne1 * w.ne2));
  switch (w.fill) {
    case Fill::normal: fill_normal(out, seed, w.name, w.std); return;
    case Fill::ones: std::fill(out.begin(), out.end(), 1.0f); return;
    case Fill::zeros: std::fill(out.begin(), out.end(), 0.0f); return;
    case Fill::ssm_a:
      // ne0 = d_state: A[i][s] = -exp(A_log) with A_log = log(s + 1), exactly -(s + 1).
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = -static_cast<float>(i % std::size_t(w.ne0) + 1);
      return;
    case Fill::dt_bias: {
      // Mamba's initialisation: dt log-uniform in [0.001, 0.1] (here evenly
      // log-spaced over the channels), stored as softplus^-1(dt).
      const double lo = std::log(0.001), hi = std::log(0.1);
      const std::size_t n = out.size();
      for (std::size_t i = 0; i < n; ++i) {
        const double dt = std::exp(lo + (hi - lo) * (n > 1 ? double(i) / double(n - 1) : 0.0));
        out[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
      }
      return;
    }
  }
}

}  // namespace weft::detail
