// weft::make_mmproj: seeded random vision projectors (mmproj GGUF files) in
// the layout llama.cpp's clip loader (tools/mtmd/clip.cpp) reads; the audio
// kind's tensors are in make_mmproj_audio.cpp.
//
// Keys and tensor names are clip-impl.h's (KEY_*, TN_*); shapes are ggml's
// (ne0 first). Everything is f32: the files are a few hundred KB, and f32
// keeps the encoder's arithmetic simple on every backend.
#include <ggml.h>
#include <gguf.h>

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "modelgen/gguf_keys.hpp"
#include "modelgen/make_mmproj_internal.hpp"
#include "modelgen/model_writer.hpp"
#include "modelgen/splitmix.hpp"
#include "weft/make_mmproj.hpp"

namespace weft {

namespace detail::mmproj {

void push_blocks(std::vector<TensorSpec> &t, const MakeMmprojParams &p, const std::string &prefix, bool k_bias) {
  const int64_t e = p.n_embd, ff = p.n_ff;
  const float proj = 0.02f / std::sqrt(2.0f * static_cast<float>(p.n_layer));
  for (int l = 0; l < p.n_layer; ++l) {
    const std::string b = fmt::format("{}.blk.{}.", prefix, l);
    t.push_back({b + "ln1.weight", {e}, 0, true, 1});
    t.push_back({b + "ln1.bias", {e}, 0, true, 0});
    for (const char *m : {"attn_q", "attn_k", "attn_v"}) {
      t.push_back({b + m + ".weight", {e, e}, 0.02f});
      if (k_bias || std::string_view(m) != "attn_k") t.push_back({b + m + ".bias", {e}, 0, true, 0});
    }
    t.push_back({b + "attn_out.weight", {e, e}, proj});
    t.push_back({b + "attn_out.bias", {e}, 0, true, 0});
    t.push_back({b + "ln2.weight", {e}, 0, true, 1});
    t.push_back({b + "ln2.bias", {e}, 0, true, 0});
    t.push_back({b + "ffn_up.weight", {e, ff}, 0.02f});
    t.push_back({b + "ffn_up.bias", {ff}, 0, true, 0});
    t.push_back({b + "ffn_down.weight", {ff, e}, proj});
    t.push_back({b + "ffn_down.bias", {e}, 0, true, 0});
  }
}

}  // namespace detail::mmproj

namespace {

using detail::mmproj::TensorSpec;
using detail::mmproj::TextModel;
using detail::GgmlPtr;
using detail::GgufPtr;
using detail::gguf_copy_key;
using detail::gguf_int;
using detail::gguf_str;

// RMS of the first rows of token_embd (up to 256; a sample is plenty for a
// scale). 0.02, the generated presets' std, when it cannot be read.
double token_embd_rms(const std::string &path, const gguf_context *g, const ggml_context *meta) {
  const ggml_tensor *t = ggml_get_tensor(const_cast<ggml_context *>(meta), "token_embd.weight");
  const int64_t id = gguf_find_tensor(g, "token_embd.weight");
  if (t == nullptr || id < 0) return 0.02;
  const auto *traits = ggml_get_type_traits(t->type);
  if (t->type != GGML_TYPE_F32 && traits->to_float == nullptr) return 0.02;
  const int64_t ne0 = t->ne[0];
  const int64_t rows = std::min<int64_t>(ggml_nrows(t), 256);
  const std::size_t row_bytes = ggml_row_size(t->type, ne0);
  std::vector<char> bytes(row_bytes * static_cast<std::size_t>(rows));
  const std::size_t offset = gguf_get_data_offset(g) + gguf_get_tensor_offset(g, id);
  detail::FilePtr f(detail::open_file(path, "rb"));
  if (!f || fseeko(f.get(), static_cast<off_t>(offset), SEEK_SET) != 0 ||
      std::fread(bytes.data(), 1, bytes.size(), f.get()) != bytes.size()) {
    detail::fail(Errc::corrupt, fmt::format("text model '{}': cannot read token_embd.weight ({} bytes at offset {})",
                                            path, bytes.size(), offset));
  }
  const double sum = detail::rows_sum_squares(t, bytes.data(), rows);
  const double rms = std::sqrt(sum / (double(ne0) * double(rows)));
  return std::isfinite(rms) && rms > 0 ? rms : 0.02;
}

TextModel open_text_model(const std::string &path) {
  detail::require_regular_file(path, "text model");
  ggml_context *meta_raw = nullptr;
  gguf_init_params gp{/*no_alloc=*/true, /*ctx=*/&meta_raw};
  GgufPtr g(gguf_init_from_file(path.c_str(), gp));
  GgmlPtr meta(meta_raw);
  if (!g) detail::fail(Errc::corrupt, fmt::format("text model '{}' is not a readable GGUF model", path));
  TextModel m;
  m.arch = gguf_str(g.get(), "general.architecture");
  if (m.arch.empty()) detail::fail(Errc::corrupt, fmt::format("text model '{}' has no general.architecture", path));
  if (m.arch == "clip") {
    detail::fail(Errc::invalid_argument, fmt::format("'{}' is a projector (mmproj), not a text model", path));
  }
  m.n_embd = gguf_int(g.get(), m.arch + ".embedding_length");
  if (m.n_embd <= 0) detail::fail(Errc::corrupt, fmt::format("text model '{}' lacks {}.embedding_length", path, m.arch));
  m.embd_rms = token_embd_rms(path, g.get(), meta.get());
  return m;
}

void check_range(const char *what, int value, int lo, int hi) {
  if (value < lo || value > hi) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("MakeMmprojParams.{} = {} is outside {} .. {}", what, value, lo, hi));
  }
}

void check_params(const MakeMmprojParams &p) {
  if (p.base.empty()) detail::fail(Errc::invalid_argument, "MakeMmprojParams.base is empty");
  if (p.out.empty()) detail::fail(Errc::invalid_argument, "MakeMmprojParams.out is empty");
  if (p.kind != MmprojKind::gemma3 && p.kind != MmprojKind::qwen2vl && p.kind != MmprojKind::qwen2a) {
    detail::fail(Errc::invalid_argument, fmt::format("unknown projector kind {}", static_cast<int>(p.kind)));
  }
  check_range("n_layer", p.n_layer, 1, 8);
  check_range("n_embd", p.n_embd, 8, 1024);
  check_range("n_head", p.n_head, 1, 64);
  check_range("n_ff", p.n_ff, 8, 4096);
  if (p.n_embd % p.n_head != 0) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("MakeMmprojParams.n_embd = {} is not a multiple of n_head = {}", p.n_embd, p.n_head));
  }
  if (p.kind == MmprojKind::qwen2a) {
    // The image fields do not apply; clip refuses more than 256 mel bins.
    check_range("n_mel_bins", p.n_mel_bins, 8, 256);
    return;
  }
  check_range("image_size", p.image_size, 16, 1024);
  check_range("patch_size", p.patch_size, 2, 64);
  check_range("merge", p.merge, 1, 8);
  if (p.image_size % (p.patch_size * p.merge) != 0) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("MakeMmprojParams.image_size = {} is not a multiple of patch_size * merge = {} * {}",
                             p.image_size, p.patch_size, p.merge));
  }
  if (p.kind == MmprojKind::qwen2vl && p.merge != 2) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("MakeMmprojParams.merge = {}: the qwen2vl projector merges 2 x 2 patches", p.merge));
  }
  if (p.kind == MmprojKind::qwen2vl && (p.n_embd / p.n_head) % 4 != 0) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("MakeMmprojParams.n_embd / n_head = {} is not a multiple of 4 (qwen2vl's 2-D M-RoPE)",
                             p.n_embd / p.n_head));
  }
  if (p.n_ff == p.n_embd) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("MakeMmprojParams.n_ff = {} must differ from n_embd (llama.cpp's loader would take the "
                             "FFN for a legacy file with up and down swapped)", p.n_ff));
  }
}

std::vector<TensorSpec> gemma3_tensors(const MakeMmprojParams &p, const TextModel &text) {
  const int64_t e = p.n_embd, ps = p.patch_size;
  const int64_t side = p.image_size / p.patch_size;
  std::vector<TensorSpec> t;
  // Patch embedding (a conv kernel [ps, ps, 3, e]) at unit gain over its
  // 3*ps*ps inputs, so each patch's pixels dominate the learned positions.
  t.push_back({"v.patch_embd.weight", {ps, ps, 3, e}, 1.0f / std::sqrt(float(3 * ps * ps))});
  t.push_back({"v.patch_embd.bias", {e}, 0, true, 0});
  t.push_back({"v.position_embd.weight", {e, side * side}, 0.1f});
  detail::mmproj::push_blocks(t, p, "v", /*k_bias=*/true);
  t.push_back({"v.post_ln.weight", {e}, 0, true, 1});
  t.push_back({"v.post_ln.bias", {e}, 0, true, 0});
  // RMS-normed pooled tokens (unit RMS) times this projection give
  // embeddings with the text model's token_embd RMS.
  t.push_back({"mm.soft_emb_norm.weight", {e}, 0, true, 1});
  t.push_back({"mm.input_projection.weight", {text.n_embd, e},
               static_cast<float>(text.embd_rms / std::sqrt(double(e)))});
  return t;
}

// Qwen2-VL: two temporal patch kernels (summed for a still image), no
// learned positions (2-D M-RoPE inside attention), LayerNorm blocks with
// biases, then 2 x 2 neighbouring patches concatenated through an MLP.
std::vector<TensorSpec> qwen2vl_tensors(const MakeMmprojParams &p, const TextModel &text) {
  const int64_t e = p.n_embd, ps = p.patch_size, merged = 4 * p.n_embd;
  // Each kernel at half the unit gain: their sum has it.
  const float patch = 0.5f / std::sqrt(float(3 * ps * ps));
  std::vector<TensorSpec> t;
  t.push_back({"v.patch_embd.weight", {ps, ps, 3, e}, patch});
  t.push_back({"v.patch_embd.weight.1", {ps, ps, 3, e}, patch});
  detail::mmproj::push_blocks(t, p, "v", /*k_bias=*/true);
  // The merger's LayerNorm (Qwen2-VL's ln_q) makes each patch unit RMS;
  // mm.0 at unit gain keeps that, GELU of unit normals has RMS ~0.65, and
  // mm.2 brings the result to the text model's token_embd RMS.
  t.push_back({"v.post_ln.weight", {e}, 0, true, 1});
  t.push_back({"v.post_ln.bias", {e}, 0, true, 0});
  t.push_back({"mm.0.weight", {merged, merged}, static_cast<float>(1.0 / std::sqrt(double(merged)))});
  t.push_back({"mm.0.bias", {merged}, 0, true, 0});
  t.push_back({"mm.2.weight", {merged, text.n_embd},
               static_cast<float>(text.embd_rms / 0.65 / std::sqrt(double(merged)))});
  t.push_back({"mm.2.bias", {text.n_embd}, 0, true, 0});
  return t;
}

// The clip.vision.* keys of both image kinds.
void set_vision_keys(gguf_context *g, const MakeMmprojParams &p, const TextModel &text) {
  gguf_set_val_bool(g, "clip.use_gelu", true);
  gguf_set_val_u32(g, "clip.vision.image_size", static_cast<uint32_t>(p.image_size));
  gguf_set_val_u32(g, "clip.vision.patch_size", static_cast<uint32_t>(p.patch_size));
  gguf_set_val_u32(g, "clip.vision.embedding_length", static_cast<uint32_t>(p.n_embd));
  gguf_set_val_u32(g, "clip.vision.feed_forward_length", static_cast<uint32_t>(p.n_ff));
  gguf_set_val_u32(g, "clip.vision.block_count", static_cast<uint32_t>(p.n_layer));
  gguf_set_val_u32(g, "clip.vision.attention.head_count", static_cast<uint32_t>(p.n_head));
  gguf_set_val_f32(g, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
  gguf_set_val_u32(g, "clip.vision.projection_dim", static_cast<uint32_t>(text.n_embd));
  if (p.kind == MmprojKind::gemma3) {
    gguf_set_val_u32(g, "clip.vision.projector.scale_factor", static_cast<uint32_t>(p.merge));
  } else {
    gguf_set_val_u32(g, "clip.vision.spatial_merge_size", static_cast<uint32_t>(p.merge));
  }
  const float half[3] = {0.5f, 0.5f, 0.5f};  // pixels to [-1, 1], as SigLIP
  gguf_set_arr_data(g, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, half, 3);
  gguf_set_arr_data(g, "clip.vision.image_std", GGUF_TYPE_FLOAT32, half, 3);
}

}  // namespace

const char *mmproj_kind_name(MmprojKind kind) noexcept {
  switch (kind) {
    case MmprojKind::gemma3: return "gemma3";
    case MmprojKind::qwen2vl: return "qwen2vl";
    case MmprojKind::qwen2a: return "qwen2a";
  }
  return "?";
}

MmprojKind parse_mmproj_kind(const std::string &name) {
  if (name == "gemma3") return MmprojKind::gemma3;
  if (name == "qwen2vl") return MmprojKind::qwen2vl;
  if (name == "qwen2a") return MmprojKind::qwen2a;
  detail::fail(Errc::invalid_argument,
               fmt::format("unknown projector kind '{}' (expected gemma3, qwen2vl or qwen2a)", name));
}

int mmproj_tokens_per_image(const MakeMmprojParams &p) noexcept {
  if (p.kind == MmprojKind::qwen2a) return 0;
  const int cell = p.patch_size * p.merge;
  if (cell <= 0) return 0;
  const int side = p.image_size / cell;
  return side * side;
}

void make_mmproj(const MakeMmprojParams &params) {
  detail::ensure_backend();
  check_params(params);
  const TextModel text = open_text_model(params.base);

  GgufPtr out(gguf_init_empty());
  gguf_context *g = out.get();
  const char *kind = mmproj_kind_name(params.kind);
  gguf_set_val_str(g, "general.architecture", "clip");
  gguf_set_val_str(g, "general.name", fmt::format("weft-mmproj-{}-seed{}", kind, params.seed).c_str());
  gguf_set_val_str(g, "general.description", "weft: random-weight projector for tests (docs/MODELS.md)");
  gguf_set_val_u32(g, "general.file_type", 0);  // all f32
  // clip-impl.h's PROJECTOR_TYPE_NAMES.
  const bool audio = params.kind == MmprojKind::qwen2a;
  gguf_set_val_str(g, "clip.projector_type",
                   audio ? "qwen2a" : params.kind == MmprojKind::gemma3 ? "gemma3" : "qwen2vl_merger");
  gguf_set_val_bool(g, "clip.has_vision_encoder", !audio);
  gguf_set_val_bool(g, "clip.has_audio_encoder", audio);
  if (audio) {
    detail::mmproj::set_qwen2a_keys(g, params, text);
  } else {
    set_vision_keys(g, params, text);
  }
  gguf_set_val_str(g, "weft.mmproj_kind", kind);
  gguf_set_val_u64(g, "weft.seed", params.seed);
  gguf_set_val_str(g, "weft.text_architecture", text.arch.c_str());

  const auto specs = audio ? detail::mmproj::qwen2a_tensors(params, text)
                     : params.kind == MmprojKind::gemma3 ? gemma3_tensors(params, text)
                                                         : qwen2vl_tensors(params, text);
  ggml_init_params ip{ggml_tensor_overhead() * (specs.size() + 8), nullptr, /*no_alloc=*/true};
  GgmlPtr meta(ggml_init(ip));
  std::vector<ggml_tensor *> tensors;
  for (const auto &s : specs) {
    ggml_tensor *t = ggml_new_tensor(meta.get(), GGML_TYPE_F32, static_cast<int>(s.ne.size()), s.ne.data());
    ggml_set_name(t, s.name.c_str());
    gguf_add_tensor(g, t);
    tensors.push_back(t);
  }

  detail::TempFile file(params.out);
  detail::write_gguf_meta(file, g);
  std::vector<float> values;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto &s = specs[i];
    values.resize(static_cast<std::size_t>(ggml_nelements(tensors[i])));
    if (s.constant) {
      std::fill(values.begin(), values.end(), s.value);
    } else {
      detail::fill_normal(values, params.seed, s.name, s.std);
    }
    detail::write_gguf_tensor(file, g, values.data(), values.size() * sizeof(float));
  }
  file.commit();
}

void make_qwen2vl_text_model(const std::string &base, const std::string &out) {
  detail::ensure_backend();
  if (out.empty()) detail::fail(Errc::invalid_argument, "make_qwen2vl_text_model: out is empty");
  detail::require_regular_file(base, "text model");
  ggml_context *meta_raw = nullptr;
  gguf_init_params gp{/*no_alloc=*/true, /*ctx=*/&meta_raw};
  GgufPtr src(gguf_init_from_file(base.c_str(), gp));
  GgmlPtr meta(meta_raw);
  if (!src) detail::fail(Errc::corrupt, fmt::format("text model '{}' is not a readable GGUF model", base));
  const std::string arch = gguf_str(src.get(), "general.architecture");
  if (arch != "llama") {
    detail::fail(Errc::invalid_argument,
                 fmt::format("text model '{}' has architecture '{}'; only llama converts to qwen2vl", base, arch));
  }
  const int64_t n_rot = gguf_int(src.get(), "llama.rope.dimension_count");
  if (n_rot < 8) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("text model '{}': rotary dimension {} is below 8, too small for M-RoPE sections", base,
                             n_rot));
  }

  GgufPtr dst(gguf_init_empty());
  for (int64_t i = 0; i < gguf_get_n_kv(src.get()); ++i) {
    const std::string key = gguf_get_key(src.get(), i);
    if (key == "general.architecture") {
      gguf_set_val_str(dst.get(), key.c_str(), "qwen2vl");
    } else if (key.rfind("llama.", 0) == 0) {
      gguf_copy_key(dst.get(), ("qwen2vl." + key.substr(6)).c_str(), src.get(), i);
    } else {
      gguf_copy_key(dst.get(), key.c_str(), src.get(), i);
    }
  }
  // Qwen2-VL splits the rotary half-dimension into temporal, height and
  // width sections of 1/4, 3/8, 3/8 (16, 24, 24 of 64 in the 7B model).
  const auto half = static_cast<int32_t>(n_rot / 2);
  const int32_t t = half / 4, h = (half - t) / 2;
  const int32_t sections[4] = {t, h, half - t - h, 0};
  gguf_set_arr_data(dst.get(), "qwen2vl.rope.dimension_sections", GGUF_TYPE_INT32, sections, 4);

  const int64_t n_tensors = gguf_get_n_tensors(src.get());
  for (int64_t i = 0; i < n_tensors; ++i) {
    gguf_add_tensor(dst.get(), ggml_get_tensor(meta.get(), gguf_get_tensor_name(src.get(), i)));
  }
  detail::FilePtr in(detail::open_file(base, "rb"));
  if (!in) detail::fail(Errc::io, fmt::format("cannot open text model '{}': {}", base, std::strerror(errno)));
  detail::TempFile file(out);
  detail::write_gguf_meta(file, dst.get());
  std::vector<char> bytes;
  for (int64_t i = 0; i < n_tensors; ++i) {
    const std::size_t offset = gguf_get_data_offset(src.get()) + gguf_get_tensor_offset(src.get(), i);
    bytes.resize(gguf_get_tensor_size(src.get(), i));
    if (fseeko(in.get(), static_cast<off_t>(offset), SEEK_SET) != 0 ||
        std::fread(bytes.data(), 1, bytes.size(), in.get()) != bytes.size()) {
      detail::fail(Errc::corrupt, fmt::format("text model '{}': tensor '{}' ({} bytes at offset {}) cannot be read",
                                              base, gguf_get_tensor_name(src.get(), i), bytes.size(), offset));
    }
    detail::write_gguf_tensor(file, dst.get(), bytes.data(), bytes.size());
  }
  file.commit();
}

}  // namespace weft
