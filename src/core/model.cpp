// weft::Model: loading, tokenizer, metadata and fingerprint.
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

#include "core/backend_loader.hpp"
#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "core/model_impl.hpp"
#include "core/rpc.hpp"

namespace weft {
namespace {

// FNV-1a, enough to tell models apart; not a security hash.
struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void add(const void *data, std::size_t n) {
    auto p = static_cast<const unsigned char *>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
  template <class T> void add_value(T v) { add(&v, sizeof v); }
};

// Metadata, sizes and up to 1 MiB from each end of the file: cheap on a
// multi-GB model, yet different weights (another seed) give another value.
std::uint64_t compute_fingerprint(const llama_model *m, const std::string &path) {
  Fnv f;
  char buf[512];
  for (int32_t i = 0, n = llama_model_meta_count(m); i < n; ++i) {
    if (llama_model_meta_key_by_index(m, i, buf, sizeof buf) >= 0) f.add(buf);
    if (llama_model_meta_val_str_by_index(m, i, buf, sizeof buf) >= 0) f.add(buf);
  }
  f.add_value(llama_model_n_params(m));
  f.add_value(llama_model_size(m));
  std::ifstream in(detail::u8_path(path), std::ios::binary);
  std::vector<char> chunk(1 << 20);
  if (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    f.add(chunk.data(), static_cast<std::size_t>(in.gcount()));
    in.clear();
    in.seekg(0, std::ios::end);
    const auto size = static_cast<std::int64_t>(in.tellg());
    f.add_value(size);
    if (size > static_cast<std::int64_t>(chunk.size())) {
      in.seekg(size - static_cast<std::int64_t>(chunk.size()));
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      f.add(chunk.data(), static_cast<std::size_t>(in.gcount()));
    }
  }
  return f.h;
}

bool gpu_present() {
  for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    const auto type = ggml_backend_dev_type(ggml_backend_dev_get(i));
    if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) return true;
  }
  return false;
}

void check_gguf_magic(const std::string &path) {
  detail::require_regular_file(path, "model file");
  std::ifstream in(detail::u8_path(path), std::ios::binary);
  std::array<char, 4> magic{};
  if (!in.read(magic.data(), magic.size())) {
    detail::fail(Errc::corrupt, fmt::format("model file '{}' is shorter than a GGUF header", path));
  }
  if (std::memcmp(magic.data(), "GGUF", 4) != 0) {
    detail::fail(Errc::corrupt, fmt::format("model file '{}' is not a GGUF file (bad magic)", path));
  }
}

struct ProgressBridge {
  const std::function<bool(float)> *fn;
  bool cancelled = false;
  static bool call(float p, void *self) {
    auto *b = static_cast<ProgressBridge *>(self);
    // An exception must not unwind through llama.cpp's C frames.
    bool go = true;
    try {
      go = (*b->fn)(p);
    } catch (...) {
      go = false;
    }
    if (!go) b->cancelled = true;
    return go;
  }
};

}  // namespace

Model::Impl::~Impl() {
  if (model != nullptr) llama_model_free(model);
}

Model Model::load(const ModelParams &params) {
  detail::ensure_backend();
  if (params.path.empty()) detail::fail(Errc::invalid_argument, "ModelParams.path is empty");
  check_gguf_magic(params.path);

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = params.n_gpu_layers;
  if (!params.use_mmap) mp.load_mode = LLAMA_LOAD_MODE_NONE;
  mp.vocab_only = params.vocab_only;
  if (detail::cpu_backend_has("AMX_INT8")) {
    // The pinned llama.cpp's AMX matmul (an extra CPU buffer type) crashes on
    // quantised weights (q8_0, q4_0: seen on a Xeon with AMX; llama.cpp issue
    // 20824). Without extra buffer types the weights stay in plain CPU memory
    // and the ordinary kernels run.
    mp.use_extra_bufts = false;
    static std::once_flag once;
    std::call_once(once, [] {
      detail::log_warning("this CPU has AMX: llama.cpp's AMX and repacked weight buffers are off (its AMX matmul "
                          "crashes on quantised weights, llama.cpp issue 20824)");
    });
  }

  std::vector<ggml_backend_dev_t> devices;
  detail::RpcPeers peers;
  if (!params.rpc.empty() && !params.vocab_only) {
    if (params.rpc_timeout_ms < 1) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("ModelParams.rpc_timeout_ms = {} (expected >= 1)", params.rpc_timeout_ms));
    }
    if (params.rpc_reply_timeout_ms < 1) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("ModelParams.rpc_reply_timeout_ms = {} (expected >= 1)", params.rpc_reply_timeout_ms));
    }
    peers = detail::rpc_devices(params.rpc, std::chrono::milliseconds(params.rpc_timeout_ms),
                                std::chrono::milliseconds(params.rpc_reply_timeout_ms), params.rpc_relay);
    devices = peers.devices;
    devices.push_back(nullptr);  // llama.cpp reads a NULL-terminated list
    mp.devices = devices.data();
    if (mp.n_gpu_layers == 0) mp.n_gpu_layers = -1;
  }

  ProgressBridge bridge{&params.on_progress};
  if (params.on_progress) {
    mp.progress_callback = &ProgressBridge::call;
    mp.progress_callback_user_data = &bridge;
  }
  detail::take_llama_error();
  llama_model *m = llama_model_load_from_file(params.path.c_str(), mp);
  if (m == nullptr) {
    if (bridge.cancelled) detail::fail(Errc::cancelled, fmt::format("loading '{}' was cancelled by on_progress", params.path));
    std::string why = detail::take_llama_error();
    if (const std::string lost = detail::rpc_failure(peers.watches); !lost.empty()) {
      detail::fail(Errc::io, fmt::format("loading '{}' over RPC: {}", params.path, lost));
    }
    detail::fail(Errc::corrupt, fmt::format("llama.cpp could not load model '{}': {}", params.path,
                                            why.empty() ? "no reason given" : why));
  }
  if (const std::string lost = detail::rpc_failure(peers.watches); !lost.empty()) {
    llama_model_free(m);  // its weights were sent to a peer that is gone
    detail::fail(Errc::io, fmt::format("loading '{}' over RPC: {}", params.path, lost));
  }
  auto impl = std::make_shared<Impl>();
  impl->model = m;
  impl->rpc = std::move(peers.watches);
  impl->vocab = llama_model_get_vocab(m);
  impl->path = params.path;
  impl->n_vocab = llama_vocab_n_tokens(impl->vocab);
  for (std::int32_t t = 0; t < impl->n_vocab; ++t) {
    if (llama_vocab_is_eog(impl->vocab, t)) impl->eog.push_back(t);
  }
  impl->fingerprint = compute_fingerprint(m, params.path);
  // RPC peers may be CPUs: flash attention stays off unless asked for.
  impl->on_gpu = params.n_gpu_layers != 0 && params.rpc.empty() && gpu_present();
  return Model(std::move(impl));
}

std::vector<Token> Model::tokenize(std::string_view text, const TokenizeOptions &options) const {
  const auto *vocab = impl_->vocab;
  if (text.size() > static_cast<std::size_t>(INT32_MAX / 2)) {
    detail::fail(Errc::out_of_range, fmt::format("text of {} bytes exceeds the tokenizer limit of {} bytes",
                                                 text.size(), INT32_MAX / 2));
  }
  std::vector<Token> out;
  const bool bos = options.add_bos && llama_vocab_bos(vocab) != LLAMA_TOKEN_NULL;
  if (bos) out.push_back(llama_vocab_bos(vocab));
  const std::size_t base = out.size();
  // A token covers at least one byte, so text.size() + 1 always suffices.
  out.resize(base + text.size() + 1);
  const int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data() + base,
                                   static_cast<int32_t>(out.size() - base), false, options.parse_special);
  if (n < 0) detail::fail(Errc::backend, fmt::format("llama_tokenize needed {} slots, more than the bound", -n));
  out.resize(base + static_cast<std::size_t>(n));
  return out;
}

void Model::check_token(Token token) const {
  if (token < 0 || token >= impl_->n_vocab) {
    detail::fail(Errc::out_of_range,
                 fmt::format("token id {} is outside the vocabulary [0, {})", token, impl_->n_vocab));
  }
}

std::string Model::detokenize(std::span<const Token> tokens, const DetokenizeOptions &options) const {
  for (Token t : tokens) check_token(t);
  if (tokens.size() > static_cast<std::size_t>(INT32_MAX / 64)) {
    detail::fail(Errc::out_of_range, fmt::format("{} tokens exceed the detokenizer limit", tokens.size()));
  }
  std::string out(tokens.size() * 8 + 16, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int32_t n = llama_detokenize(impl_->vocab, tokens.data(), static_cast<int32_t>(tokens.size()), out.data(),
                                       static_cast<int32_t>(out.size()), options.remove_special,
                                       options.render_special);
    if (n >= 0) {
      out.resize(static_cast<std::size_t>(n));
      return out;
    }
    out.resize(static_cast<std::size_t>(-n));
  }
  detail::fail(Errc::backend, "llama_detokenize did not fit the size it asked for");
}

namespace {

std::string piece_of(const llama_vocab *vocab, Token token, bool render_special) {
  // A stack buffer: most pieces are short, and the result then fits the
  // string's inline storage (a generation step samples one per conversation).
  char buf[64];
  const int32_t n = llama_token_to_piece(vocab, token, buf, sizeof buf, 0, render_special);
  if (n >= 0) return std::string(buf, static_cast<std::size_t>(n));
  std::string out(static_cast<std::size_t>(-n), '\0');
  const int32_t m = llama_token_to_piece(vocab, token, out.data(), static_cast<int32_t>(out.size()), 0, render_special);
  out.resize(static_cast<std::size_t>(m < 0 ? 0 : m));
  return out;
}

}  // namespace

std::string Model::token_piece(Token token, bool render_special) const {
  check_token(token);
  return piece_of(impl_->vocab, token, render_special);
}

const std::vector<std::string> &Model::Impl::pieces() const {
  std::call_once(pieces_once, [this] {
    std::vector<std::string> out(static_cast<std::size_t>(n_vocab));
    for (std::int32_t t = 0; t < n_vocab; ++t) out[static_cast<std::size_t>(t)] = piece_of(vocab, t, false);
    pieces_ = std::move(out);
  });
  return pieces_;
}

std::int32_t Model::n_vocab() const noexcept { return impl_->n_vocab; }
std::int32_t Model::n_ctx_train() const noexcept { return llama_model_n_ctx_train(impl_->model); }
std::int32_t Model::n_embd() const noexcept { return llama_model_n_embd(impl_->model); }
std::int32_t Model::n_layer() const noexcept { return llama_model_n_layer(impl_->model); }
std::uint64_t Model::n_params() const noexcept { return llama_model_n_params(impl_->model); }
std::uint64_t Model::size_bytes() const noexcept { return llama_model_size(impl_->model); }
Model::Memory detail::memory_of(const llama_model *model) noexcept {
  if (llama_model_is_hybrid(model)) return Model::Memory::hybrid;
  if (llama_model_is_recurrent(model)) return Model::Memory::recurrent;
  return llama_model_n_swa(model) > 0 ? Model::Memory::sliding_window : Model::Memory::plain;
}

const char *detail::memory_name(Model::Memory memory) noexcept {
  switch (memory) {
    case Model::Memory::plain: return "plain attention";
    case Model::Memory::sliding_window: return "a sliding window";
    case Model::Memory::recurrent: return "recurrent";
    case Model::Memory::hybrid: return "hybrid";
  }
  return "?";
}

Model::Memory Model::memory() const noexcept { return detail::memory_of(impl_->model); }
std::int32_t Model::sliding_window() const noexcept { return llama_model_n_swa(impl_->model); }
Token Model::bos() const noexcept { return llama_vocab_bos(impl_->vocab); }
Token Model::eos() const noexcept { return llama_vocab_eos(impl_->vocab); }

bool Model::is_eog(Token token) const noexcept {
  return token >= 0 && token < impl_->n_vocab && llama_vocab_is_eog(impl_->vocab, token);
}

std::string Model::description() const {
  char buf[256];
  const int32_t n = llama_model_desc(impl_->model, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(std::min<int32_t>(n, sizeof buf - 1))) : std::string();
}

std::string Model::meta(std::string_view key) const {
  const std::string k(key);
  std::string out(256, '\0');
  int32_t n = llama_model_meta_val_str(impl_->model, k.c_str(), out.data(), out.size());
  if (n < 0) return {};
  if (static_cast<std::size_t>(n) >= out.size()) {
    out.resize(static_cast<std::size_t>(n) + 1);
    n = llama_model_meta_val_str(impl_->model, k.c_str(), out.data(), out.size());
  }
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string Model::chat_template() const {
  const char *t = llama_model_chat_template(impl_->model, nullptr);
  return t != nullptr ? std::string(t) : std::string();
}

ToolFormat Model::tool_format() const { return tool_format_of(chat_template()); }

std::string Model::apply_chat_template(std::span<const ChatMessage> messages, bool add_assistant,
                                       std::string_view tmpl) const {
  if (messages.empty()) detail::fail(Errc::invalid_argument, "apply_chat_template: no messages");
  std::string name(tmpl);
  if (name.empty()) name = chat_template();
  if (name.empty()) name = "chatml";  // the documented fallback for models without a template
  std::vector<llama_chat_message> chat;
  chat.reserve(messages.size());
  std::size_t chars = 0;
  for (const auto &m : messages) {
    chat.push_back({m.role.c_str(), m.content.c_str()});
    chars += m.role.size() + m.content.size();
  }
  // llama.cpp returns the full length; grow once when the first guess is short.
  std::string out(2 * chars + 256, '\0');
  int32_t n = llama_chat_apply_template(name.c_str(), chat.data(), chat.size(), add_assistant, out.data(),
                                        static_cast<int32_t>(std::min<std::size_t>(out.size(), INT32_MAX)));
  if (n >= 0 && static_cast<std::size_t>(n) > out.size()) {
    out.resize(static_cast<std::size_t>(n));
    n = llama_chat_apply_template(name.c_str(), chat.data(), chat.size(), add_assistant, out.data(),
                                  static_cast<int32_t>(out.size()));
  }
  if (n < 0) {
    const std::string shown = name.size() > 60 ? name.substr(0, 60) + "..." : name;
    detail::fail(Errc::invalid_argument,
         fmt::format("chat template '{}' is not one llama.cpp supports (it matches known templates by pattern, "
                     "without a Jinja engine)", shown));
  }
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::uint64_t Model::fingerprint() const noexcept { return impl_->fingerprint; }
const std::string &Model::path() const noexcept { return impl_->path; }

}  // namespace weft
