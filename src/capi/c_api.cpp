// The C ABI, part 1: errors, the handle registry, argument checks, version,
// logging and the model. Executor: c_api_executor.cpp; conversation and
// generation: c_api_conversation.cpp; state and residency: c_api_state.cpp;
// adapters: c_api_adapter.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "capi/c_api_internal.hpp"
#include "core/backend_loader.hpp"
#include "core/internal.hpp"

namespace weft::capi {

// weft.h numbers its codes as weft::Errc, negated; bindings rely on it.
static_assert(WEFT_ERR_INVALID_ARGUMENT == from_errc(Errc::invalid_argument));
static_assert(WEFT_ERR_OUT_OF_RANGE == from_errc(Errc::out_of_range));
static_assert(WEFT_ERR_NOT_FOUND == from_errc(Errc::not_found));
static_assert(WEFT_ERR_IO == from_errc(Errc::io));
static_assert(WEFT_ERR_CORRUPT == from_errc(Errc::corrupt));
static_assert(WEFT_ERR_INCOMPATIBLE == from_errc(Errc::incompatible));
static_assert(WEFT_ERR_BACKEND == from_errc(Errc::backend));
static_assert(WEFT_ERR_DISPOSED == from_errc(Errc::disposed));
static_assert(WEFT_ERR_CANCELLED == from_errc(Errc::cancelled));
static_assert(WEFT_LOG_DEBUG == static_cast<int>(LogLevel::debug) && WEFT_LOG_NONE == static_cast<int>(LogLevel::none));

namespace {

thread_local std::string t_error;

}  // namespace

void fail(weft_status status, const std::string &message) { throw CError(status, message); }

weft_status set_error(weft_status status, const char *function, const char *message) noexcept {
  try {
    t_error.assign(function);
    t_error += ": ";
    t_error += message;
  } catch (...) {
    t_error.clear();  // out of memory for the message itself: the code still says it
  }
  return status;
}

void clear_error() noexcept { t_error.clear(); }

// --- Handles -------------------------------------------------------------------

namespace {

struct Entry {
  Kind kind;
  std::shared_ptr<void> object;
};

struct Registry {
  std::shared_mutex mu;
  std::unordered_map<std::uintptr_t, Entry> live;
  // Spaced and offset so that small integers and other handles' neighbours
  // are never valid by accident.
  std::uintptr_t next = 0x10000;
};

// Never destroyed: handles leaked until exit must not be freed during static
// destruction, after llama.cpp's own statics are gone.
Registry &registry() {
  static Registry *r = new Registry;
  return *r;
}

[[noreturn]] void bad_handle(const void *handle, Kind kind, const Entry *found) {
  if (found != nullptr) {
    fail(WEFT_ERR_INVALID_HANDLE,
         fmt::format("handle {} is a {}, not a {}", handle, kind_name(found->kind), kind_name(kind)));
  }
  fail(WEFT_ERR_INVALID_HANDLE,
       fmt::format("{} handle {} is not live (already freed, or never returned by weft)", kind_name(kind), handle));
}

}  // namespace

const char *kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::model: return "weft_model";
    case Kind::executor: return "weft_executor";
    case Kind::conversation: return "weft_conversation";
    case Kind::generation: return "weft_generation";
    case Kind::event_list: return "weft_event_list";
    case Kind::bytes: return "weft_bytes";
    case Kind::conversation_list: return "weft_conversation_list";
    case Kind::adapter: return "weft_adapter";
    case Kind::projector: return "weft_projector";
    case Kind::prepared_image: return "weft_prepared_image";
    case Kind::embedding: return "weft_embedding";
    case Kind::memory: return "weft_memory";
    case Kind::memory_hits: return "weft_memory_hits";
    case Kind::memory_search: return "weft_memory_search_handle";
  }
  return "handle";
}

std::uintptr_t add_handle(Kind kind, std::shared_ptr<void> object) {
  auto &r = registry();
  std::unique_lock lock(r.mu);
  const std::uintptr_t id = r.next;
  r.next += 16;
  r.live.emplace(id, Entry{kind, std::move(object)});
  return id;
}

std::shared_ptr<void> find_handle(const void *handle, Kind kind) {
  if (handle == nullptr) fail(WEFT_ERR_NULL_ARG, fmt::format("the {} handle is NULL", kind_name(kind)));
  auto &r = registry();
  std::shared_lock lock(r.mu);
  const auto it = r.live.find(reinterpret_cast<std::uintptr_t>(handle));
  if (it == r.live.end() || it->second.kind != kind) bad_handle(handle, kind, it == r.live.end() ? nullptr : &it->second);
  return it->second.object;
}

std::shared_ptr<void> remove_handle(const void *handle, Kind kind) {
  if (handle == nullptr) return nullptr;
  auto &r = registry();
  std::unique_lock lock(r.mu);
  const auto it = r.live.find(reinterpret_cast<std::uintptr_t>(handle));
  if (it == r.live.end() || it->second.kind != kind) bad_handle(handle, kind, it == r.live.end() ? nullptr : &it->second);
  auto object = std::move(it->second.object);
  r.live.erase(it);
  return object;
}

void remove_handle_quietly(const void *handle, Kind kind) noexcept {
  std::shared_ptr<void> object;
  try {
    auto &r = registry();
    std::unique_lock lock(r.mu);
    const auto it = r.live.find(reinterpret_cast<std::uintptr_t>(handle));
    if (it == r.live.end() || it->second.kind != kind) return;
    object = std::move(it->second.object);
    r.live.erase(it);
  } catch (...) {
    // Locking cannot fail in practice; a stale entry would only leak.
  }
}

weft_status free_handle(const char *function, const void *handle, Kind kind) noexcept {
  std::shared_ptr<void> object;
  const weft_status status = guarded(function, [&] { object = remove_handle(handle, kind); });
  // Destroyed here, outside the registry's lock: an executor's destructor
  // waits for a running step, whose callbacks may call weft.
  try {
    object.reset();
  } catch (...) {
    return set_error(WEFT_ERR_INTERNAL, function, "destructor threw");
  }
  return status;
}

// --- Arguments -------------------------------------------------------------------

void check_struct_size(const char *name, std::size_t got, std::initializer_list<std::size_t> known) {
  for (std::size_t k : known) {
    if (got == k) return;
  }
  std::string sizes;
  for (std::size_t k : known) sizes += (sizes.empty() ? "" : ", ") + std::to_string(k);
  fail(WEFT_ERR_STRUCT_SIZE,
       fmt::format("{}.struct_size = {} is not a size this libweft {} knows ({}): set it to sizeof({}) and use the "
                   "weft.h this library was built with or an older one",
                   name, got, WEFT_VERSION_STRING, sizes, name));
}

namespace {

// Offset of the first byte that is not part of valid UTF-8 (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF), or npos.
std::size_t invalid_utf8_at(std::string_view s) {
  const auto *p = reinterpret_cast<const unsigned char *>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace

std::string_view text_arg(const char *text, std::size_t len, const char *name) {
  if (text == nullptr && len > 0) fail(WEFT_ERR_NULL_ARG, fmt::format("argument `{}` is NULL with length {}", name, len));
  const std::string_view s(text == nullptr ? "" : text, len);
  const std::size_t bad = invalid_utf8_at(s);
  if (bad != std::string_view::npos) {
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("`{}` is not valid UTF-8: byte {} (0x{:02x}) of {}", name, bad,
                                                static_cast<unsigned char>(s[bad]), s.size()));
  }
  return s;
}

std::string_view cstr_arg(const char *text, const char *name, bool optional) {
  if (text == nullptr) {
    if (optional) return {};
    fail(WEFT_ERR_NULL_ARG, fmt::format("argument `{}` is NULL", name));
  }
  return text_arg(text, std::strlen(text), name);
}

void check_flags(std::uint32_t flags, std::uint32_t allowed, const char *name) {
  if ((flags & ~allowed) != 0) {
    fail(WEFT_ERR_INVALID_ARGUMENT,
         fmt::format("`{}` = 0x{:x} has unknown bits 0x{:x} (allowed: 0x{:x})", name, flags, flags & ~allowed, allowed));
  }
}

void copy_text_out(std::string_view text, char *buf, std::size_t capacity, std::size_t *out_len) {
  need(out_len, "out_len");
  *out_len = text.size();
  if (capacity <= text.size()) {
    fail(WEFT_ERR_BUFFER_TOO_SMALL,
         fmt::format("the text needs {} bytes plus a NUL, capacity is {}", text.size(), capacity));
  }
  need(buf, "buf");
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
}

void copy_error_out(const std::optional<Error> &error, weft_status *out_code, char *buf, std::size_t capacity,
                    std::size_t *out_len) {
  need(out_code, "out_code");
  *out_code = error ? from_errc(error->code()) : WEFT_OK;
  if (!error) {
    need(out_len, "out_len");
    *out_len = 0;
    if (capacity > 0 && buf != nullptr) buf[0] = '\0';
    return;
  }
  copy_text_out(error->what(), buf, capacity, out_len);
}

}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

// --- Errors and version -----------------------------------------------------------

const char *weft_status_name(weft_status status) {
  switch (status) {
    case WEFT_OK: return "ok";
    case WEFT_ERR_INVALID_ARGUMENT: return "invalid_argument";
    case WEFT_ERR_OUT_OF_RANGE: return "out_of_range";
    case WEFT_ERR_NOT_FOUND: return "not_found";
    case WEFT_ERR_IO: return "io";
    case WEFT_ERR_CORRUPT: return "corrupt";
    case WEFT_ERR_INCOMPATIBLE: return "incompatible";
    case WEFT_ERR_BACKEND: return "backend";
    case WEFT_ERR_DISPOSED: return "disposed";
    case WEFT_ERR_CANCELLED: return "cancelled";
    case WEFT_ERR_NULL_ARG: return "null_arg";
    case WEFT_ERR_STRUCT_SIZE: return "struct_size";
    case WEFT_ERR_BUFFER_TOO_SMALL: return "buffer_too_small";
    case WEFT_ERR_INVALID_HANDLE: return "invalid_handle";
    case WEFT_ERR_OUT_OF_MEMORY: return "out_of_memory";
    case WEFT_ERR_INTERNAL: return "internal";
  }
  return "unknown";
}

const char *weft_last_error(void) { return t_error.c_str(); }

const char *weft_version(void) { return weft::version(); }

const char *weft_llama_version(void) { return weft::llama_version(); }

weft_status weft_cpu_variant(const char **out_variant, weft_bool *out_runtime_dispatch) {
  return guarded(__func__, [&] {
    need(out_variant, "out_variant");
    *out_variant = nullptr;
    weft::detail::ensure_backend();
    // The loader's value lives as long as the process.
    const weft::CpuBackend &b = weft::detail::loaded_cpu_backend();
    *out_variant = b.variant.c_str();
    if (out_runtime_dispatch != nullptr) *out_runtime_dispatch = b.runtime_dispatch ? 1 : 0;
  });
}

// --- Logging -------------------------------------------------------------------------

weft_status weft_set_log_callback(weft_log_callback callback, int32_t min_level, void *user_data,
                                  weft_free_fn user_data_free) {
  return guarded(__func__, [&] {
    if (min_level < WEFT_LOG_DEBUG || min_level > WEFT_LOG_NONE) {
      fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("min_level = {} is not a weft_log_level (0..4)", min_level));
    }
    // Serialises install-then-arm, so a racing install cannot drop our sink
    // before it is armed (which would leak user_data).
    static std::mutex install_mu;
    std::lock_guard lock(install_mu);
    if (callback == nullptr) {
      weft::set_log_sink({}, weft::LogLevel::none);
      return;
    }
    auto ud = std::make_shared<UserData>(user_data, user_data_free);
    weft::set_log_sink(
        [callback, ud](weft::LogLevel level, std::string_view line) {
          thread_local std::string buf;  // the callback gets a NUL-terminated line
          buf.assign(line);
          callback(static_cast<int32_t>(level), buf.c_str(), buf.size(), ud->data());
        },
        static_cast<weft::LogLevel>(min_level));
    ud->arm();
  });
}

// --- Model -----------------------------------------------------------------------------

}  // extern "C"

namespace {

weft_model_params model_defaults() {
  weft_model_params d{};
  d.struct_size = sizeof d;
  d.path = nullptr;
  d.on_progress = nullptr;
  d.progress_user_data = nullptr;
  d.n_gpu_layers = 0;
  d.use_mmap = 1;
  d.vocab_only = 0;
  d.rpc = nullptr;
  d.rpc_timeout_ms = 5000;
  d.rpc_reply_timeout_ms = 60000;
  return d;
}

}  // namespace

extern "C" {

weft_status weft_model_params_init(weft_model_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_model_params", model_defaults(),
                {offsetof(weft_model_params, rpc), offsetof(weft_model_params, rpc_reply_timeout_ms),
                 sizeof(weft_model_params)});
  });
}

weft_status weft_model_load(const weft_model_params *params, weft_model **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    need(params, "params");
    weft_model_params p = model_defaults();
    read_struct(params, "weft_model_params", p, {offsetof(weft_model_params, rpc), offsetof(weft_model_params, rpc_reply_timeout_ms),
                 sizeof(weft_model_params)});
    if (p.path == nullptr) fail(WEFT_ERR_NULL_ARG, "weft_model_params.path is NULL");
    weft::ModelParams mp;
    mp.path = p.path;  // bytes as the OS takes them: no UTF-8 check
    mp.n_gpu_layers = p.n_gpu_layers;
    mp.use_mmap = p.use_mmap != 0;
    mp.vocab_only = p.vocab_only != 0;
    for (std::string_view rest = p.rpc == nullptr ? "" : p.rpc; !rest.empty();) {
      const auto comma = rest.find(',');
      mp.rpc.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    }
    mp.rpc_timeout_ms = p.rpc_timeout_ms;
    mp.rpc_reply_timeout_ms = static_cast<int>(std::clamp<std::int64_t>(p.rpc_reply_timeout_ms, INT32_MIN, INT32_MAX));
    if (p.on_progress != nullptr) {
      mp.on_progress = [cb = p.on_progress, ud = p.progress_user_data](float progress) { return cb(progress, ud) != 0; };
    }
    auto model = std::make_shared<weft::Model>(weft::Model::load(mp));
    *out = make_handle<weft_model>(Kind::model, std::move(model));
  });
}

weft_status weft_model_free(weft_model *model) { return free_handle(__func__, model, Kind::model); }

weft_status weft_model_get_info(const weft_model *model, weft_model_info *out) {
  return guarded(__func__, [&] {
    auto m = get<weft::Model>(model, Kind::model);
    weft_model_info info{};
    info.n_params = m->n_params();
    info.size_bytes = m->size_bytes();
    info.fingerprint = m->fingerprint();
    info.n_vocab = m->n_vocab();
    info.n_ctx_train = m->n_ctx_train();
    info.n_embd = m->n_embd();
    info.n_layer = m->n_layer();
    info.bos = m->bos();
    info.eos = m->eos();
    info.memory = static_cast<int32_t>(m->memory());
    info.sliding_window = m->sliding_window();
    info.tool_format = static_cast<int32_t>(m->tool_format());
    write_struct(out, "weft_model_info", info,
                 {offsetof(weft_model_info, memory), offsetof(weft_model_info, tool_format), sizeof(weft_model_info)});
  });
}

weft_status weft_model_n_vocab(const weft_model *model, int32_t *out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = get<weft::Model>(model, Kind::model)->n_vocab();
  });
}

weft_status weft_model_tokenize(const weft_model *model, const char *text, size_t len, uint32_t flags,
                                weft_token *tokens, size_t capacity, size_t *out_n) {
  return guarded(__func__, [&] {
    auto m = get<weft::Model>(model, Kind::model);
    const auto s = text_arg(text, len, "text");
    check_flags(flags, WEFT_TEXT_ADD_BOS | WEFT_TEXT_PARSE_SPECIAL, "flags");
    const auto toks = m->tokenize(s, {.add_bos = (flags & WEFT_TEXT_ADD_BOS) != 0,
                                      .parse_special = (flags & WEFT_TEXT_PARSE_SPECIAL) != 0});
    copy_array_out<weft::Token>(toks, tokens, capacity, out_n);
  });
}

weft_status weft_model_detokenize(const weft_model *model, const weft_token *tokens, size_t n_tokens, uint32_t flags,
                                  char *buf, size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] {
    auto m = get<weft::Model>(model, Kind::model);
    if (n_tokens > 0) need(tokens, "tokens");
    check_flags(flags, WEFT_DETOK_REMOVE_SPECIAL | WEFT_DETOK_RENDER_SPECIAL, "flags");
    const std::string text = m->detokenize(std::span<const weft::Token>(tokens, n_tokens),
                                           {.remove_special = (flags & WEFT_DETOK_REMOVE_SPECIAL) != 0,
                                            .render_special = (flags & WEFT_DETOK_RENDER_SPECIAL) != 0});
    copy_text_out(text, buf, capacity, out_len);
  });
}

weft_status weft_model_token_piece(const weft_model *model, weft_token token, uint32_t flags, char *buf,
                                   size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] {
    auto m = get<weft::Model>(model, Kind::model);
    check_flags(flags, WEFT_DETOK_RENDER_SPECIAL, "flags");
    m->check_token(token);
    copy_text_out(m->token_piece(token, (flags & WEFT_DETOK_RENDER_SPECIAL) != 0), buf, capacity, out_len);
  });
}

weft_status weft_model_is_eog(const weft_model *model, weft_token token, weft_bool *out) {
  return guarded(__func__, [&] {
    auto m = get<weft::Model>(model, Kind::model);
    need(out, "out");
    m->check_token(token);
    *out = m->is_eog(token) ? 1 : 0;
  });
}

weft_status weft_model_description(const weft_model *model, char *buf, size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] {
    copy_text_out(get<weft::Model>(model, Kind::model)->description(), buf, capacity, out_len);
  });
}

weft_status weft_model_meta(const weft_model *model, const char *key, char *buf, size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] {
    auto m = get<weft::Model>(model, Kind::model);
    const auto k = cstr_arg(key, "key");
    copy_text_out(m->meta(k), buf, capacity, out_len);
  });
}

}  // extern "C"
