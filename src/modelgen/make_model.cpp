// weft::make_model: GGUF files with seeded random weights (llama and the
// families of weft::ModelArch, model_arch.cpp).
//
// The header (metadata + tensor infos) is built with gguf.h; tensor data is
// then generated, converted and streamed one tensor at a time, so even the 1b
// preset needs memory for only its largest tensor.
#include <ggml.h>
#include <gguf.h>
#include <llama.h>

#include <fmt/format.h>

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
#include "modelgen/model_arch.hpp"
#include "modelgen/model_writer.hpp"
#include "modelgen/npc_vocab.hpp"
#include "modelgen/splitmix.hpp"
#include "weft/make_model.hpp"
#include "weft/train.hpp"

namespace weft {
namespace {

using detail::GgmlPtr;
using detail::GgufPtr;

ggml_type to_ggml(WeightType t) {
  switch (t) {
    case WeightType::f32: return GGML_TYPE_F32;
    case WeightType::f16: return GGML_TYPE_F16;
    case WeightType::q8_0: return GGML_TYPE_Q8_0;
    case WeightType::q4_0: return GGML_TYPE_Q4_0;
  }
  return GGML_TYPE_F32;
}

llama_ftype to_ftype(WeightType t) {
  switch (t) {
    case WeightType::f32: return LLAMA_FTYPE_ALL_F32;
    case WeightType::f16: return LLAMA_FTYPE_MOSTLY_F16;
    case WeightType::q8_0: return LLAMA_FTYPE_MOSTLY_Q8_0;
    case WeightType::q4_0: return LLAMA_FTYPE_MOSTLY_Q4_0;
  }
  return LLAMA_FTYPE_ALL_F32;
}

// Copies every tokenizer.* key of the vocabulary file.
void copy_tokenizer(gguf_context *dst, const gguf_context *src) {
  for (int64_t i = 0; i < gguf_get_n_kv(src); ++i) {
    const char *key = gguf_get_key(src, i);
    if (std::strncmp(key, "tokenizer.", 10) == 0) detail::gguf_copy_key(dst, key, src, i, "vocabulary key");
  }
}

// MakeModelParams::shape, each size checked, naming the first that is wrong.
ModelShape checked_shape(const ModelShape &s, ModelArch arch) {
  auto bad = [](const std::string &why) { detail::fail(Errc::invalid_argument, "MakeModelParams.shape: " + why); };
  if (s.n_layer < 1 || s.n_layer > 256) bad(fmt::format("n_layer = {} is outside [1, 256]", s.n_layer));
  if (s.n_head < 1 || s.n_head > 256) bad(fmt::format("n_head = {} is outside [1, 256]", s.n_head));
  if (s.n_embd < 2 || s.n_embd > 16384 || s.n_embd % s.n_head != 0 || (s.n_embd / s.n_head) % 2 != 0) {
    bad(fmt::format("n_embd = {} must be in [2, 16384] and n_head ({}) heads of an even width", s.n_embd, s.n_head));
  }
  if (s.n_head_kv < 1 || s.n_head % s.n_head_kv != 0) {
    bad(fmt::format("n_head_kv = {} must divide n_head = {}", s.n_head_kv, s.n_head));
  }
  if (s.n_ff < 1 || s.n_ff > 65536) bad(fmt::format("n_ff = {} is outside [1, 65536]", s.n_ff));
  if (s.n_ctx_train < 16) bad(fmt::format("n_ctx_train = {} must be >= 16", s.n_ctx_train));
  if ((arch == ModelArch::gemma3 || arch == ModelArch::lfm2) && s.n_layer < 2) {
    bad(fmt::format("n_layer = {}: {} needs at least 2 layers ({})", s.n_layer, model_arch_name(arch),
                    arch == ModelArch::gemma3 ? "sliding-window and full attention" : "convolution and attention"));
  }
  return s;
}

// MakeModelParams::sliding_window for `arch`: gemma3's window (default
// kDefaultSlidingWindow), 0 for the others, which refuse one.
int checked_window(const MakeModelParams &p, const ModelShape &s) {
  if (p.arch != ModelArch::gemma3) {
    if (p.sliding_window) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("MakeModelParams.sliding_window = {}: only the gemma3 arch has a sliding window, not {}",
                               *p.sliding_window, model_arch_name(p.arch)));
    }
    return 0;
  }
  const int w = p.sliding_window.value_or(kDefaultSlidingWindow);
  if (w < 1 || w >= s.n_ctx_train) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("MakeModelParams.sliding_window = {} is outside [1, n_ctx_train = {})", w, s.n_ctx_train));
  }
  return w;
}

}  // namespace

ModelShape preset_shape(ModelPreset preset) noexcept {
  switch (preset) {
    case ModelPreset::tiny:
    case ModelPreset::embed: return {2, 64, 4, 2, 256, 4096, false, WeightType::f32};
    case ModelPreset::small: return {30, 576, 9, 3, 1536, 8192, true, WeightType::q8_0};
    case ModelPreset::b1: return {22, 2048, 32, 4, 5632, 2048, false, WeightType::q4_0};
    case ModelPreset::npc:
    case ModelPreset::npc_draft: {
      const TrainParams t = npc_train_params(preset);
      return {t.n_layer, t.n_embd, t.n_head, t.n_head, t.n_ff, t.n_ctx, false, WeightType::f32};
    }
  }
  return {};
}

const char *preset_name(ModelPreset preset) noexcept {
  switch (preset) {
    case ModelPreset::tiny: return "tiny";
    case ModelPreset::small: return "small";
    case ModelPreset::b1: return "1b";
    case ModelPreset::npc: return "npc";
    case ModelPreset::embed: return "embed";
    case ModelPreset::npc_draft: return "npc-draft";
  }
  return "?";
}

ModelPreset parse_preset(const std::string &name) {
  for (auto p : {ModelPreset::tiny, ModelPreset::small, ModelPreset::b1, ModelPreset::npc, ModelPreset::embed,
                 ModelPreset::npc_draft}) {
    if (name == preset_name(p)) return p;
  }
  detail::fail(Errc::invalid_argument,
               fmt::format("unknown model preset '{}' (expected tiny, small, 1b, npc, embed or npc-draft)", name));
}

const char *weight_type_name(WeightType type) noexcept {
  switch (type) {
    case WeightType::f32: return "f32";
    case WeightType::f16: return "f16";
    case WeightType::q8_0: return "q8_0";
    case WeightType::q4_0: return "q4_0";
  }
  return "?";
}

const char *model_arch_name(ModelArch arch) noexcept {
  switch (arch) {
    case ModelArch::llama: return "llama";
    case ModelArch::gemma3: return "gemma3";
    case ModelArch::lfm2: return "lfm2";
    case ModelArch::mamba: return "mamba";
    case ModelArch::moe: return "moe";
  }
  return "?";
}

ModelArch parse_model_arch(const std::string &name) {
  for (auto a : {ModelArch::llama, ModelArch::gemma3, ModelArch::lfm2, ModelArch::mamba, ModelArch::moe}) {
    if (name == model_arch_name(a)) return a;
  }
  detail::fail(Errc::invalid_argument,
               fmt::format("unknown model architecture '{}' (expected llama, gemma3, lfm2, mamba or moe)", name));
}

WeightType parse_weight_type(const std::string &name) {
  for (auto t : {WeightType::f32, WeightType::f16, WeightType::q8_0, WeightType::q4_0}) {
    if (name == weight_type_name(t)) return t;
  }
  detail::fail(Errc::invalid_argument, fmt::format("unknown weight type '{}' (expected f32, f16, q8_0 or q4_0)", name));
}

const char *default_vocab_path() noexcept { return WEFT_DEFAULT_VOCAB; }

void detail::write_gguf_meta(TempFile &file, const gguf_context *g) {
  std::vector<char> header(gguf_get_meta_size(g));
  gguf_get_meta_data(g, header.data());
  file.write(header.data(), header.size());
}

void detail::write_gguf_tensor(TempFile &file, const gguf_context *g, const void *data, std::size_t n) {
  static constexpr char zeros[64] = {};
  const std::size_t align = gguf_get_alignment(g);
  file.write(data, n);
  file.write(zeros, (align - n % align) % align);
}

void detail::write_random_model(const RandomModelSpec &spec) {
  detail::ensure_backend();
  if (spec.out.empty()) detail::fail(Errc::invalid_argument, "MakeModelParams.out is empty");
  const ModelShape &shape = spec.shape;
  const WeightType wtype = spec.type;
  const ggml_type mat_type = to_ggml(wtype);
  const int64_t blck = ggml_blck_size(mat_type);
  for (int64_t width : {int64_t(shape.n_embd), int64_t(shape.n_ff)}) {
    if (width % blck != 0) {
      detail::fail(Errc::invalid_argument, fmt::format("row width {} is not a multiple of the {} block size {}", width,
                                                       weight_type_name(wtype), blck));
    }
  }

  GgufPtr vocab;
  int64_t n_vocab = 0;
  if (spec.fitted_vocab) {
    n_vocab = static_cast<int64_t>(detail::npc_fitted_vocab().tokens.size());
  } else {
    const std::string vocab_path = spec.vocab.empty() ? default_vocab_path() : spec.vocab;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(detail::u8_path(vocab_path), ec)) {
      detail::fail(Errc::not_found, fmt::format("vocabulary file '{}' does not exist", vocab_path));
    }
    gguf_init_params vp{/*no_alloc=*/true, /*ctx=*/nullptr};
    vocab.reset(gguf_init_from_file(vocab_path.c_str(), vp));
    if (!vocab) detail::fail(Errc::corrupt, fmt::format("vocabulary file '{}' is not a readable GGUF", vocab_path));
    const int64_t tokens_key = gguf_find_key(vocab.get(), "tokenizer.ggml.tokens");
    if (tokens_key < 0) detail::fail(Errc::corrupt, fmt::format("'{}' has no tokenizer.ggml.tokens", vocab_path));
    n_vocab = static_cast<int64_t>(gguf_get_arr_n(vocab.get(), tokens_key));
  }

  GgufPtr out(gguf_init_empty());
  gguf_context *g = out.get();
  const ModelArch arch = spec.arch;
  gguf_set_val_str(g, "general.architecture", detail::gguf_arch(arch));
  // llama files keep their name (and bytes): weft-<preset>-seed<N>.
  const std::string name = arch == ModelArch::llama
                               ? fmt::format("weft-{}-seed{}", spec.preset, spec.seed)
                               : fmt::format("weft-{}-{}-seed{}", spec.preset, model_arch_name(arch), spec.seed);
  gguf_set_val_str(g, "general.name", name.c_str());
  gguf_set_val_u32(g, "general.file_type", static_cast<uint32_t>(to_ftype(wtype)));
  gguf_set_val_u32(g, "general.quantization_version", GGML_QNT_VERSION);
  detail::set_arch_keys(g, arch, shape, n_vocab, spec.sliding_window);
  if (spec.encoder) {
    // What llama.cpp reads for an embedding model: every token sees every
    // other, and a sequence's states are averaged (LLAMA_POOLING_TYPE_MEAN).
    gguf_set_val_bool(g, "llama.attention.causal", false);
    gguf_set_val_u32(g, "llama.pooling_type", 1);
  }
  gguf_set_val_str(g, "weft.preset", spec.preset.c_str());
  gguf_set_val_u64(g, "weft.seed", spec.seed);
  if (arch != ModelArch::llama) gguf_set_val_str(g, "weft.arch", model_arch_name(arch));
  if (vocab) {
    copy_tokenizer(g, vocab.get());
  } else {
    detail::set_fitted_tokenizer(g, detail::npc_fitted_vocab());
  }
  const auto specs = detail::arch_tensor_list(arch, shape, n_vocab, spec.std_embd, spec.std_kv);
  ggml_init_params ip{ggml_tensor_overhead() * (specs.size() + 8), nullptr, /*no_alloc=*/true};
  GgmlPtr meta(ggml_init(ip));
  std::vector<ggml_tensor *> tensors;
  std::size_t total_bytes = 0;
  for (const auto &s : specs) {
    const int64_t ne[3] = {s.ne0, s.ne1, s.ne2};
    const int n_dims = s.ne2 > 1 ? 3 : s.ne1 > 1 ? 2 : 1;
    ggml_tensor *t = ggml_new_tensor(meta.get(), s.matrix ? mat_type : GGML_TYPE_F32, n_dims, ne);
    ggml_set_name(t, s.name.c_str());
    gguf_add_tensor(g, t);
    tensors.push_back(t);
    total_bytes += ggml_nbytes(t);
  }

  detail::TempFile file(spec.out);
  detail::write_gguf_meta(file, g);

  std::vector<float> f32;
  std::vector<char> conv;
  std::size_t done = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto &s = specs[i];
    ggml_tensor *t = tensors[i];
    detail::fill_weight(s, spec.seed, f32);

    const std::size_t nbytes = ggml_nbytes(t);
    const char *data = reinterpret_cast<const char *>(f32.data());
    if (t->type == GGML_TYPE_F16) {
      conv.resize(nbytes);
      ggml_fp32_to_fp16_row(f32.data(), reinterpret_cast<ggml_fp16_t *>(conv.data()), ggml_nelements(t));
      data = conv.data();
    } else if (t->type != GGML_TYPE_F32) {
      conv.resize(nbytes);
      // Per row: a 3-D expert tensor is ne1 * ne2 rows.
      ggml_quantize_chunk(t->type, f32.data(), conv.data(), 0, s.ne1 * s.ne2, s.ne0, nullptr);
      data = conv.data();
    }
    detail::write_gguf_tensor(file, g, data, nbytes);
    done += nbytes;
    if (spec.on_progress) spec.on_progress(static_cast<float>(done) / static_cast<float>(total_bytes));
  }
  file.commit();
}

void make_model(const MakeModelParams &params) {
  if (params.preset == ModelPreset::npc || params.preset == ModelPreset::npc_draft) {
    const char *name = preset_name(params.preset);
    if (params.arch != ModelArch::llama) {
      detail::fail(Errc::invalid_argument, fmt::format("MakeModelParams.arch = {}: the {} preset is trained as llama "
                                                       "only",
                                                       model_arch_name(params.arch), name));
    }
    if (params.sliding_window) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("MakeModelParams.sliding_window = {}: the {} preset has no sliding window",
                               *params.sliding_window, name));
    }
    if (params.type && *params.type != WeightType::f32) {
      detail::fail(Errc::invalid_argument, fmt::format("the {} preset is trained in f32; type {} is not supported",
                                                       name, weight_type_name(*params.type)));
    }
    if (params.shape) {
      detail::fail(Errc::invalid_argument, fmt::format("MakeModelParams.shape: the {} preset's shape is TrainParams'",
                                                       name));
    }
    TrainParams t = npc_train_params(params.preset);
    t.seed = params.seed;
    t.corpus.seed = params.seed;
    t.out = params.out;
    t.vocab = params.vocab;
    if (params.on_progress) t.on_progress = [&](const TrainProgress &p) { params.on_progress(float(p.fraction)); };
    train_npc_model(t);
    return;
  }
  if (params.preset == ModelPreset::embed && params.arch != ModelArch::llama) {
    detail::fail(Errc::invalid_argument, fmt::format("MakeModelParams.arch = {}: the embed preset is llama only",
                                                     model_arch_name(params.arch)));
  }
  const ModelShape shape = checked_shape(params.shape.value_or(preset_shape(params.preset)), params.arch);
  const int window = checked_window(params, shape);
  detail::write_random_model({.shape = shape,
                              .type = params.type.value_or(shape.default_type),
                              .preset = preset_name(params.preset),
                              .seed = params.seed,
                              .out = params.out,
                              .vocab = params.vocab,
                              .on_progress = params.on_progress,
                              .arch = params.arch,
                              .sliding_window = window,
                              .encoder = params.preset == ModelPreset::embed});
}

}  // namespace weft
