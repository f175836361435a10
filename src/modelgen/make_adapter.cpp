// weft::make_adapter: seeded random LoRA adapters and control vectors in the
// GGUF layouts stock llama.cpp reads (src/llama-adapter.cpp's
// llama_adapter_lora_init; common/common.cpp's control vector loader, which
// reads what tools/cvector-generator writes).
//
// The base is read with gguf.h (metadata, tensor shapes) and, for the RMS the
// adapter is scaled against, the target tensors' bytes, dequantized with
// ggml's own row converters. The output is streamed tensor by tensor.
#include <ggml-backend.h>
#include <ggml.h>
#include <gguf.h>
#include <llama.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "modelgen/gguf_keys.hpp"
#include "modelgen/splitmix.hpp"
#include "weft/make_adapter.hpp"

namespace weft {
namespace {

using Rng = detail::SplitMix64;

struct GgufDelete {
  void operator()(gguf_context *c) const { gguf_free(c); }
};
struct GgmlDelete {
  void operator()(ggml_context *c) const { ggml_free(c); }
};
using Gguf = std::unique_ptr<gguf_context, GgufDelete>;
using Ggml = std::unique_ptr<ggml_context, GgmlDelete>;
using File = detail::FilePtr;

// The per-block LoRA targets llama.cpp's llama graph routes through
// build_lora_mm, plus the untied output projection.
constexpr const char *kBlockTargets[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
constexpr const char *kOutputTarget = "output";

// `strength` is a nominal effect size: at 1, the mean |Δlogit| of a prompt's
// last token is about the spread (std over the vocabulary) of the base
// logits on the random presets. Random weights give no meaning to go by, so
// the mapping is empirical (docs/ADAPTER_FILES.md has the sweep):
//  - LoRA: RMS((alpha/rank)·B·A) = kLoraGain·strength/n_layer · RMS(W). The
//    blocks' changes compound through the residual stream: on tiny (2
//    layers) and small (30) the effect grew like n_layer^0.85 at a fixed
//    per-tensor size, so dividing by n_layer keeps the presets within 1.5x.
//  - Control vector: each layer's direction has per-element std
//    kCvecGain·strength·scale(l)/sqrt(n_layer-1), scale(l) a robust std of
//    the residual stream after block l, measured by running the base on a
//    fixed prompt: weights alone do not tell it (in the trained npc model it
//    is ~100x token_embd's scale).
constexpr double kLoraGain = 6.0;
constexpr double kCvecGain = 1.5;
constexpr int kProbeTokens = 32;

// Same scheme as make_model: one splitmix64 stream per tensor.
using detail::fill_normal;
using detail::gguf_int;
using detail::gguf_str;

// The base model: metadata and tensor infos (no data).
struct Base {
  std::string path;
  Gguf gguf;
  Ggml meta;
  std::string arch, name;
  int64_t n_layer = 0, n_embd = 0;
  std::uint64_t file_size = 0;

  ggml_tensor *tensor(const std::string &tname) const { return ggml_get_tensor(meta.get(), tname.c_str()); }

  // RMS of a tensor's values, dequantized row by row with ggml's converters.
  double rms(const ggml_tensor *t) const {
    const int64_t id = gguf_find_tensor(gguf.get(), t->name);
    const std::size_t offset = gguf_get_data_offset(gguf.get()) + gguf_get_tensor_offset(gguf.get(), id);
    const std::size_t nbytes = ggml_nbytes(t);
    if (offset > file_size || nbytes > file_size - offset) {
      detail::fail(Errc::corrupt, fmt::format("base '{}': tensor '{}' ({} bytes at offset {}) lies outside the "
                                              "file ({} bytes)", path, t->name, nbytes, offset, file_size));
    }
    const auto *traits = ggml_get_type_traits(t->type);
    if (t->type != GGML_TYPE_F32 && traits->to_float == nullptr) {
      detail::fail(Errc::incompatible, fmt::format("base '{}': tensor '{}' has type {}, which ggml cannot convert to "
                                                   "f32", path, t->name, ggml_type_name(t->type)));
    }
    File f(detail::open_file(path, "rb"));
    if (!f) detail::fail(Errc::io, fmt::format("cannot open base '{}': {}", path, std::strerror(errno)));
    std::vector<char> bytes(nbytes);
    if (fseeko(f.get(), static_cast<off_t>(offset), SEEK_SET) != 0 ||
        std::fread(bytes.data(), 1, nbytes, f.get()) != nbytes) {
      detail::fail(Errc::io, fmt::format("reading tensor '{}' of base '{}' failed", t->name, path));
    }
    const int64_t ne0 = t->ne[0], rows = ggml_nrows(t);
    const double sum = detail::rows_sum_squares(t, bytes.data(), rows);
    const double n = double(ne0) * double(rows);
    const double value = n > 0 ? std::sqrt(sum / n) : 0.0;
    // A zero or broken tensor gives no scale to follow: use the generated
    // presets' weight std, so the adapter still has an effect.
    return std::isfinite(value) && value > 0 ? value : 0.02;
  }
};

Base open_base(const std::string &path) {
  detail::require_regular_file(path, "base model");
  Base b;
  b.path = path;
  std::error_code ec;
  b.file_size = std::filesystem::file_size(detail::u8_path(path), ec);
  if (ec) detail::fail(Errc::io, fmt::format("cannot stat base '{}': {}", path, ec.message()));
  ggml_context *meta = nullptr;
  gguf_init_params gp{/*no_alloc=*/true, /*ctx=*/&meta};
  b.gguf.reset(gguf_init_from_file(path.c_str(), gp));
  b.meta.reset(meta);
  if (!b.gguf) detail::fail(Errc::corrupt, fmt::format("base '{}' is not a readable GGUF model", path));
  if (gguf_str(b.gguf.get(), "general.type") == "adapter" ||
      gguf_find_key(b.gguf.get(), "controlvector.layer_count") >= 0) {
    detail::fail(Errc::invalid_argument, fmt::format("base '{}' is an adapter, not a base model", path));
  }
  b.arch = gguf_str(b.gguf.get(), "general.architecture");
  if (b.arch.empty()) detail::fail(Errc::corrupt, fmt::format("base '{}' has no general.architecture", path));
  b.name = gguf_str(b.gguf.get(), "general.name");
  b.n_layer = gguf_int(b.gguf.get(), b.arch + ".block_count");
  b.n_embd = gguf_int(b.gguf.get(), b.arch + ".embedding_length");
  if (b.n_layer <= 0 || b.n_embd <= 0) {
    detail::fail(Errc::corrupt, fmt::format("base '{}' lacks {}.block_count or {}.embedding_length", path, b.arch,
                                            b.arch));
  }
  return b;
}

void check_params(const MakeAdapterParams &p) {
  if (p.base.empty()) detail::fail(Errc::invalid_argument, "MakeAdapterParams.base is empty");
  if (p.out.empty()) detail::fail(Errc::invalid_argument, "MakeAdapterParams.out is empty");
  if (!std::isfinite(p.strength) || p.strength <= 0) {
    detail::fail(Errc::invalid_argument, fmt::format("strength {} must be positive and finite", p.strength));
  }
  if (p.kind != AdapterKind::lora) return;
  if (p.rank < 1) detail::fail(Errc::invalid_argument, fmt::format("LoRA rank {} is below 1", p.rank));
  // alpha 0 means "no alpha" to llama.cpp (scale = user scale); the weights
  // here are drawn for alpha / rank, so it must be a real positive number.
  if (!std::isfinite(p.alpha) || p.alpha <= 0) {
    detail::fail(Errc::invalid_argument, fmt::format("LoRA alpha {} must be positive and finite", p.alpha));
  }
  if (p.targets.empty()) detail::fail(Errc::invalid_argument, "no LoRA targets given");
  for (std::size_t i = 0; i < p.targets.size(); ++i) {
    const std::string &t = p.targets[i];
    const bool known = t == kOutputTarget || std::any_of(std::begin(kBlockTargets), std::end(kBlockTargets),
                                                         [&](const char *k) { return t == k; });
    if (!known) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("unknown LoRA target '{}' (expected {}, {})", t, fmt::join(kBlockTargets, ", "),
                               kOutputTarget));
    }
    if (std::find(p.targets.begin(), p.targets.begin() + static_cast<std::ptrdiff_t>(i), t) !=
        p.targets.begin() + static_cast<std::ptrdiff_t>(i)) {
      detail::fail(Errc::invalid_argument, fmt::format("LoRA target '{}' is listed twice", t));
    }
  }
}

// One tensor of the output: its info in `meta` and how to fill it.
struct OutTensor {
  ggml_tensor *info;
  std::string stream;  // the RNG stream's name
  double std;
};

void write_all(const MakeAdapterParams &p, gguf_context *g, const std::vector<OutTensor> &tensors) {
  std::size_t total = 0;
  for (const auto &t : tensors) total += ggml_nbytes(t.info);
  detail::TempFile file(p.out);
  std::vector<char> header(gguf_get_meta_size(g));
  gguf_get_meta_data(g, header.data());
  file.write(header.data(), header.size());
  static constexpr char zeros[64] = {};
  const std::size_t align = gguf_get_alignment(g);
  std::vector<float> data;
  std::size_t done = 0;
  for (const auto &t : tensors) {
    data.resize(static_cast<std::size_t>(ggml_nelements(t.info)));
    fill_normal(data, p.seed, t.stream, t.std);
    const std::size_t n = ggml_nbytes(t.info);
    file.write(data.data(), n);
    file.write(zeros, (align - n % align) % align);
    done += n;
    if (p.on_progress) p.on_progress(static_cast<float>(done) / static_cast<float>(std::max<std::size_t>(total, 1)));
  }
  file.commit();
}

void set_common_meta(gguf_context *g, const MakeAdapterParams &p, const Base &b) {
  const char *kind = p.kind == AdapterKind::lora ? "lora" : "cvec";
  gguf_set_val_str(g, "general.name", fmt::format("weft-{}-seed{}", kind, p.seed).c_str());
  gguf_set_val_u64(g, "weft.seed", p.seed);
  gguf_set_val_f32(g, "weft.strength", p.strength);
  if (!b.name.empty()) gguf_set_val_str(g, "weft.base_name", b.name.c_str());
}

void make_lora(const MakeAdapterParams &p, const Base &b) {
  // The base tensors, in block order, then output.
  std::vector<ggml_tensor *> weights;
  for (int64_t l = 0; l < b.n_layer; ++l) {
    for (const auto &t : p.targets) {
      if (t == kOutputTarget) continue;
      const std::string name = fmt::format("blk.{}.{}.weight", l, t);
      ggml_tensor *w = b.tensor(name);
      if (w == nullptr) {
        detail::fail(Errc::incompatible, fmt::format("base '{}' ({}) has no tensor '{}' for LoRA target '{}'", b.path,
                                                     b.arch, name, t));
      }
      weights.push_back(w);
    }
  }
  if (std::find(p.targets.begin(), p.targets.end(), kOutputTarget) != p.targets.end()) {
    ggml_tensor *w = b.tensor("output.weight");
    if (w == nullptr) {
      detail::fail(Errc::incompatible, fmt::format("base '{}' has no 'output.weight' (its output is tied to "
                                                   "token_embd): drop the 'output' target", b.path));
    }
    weights.push_back(w);
  }
  for (ggml_tensor *w : weights) {
    if (ggml_n_dims(w) != 2) {
      detail::fail(Errc::incompatible, fmt::format("base '{}': LoRA target '{}' is not a matrix", b.path, w->name));
    }
    const int64_t limit = std::min(w->ne[0], w->ne[1]);
    if (p.rank > limit) {
      detail::fail(Errc::invalid_argument, fmt::format("LoRA rank {} exceeds {}, the smaller dimension of '{}' "
                                                       "({}x{})", p.rank, limit, w->name, w->ne[0], w->ne[1]));
    }
  }

  Gguf out(gguf_init_empty());
  gguf_context *g = out.get();
  gguf_set_val_str(g, "general.type", "adapter");
  gguf_set_val_str(g, "general.architecture", b.arch.c_str());
  gguf_set_val_str(g, "adapter.type", "lora");
  gguf_set_val_f32(g, "adapter.lora.alpha", p.alpha);
  set_common_meta(g, p, b);

  ggml_init_params ip{ggml_tensor_overhead() * (2 * weights.size() + 8), nullptr, /*no_alloc=*/true};
  Ggml meta(ggml_init(ip));
  std::vector<OutTensor> tensors;
  const double rank = p.rank;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const ggml_tensor *w = weights[i];
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    // llama.cpp computes W·x + (alpha/rank)·B·(A·x). A ~ N(0, 1/n_in) keeps
    // A·x at the scale of x; B's std then makes (alpha/rank)·B·A have RMS
    // alpha·std_a·std_b/sqrt(rank) = target.
    const double target = kLoraGain * p.strength / double(b.n_layer) * b.rms(w);
    const double std_a = 1.0 / std::sqrt(double(n_in));
    const double std_b = target * std::sqrt(rank) / (p.alpha * std_a);
    ggml_tensor *a = ggml_new_tensor_2d(meta.get(), GGML_TYPE_F32, n_in, p.rank);
    ggml_tensor *bt = ggml_new_tensor_2d(meta.get(), GGML_TYPE_F32, p.rank, n_out);
    ggml_set_name(a, (std::string(w->name) + ".lora_a").c_str());
    ggml_set_name(bt, (std::string(w->name) + ".lora_b").c_str());
    gguf_add_tensor(g, a);
    gguf_add_tensor(g, bt);
    tensors.push_back({a, a->name, std_a});
    tensors.push_back({bt, bt->name, std_b});
    // Reading the base dominates for big presets: count it as half the work.
    if (p.on_progress) p.on_progress(0.5f * float(i + 1) / float(weights.size()));
  }
  MakeAdapterParams q = p;
  if (p.on_progress) q.on_progress = [&p](float f) { p.on_progress(0.5f + 0.5f * f); };
  write_all(q, g, tensors);
}

// Rounds to 3 significant digits, so the last bits of a platform's float
// arithmetic do not reach the file's bytes.
double round3(double x) {
  if (!(x > 0) || !std::isfinite(x)) return x;
  const double unit = std::pow(10.0, std::floor(std::log10(x)) - 2);
  return std::round(x / unit) * unit;
}

struct ResidualProbe {
  std::vector<std::vector<float>> values;  // |x| per layer
};

// ggml's eval callback: asks for every "l_out-<il>" (a block's output, where
// llama.cpp adds the control vector) and accumulates its squares.
bool probe_cb(ggml_tensor *t, bool ask, void *user) {
  if (std::strncmp(t->name, "l_out-", 6) != 0) return !ask;  // not asked for; go on
  if (ask) return true;
  auto *probe = static_cast<ResidualProbe *>(user);
  const int il = std::atoi(t->name + 6);
  if (il < 0 || il >= int(probe->values.size()) || t->type != GGML_TYPE_F32) return true;
  std::vector<float> v(static_cast<std::size_t>(ggml_nelements(t)));
  ggml_backend_tensor_get(t, v.data(), 0, ggml_nbytes(t));
  auto &dst = probe->values[std::size_t(il)];
  for (float x : v) dst.push_back(std::abs(x));
  return true;
}

// RMS of the residual stream after each block, from decoding a fixed seeded
// prompt on the base (CPU, 2 threads: the same bytes on every run).
std::vector<double> residual_rms(const Base &b) {
  auto mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  // Plain CPU kernels: the pinned llama.cpp's AMX matmul (an extra buffer
  // type) crashes on quantised weights (src/core/model.cpp), and repacked
  // weights would change the probe's last bits from CPU to CPU.
  mp.use_extra_bufts = false;
  struct ModelFree {
    void operator()(llama_model *m) const { llama_model_free(m); }
  };
  struct ContextFree {
    void operator()(llama_context *c) const { llama_free(c); }
  };
  std::unique_ptr<llama_model, ModelFree> model(llama_model_load_from_file(b.path.c_str(), mp));
  if (!model) {
    detail::fail(Errc::corrupt, fmt::format("llama.cpp cannot load base '{}': {}", b.path, detail::take_llama_error()));
  }
  if (llama_model_n_layer(model.get()) != b.n_layer) {
    detail::fail(Errc::corrupt, fmt::format("base '{}': {} layers in metadata, {} loaded", b.path, b.n_layer,
                                            llama_model_n_layer(model.get())));
  }
  ResidualProbe probe{std::vector<std::vector<float>>(std::size_t(b.n_layer))};
  auto cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = cp.n_ubatch = kProbeTokens;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.no_perf = true;
  cp.cb_eval = probe_cb;
  cp.cb_eval_user_data = &probe;
  std::unique_ptr<llama_context, ContextFree> ctx(llama_init_from_model(model.get(), cp));
  if (!ctx) detail::fail(Errc::backend, fmt::format("llama.cpp cannot make a context for base '{}'", b.path));
  const llama_vocab *vocab = llama_model_get_vocab(model.get());
  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<llama_token> tokens{llama_vocab_bos(vocab)};
  Rng rng{0x5eedu};
  // Past the usual control tokens (0..2) when the vocabulary has room.
  const int first = n_vocab > 3 ? 3 : 0;
  while (int(tokens.size()) < kProbeTokens) {
    tokens.push_back(llama_token(first + int(rng.next() % std::uint64_t(n_vocab - first))));
  }
  if (llama_decode(ctx.get(), llama_batch_get_one(tokens.data(), kProbeTokens)) != 0) {
    detail::fail(Errc::backend, fmt::format("llama.cpp could not decode a probe prompt on base '{}'", b.path));
  }
  std::vector<double> rms(std::size_t(b.n_layer), 0.0);
  for (std::size_t l = 0; l < rms.size(); ++l) {
    auto &v = probe.values[l];
    if (!v.empty()) {
      // A robust scale (1.4826 x median |x|: the std for normal values):
      // trained models' residual streams have a few huge dimensions that
      // dominate the RMS but not what a random direction disturbs.
      std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
      rms[l] = round3(1.4826 * double(v[v.size() / 2]));
    }
    // A layer the probe did not see (another architecture's names): the
    // nearest one below, else token_embd's scale.
    if (!(rms[l] > 0)) rms[l] = l > 0 ? rms[l - 1] : round3(b.rms(b.tensor("token_embd.weight")));
  }
  return rms;
}

void make_cvec(const MakeAdapterParams &p, const Base &b) {
  if (b.n_layer < 2) {
    detail::fail(Errc::incompatible, fmt::format("base '{}' has {} layer; a control vector needs at least 2 (layer 0 "
                                                 "never gets a direction)", b.path, b.n_layer));
  }
  if (b.tensor("token_embd.weight") == nullptr) {
    detail::fail(Errc::incompatible, fmt::format("base '{}' has no token_embd.weight", b.path));
  }
  const int64_t n_dir = b.n_layer - 1;
  const std::vector<double> rms = residual_rms(b);
  if (p.on_progress) p.on_progress(0.5f);

  Gguf out(gguf_init_empty());
  gguf_context *g = out.get();
  // What tools/cvector-generator writes (export_gguf).
  gguf_set_val_str(g, "general.architecture", "controlvector");
  gguf_set_val_str(g, "controlvector.model_hint", b.arch.c_str());
  gguf_set_val_i32(g, "controlvector.layer_count", static_cast<int32_t>(n_dir));
  set_common_meta(g, p, b);

  ggml_init_params ip{ggml_tensor_overhead() * static_cast<std::size_t>(n_dir + 8), nullptr, /*no_alloc=*/true};
  Ggml meta(ggml_init(ip));
  std::vector<OutTensor> tensors;
  for (int64_t l = 1; l <= n_dir; ++l) {
    ggml_tensor *t = ggml_new_tensor_1d(meta.get(), GGML_TYPE_F32, b.n_embd);
    ggml_set_name(t, fmt::format("direction.{}", l).c_str());
    gguf_add_tensor(g, t);
    // Relative to the residual stream it joins (kCvecGain above).
    tensors.push_back({t, t->name, kCvecGain * p.strength * rms[std::size_t(l)] / std::sqrt(double(n_dir))});
  }
  MakeAdapterParams q = p;
  if (p.on_progress) q.on_progress = [&p](float f) { p.on_progress(0.5f + 0.5f * f); };
  write_all(q, g, tensors);
}

}  // namespace

AdapterKind parse_adapter_kind(const std::string &name) {
  if (name == "lora") return AdapterKind::lora;
  if (name == "cvec" || name == "control_vector") return AdapterKind::control_vector;
  detail::fail(Errc::invalid_argument, fmt::format("unknown adapter kind '{}' (expected lora or cvec)", name));
}

void make_adapter(const MakeAdapterParams &params) {
  detail::ensure_backend();
  check_params(params);
  const Base base = open_base(params.base);
  if (params.kind == AdapterKind::lora) make_lora(params, base);
  else make_cvec(params, base);
}

}  // namespace weft
