// weft::Adapter: loading LoRA adapters and control vectors, and the
// settings conversations decode under.
#include <gguf.h>
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>

#include "core/adapter_impl.hpp"
#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "core/model_impl.hpp"

namespace weft {
namespace {

// llama_adapter_lora_init and _free change the model's set of adapters:
// one at a time, process-wide.
std::mutex &lora_mutex() {
  static std::mutex mu;
  return mu;
}

const Adapter::Impl &live(const std::shared_ptr<const Adapter::Impl> &impl) {
  if (!impl) detail::fail(Errc::invalid_argument, "the Adapter handle is empty (default-constructed)");
  return *impl;
}


// A string value, or "" when absent or of another type (gguf_get_val_str
// asserts on the type).
std::string str_key(const gguf_context *g, const char *key) {
  const std::int64_t id = gguf_find_key(g, key);
  if (id < 0 || gguf_get_kv_type(g, id) != GGUF_TYPE_STRING) return {};
  return gguf_get_val_str(g, id);
}

std::string model_arch(const llama_model *m) {
  char buf[128];
  return llama_model_meta_val_str(m, "general.architecture", buf, sizeof buf) >= 0 ? buf : "";
}

struct Gguf {
  gguf_context *g = nullptr;
  ggml_context *data = nullptr;
  ~Gguf() {
    if (g != nullptr) gguf_free(g);
    if (data != nullptr) ggml_free(data);
  }
};

void load_control_vector(Adapter::Impl &a, const llama_model *m, const std::string &arch) {
  Gguf f;
  f.g = gguf_init_from_file(a.path.c_str(), {/*no_alloc=*/false, &f.data});
  if (f.g == nullptr) detail::fail(Errc::corrupt, fmt::format("control vector '{}' could not be read", a.path));
  const std::string hint = str_key(f.g, "controlvector.model_hint");
  if (!hint.empty() && hint != arch) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("control vector '{}' is for architecture '{}', the model is '{}'", a.path, hint, arch));
  }
  a.n_embd = llama_model_n_embd(m);
  const std::int32_t n_layer = llama_model_n_layer(m);
  a.cvec.assign(static_cast<std::size_t>(a.n_embd) * static_cast<std::size_t>(std::max(0, n_layer - 1)), 0.0f);
  for (std::int64_t i = 0, n = gguf_get_n_tensors(f.g); i < n; ++i) {
    const std::string name = gguf_get_tensor_name(f.g, i);
    char *end = nullptr;
    const long layer = name.rfind("direction.", 0) == 0 ? std::strtol(name.c_str() + 10, &end, 10) : -1;
    if (layer < 1 || end == nullptr || *end != '\0') {
      detail::fail(Errc::corrupt, fmt::format("control vector '{}': tensor '{}' is not direction.<layer >= 1>", a.path,
                                              name));
    }
    if (layer >= n_layer) {
      detail::fail(Errc::invalid_argument, fmt::format("control vector '{}': {} is beyond the model's last layer {}",
                                                       a.path, name, n_layer - 1));
    }
    const ggml_tensor *t = ggml_get_tensor(f.data, name.c_str());
    if (t == nullptr || t->type != GGML_TYPE_F32 || ggml_n_dims(t) != 1) {
      detail::fail(Errc::corrupt, fmt::format("control vector '{}': {} is not a 1-D f32 tensor", a.path, name));
    }
    if (ggml_nelements(t) != a.n_embd) {
      detail::fail(Errc::invalid_argument, fmt::format("control vector '{}': {} has {} values, the model's width is {}",
                                                       a.path, name, ggml_nelements(t), a.n_embd));
    }
    const auto *src = static_cast<const float *>(t->data);
    float *dst = a.cvec.data() + static_cast<std::size_t>(a.n_embd) * static_cast<std::size_t>(layer - 1);
    for (std::int32_t j = 0; j < a.n_embd; ++j) dst[j] += src[j];  // several directions of a layer add up
    a.n_layers = std::max<std::int32_t>(a.n_layers, static_cast<std::int32_t>(layer));
  }
  if (a.n_layers == 0) detail::fail(Errc::corrupt, fmt::format("control vector '{}' has no direction tensors", a.path));
}

void add_word(std::vector<std::uint64_t> &v, std::uint64_t w) { v.push_back(w); }

}  // namespace

const char *adapter_kind_name(AdapterKind kind) noexcept {
  return kind == AdapterKind::lora ? "lora" : "control_vector";
}

AdapterKind Adapter::kind() const { return live(impl_).kind; }
const std::string &Adapter::path() const { return live(impl_).path; }
const std::string &Adapter::name() const { return live(impl_).name; }
std::uint64_t Adapter::fingerprint() const { return live(impl_).fingerprint; }
std::int32_t Adapter::n_layers() const { return live(impl_).n_layers; }

Adapter::Impl::~Impl() {
  if (lora != nullptr) {
    std::lock_guard g(lora_mutex());
    llama_adapter_lora_free(lora);
  }
}

Adapter Model::load_adapter(const std::string &path) const {
  detail::ensure_backend();
  if (path.empty()) detail::fail(Errc::invalid_argument, "adapter path is empty");
  detail::require_regular_file(path, "adapter file");
  {
    std::ifstream in(detail::u8_path(path), std::ios::binary);
    std::array<char, 4> magic{};
    if (!in.read(magic.data(), magic.size()) || std::memcmp(magic.data(), "GGUF", 4) != 0) {
      detail::fail(Errc::corrupt, fmt::format("adapter file '{}' is not a GGUF file", path));
    }
  }
  auto a = std::make_shared<Adapter::Impl>();
  a->model = impl_;
  a->path = path;
  const std::string arch = model_arch(impl_->model);
  std::string type, adapter_type, file_arch;
  bool directions = false;
  {
    Gguf f;
    f.g = gguf_init_from_file(path.c_str(), {/*no_alloc=*/true, nullptr});
    if (f.g == nullptr) detail::fail(Errc::corrupt, fmt::format("adapter file '{}' could not be parsed as GGUF", path));
    type = str_key(f.g, "general.type");
    adapter_type = str_key(f.g, "adapter.type");
    file_arch = str_key(f.g, "general.architecture");
    a->name = str_key(f.g, "general.name");
    directions = gguf_get_n_tensors(f.g) > 0 && std::string(gguf_get_tensor_name(f.g, 0)).rfind("direction.", 0) == 0;
  }
  if (a->name.empty()) a->name = path.substr(path.find_last_of('/') + 1);
  if (type == "adapter" && adapter_type == "lora") {
    a->kind = AdapterKind::lora;
    if (file_arch != arch) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("LoRA '{}' is for architecture '{}', the model is '{}'", path, file_arch, arch));
    }
    detail::take_llama_error();
    {
      std::lock_guard g(lora_mutex());
      a->lora = llama_adapter_lora_init(impl_->model, path.c_str());
    }
    if (a->lora == nullptr) {
      const std::string why = detail::take_llama_error();
      detail::fail(Errc::invalid_argument, fmt::format("llama.cpp refused LoRA '{}' for model '{}': {}", path,
                                                       impl_->path, why.empty() ? "no reason given" : why));
    }
  } else if (file_arch == "controlvector" || directions) {
    a->kind = AdapterKind::control_vector;
    load_control_vector(*a, impl_->model, arch);
  } else {
    detail::fail(Errc::invalid_argument,
                 fmt::format("'{}' is neither a LoRA adapter (general.type '{}', adapter.type '{}') nor a control "
                             "vector (direction.<layer> tensors)",
                             path, type, adapter_type));
  }
  a->fingerprint = detail::file_fingerprint(path);
  {
    std::lock_guard g(impl_->adapters_mu);
    auto &v = impl_->adapters;
    v.erase(std::remove_if(v.begin(), v.end(), [](const auto &w) { return w.expired(); }), v.end());
    v.push_back(a);
  }
  return Adapter(std::move(a));
}

namespace detail {

bool same_adapters(const AdapterConfig *a, const AdapterConfig *b) noexcept {
  const std::uint64_t ka = adapter_key(a), kb = adapter_key(b);
  if (ka != kb) return false;
  return ka == 0 || a == b || a->canon == b->canon;
}

AdapterConfigPtr make_adapter_config(const Model::Impl &model, std::span<const AdapterUse> uses) {
  if (uses.empty()) return nullptr;
  const std::int32_t last_layer = llama_model_n_layer(model.model) - 1;
  auto cfg = std::make_shared<AdapterConfig>();
  cfg->uses.assign(uses.begin(), uses.end());
  struct Word {
    std::array<std::uint64_t, 4> w;
    const AdapterUse *use;
  };
  std::vector<Word> words;
  for (std::size_t i = 0; i < uses.size(); ++i) {
    AdapterUse &u = cfg->uses[i];
    const auto &impl = u.adapter.impl();
    if (!impl) fail(Errc::invalid_argument, fmt::format("adapters[{}] is an empty Adapter handle", i));
    if (impl->model.get() != &model) {
      fail(Errc::invalid_argument, fmt::format("adapter '{}' was loaded for another model ('{}'), not this executor's "
                                               "('{}'): load it with this executor's Model",
                                               impl->name, impl->model->path, model.path));
    }
    if (!std::isfinite(u.scale)) {
      fail(Errc::invalid_argument, fmt::format("adapter '{}': scale {} is not finite", impl->name, u.scale));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (cfg->uses[j].adapter.impl() == impl) {
        fail(Errc::invalid_argument, fmt::format("adapter '{}' is listed twice (at {} and {})", impl->name, j, i));
      }
    }
    if (impl->kind == AdapterKind::lora) {
      if (u.layer_start != -1 || u.layer_end != -1) {
        fail(Errc::invalid_argument, fmt::format("adapter '{}' is a LoRA: layer_start/layer_end ({}, {}) apply to "
                                                 "control vectors only and must stay -1",
                                                 impl->name, u.layer_start, u.layer_end));
      }
    } else {
      const std::int32_t s = u.layer_start == -1 ? 1 : u.layer_start;
      const std::int32_t e = u.layer_end == -1 ? last_layer : u.layer_end;
      if (s < 1 || e > last_layer || s > e) {
        fail(Errc::invalid_argument,
             fmt::format("control vector '{}': layer range [{}, {}] is outside [1, {}] (the model's layers that take "
                         "one) or empty",
                         impl->name, u.layer_start, u.layer_end, last_layer));
      }
      u.layer_start = s;
      u.layer_end = e;
    }
    if (u.scale == 0.0f) continue;  // as llama.cpp: a zero scale is no adapter
    words.push_back({{impl->fingerprint, std::bit_cast<std::uint32_t>(u.scale),
                      (static_cast<std::uint64_t>(static_cast<std::uint32_t>(u.layer_start)) << 32) |
                          static_cast<std::uint32_t>(u.layer_end),
                      static_cast<std::uint64_t>(impl->kind)},
                     &u});
  }
  if (words.empty()) return cfg;  // key 0: decodes as the base model
  std::sort(words.begin(), words.end(), [](const Word &a, const Word &b) { return a.w < b.w; });
  std::uint64_t key = 0xcbf29ce484222325ull;
  for (const Word &w : words) {
    for (std::uint64_t x : w.w) {
      add_word(cfg->canon, x);
      key = (key ^ x) * 0x100000001b3ull;
      key ^= key >> 29;
    }
    const Adapter::Impl &a = *w.use->adapter.impl();
    if (a.kind == AdapterKind::lora) {
      cfg->loras.push_back(a.lora);
      cfg->lora_scales.push_back(w.use->scale);
      continue;
    }
    if (cfg->cvec.empty()) cfg->cvec.assign(a.cvec.size(), 0.0f);
    const std::size_t n = static_cast<std::size_t>(a.n_embd);
    for (std::int32_t l = w.use->layer_start; l <= w.use->layer_end; ++l) {
      const std::size_t off = n * static_cast<std::size_t>(l - 1);
      for (std::size_t j = 0; j < n; ++j) cfg->cvec[off + j] += w.use->scale * a.cvec[off + j];
    }
    cfg->cvec_start = cfg->cvec_start < 0 ? w.use->layer_start : std::min(cfg->cvec_start, w.use->layer_start);
    cfg->cvec_end = std::max(cfg->cvec_end, w.use->layer_end);
  }
  cfg->key = key == 0 ? 1 : key;
  return cfg;
}

void apply_adapter_config(llama_context *ctx, const Model::Impl &model, const AdapterConfig *cfg,
                          const AdapterConfig *prev) {
  if (cfg == nullptr || cfg->loras.empty()) {
    llama_set_adapters_lora(ctx, nullptr, 0, nullptr);
  } else {
    // llama.cpp takes non-const arrays but only reads them.
    llama_set_adapters_lora(ctx, const_cast<llama_adapter_lora **>(cfg->loras.data()), cfg->loras.size(),
                            const_cast<float *>(cfg->lora_scales.data()));
  }
  const bool cvec = cfg != nullptr && !cfg->cvec.empty();
  // Every cvec call makes llama.cpp re-reserve its compute graph: none when
  // neither setting has one.
  if (!cvec && (prev == nullptr || prev->cvec.empty())) return;
  const int rc = llama_set_adapter_cvec(ctx, cvec ? cfg->cvec.data() : nullptr, cvec ? cfg->cvec.size() : 0,
                                        llama_model_n_embd(model.model), cvec ? cfg->cvec_start : -1,
                                        cvec ? cfg->cvec_end : -1);
  if (rc != 0) fail(Errc::backend, fmt::format("llama_set_adapter_cvec returned {}", rc));
}

Adapter find_adapter(const Model::Impl &model, std::uint64_t fingerprint) {
  std::lock_guard g(model.adapters_mu);
  for (const auto &w : model.adapters) {
    if (auto a = w.lock(); a && a->fingerprint == fingerprint) return Adapter(std::move(a));
  }
  return {};
}

}  // namespace detail
}  // namespace weft
