// Internals of the C ABI (src/capi/c_api*.cpp): the handle registry,
// exception translation, argument and struct-size checks, output copying.
// Not installed.
//
// Adding a C function: declare it in the include/weft/c/*.h header of its
// concept (weft.h includes them all), define it in the c_api_*.cpp of its
// object as `return guarded(__func__, [&] { ... });`, fetch handles with
// get<T>(), and check pointers with need(). Nothing else is needed for the
// export (src/capi/weft.map exports every weft_* symbol).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "weft/weft.h"
#include "weft/weft.hpp"

namespace weft::capi {

// A failure the C layer itself detects (a NULL argument, a bad size, ...).
class CError : public std::runtime_error {
 public:
  CError(weft_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
  weft_status status() const noexcept { return status_; }

 private:
  weft_status status_;
};

[[noreturn]] void fail(weft_status status, const std::string &message);

constexpr weft_status from_errc(Errc code) noexcept { return static_cast<weft_status>(-static_cast<int>(code)); }

// Records the failure for weft_last_error() on this thread; never throws.
weft_status set_error(weft_status status, const char *function, const char *message) noexcept;
void clear_error() noexcept;

// The status an exception stands for and its message, as guarded() reports
// them (for errors that reach a callback instead of a return value). Never
// throws: a message that cannot be copied stays empty.
inline weft_status status_of(const std::exception_ptr &error, std::string &message) noexcept {
  const auto say = [&](const char *what) noexcept {
    try {
      message.assign(what);
    } catch (...) {
      message.clear();
    }
  };
  if (!error) return WEFT_OK;
  try {
    std::rethrow_exception(error);
  } catch (const CError &e) {
    say(e.what());
    return e.status();
  } catch (const Error &e) {
    say(e.what());
    return from_errc(e.code());
  } catch (const std::bad_alloc &) {
    say("out of memory");
    return WEFT_ERR_OUT_OF_MEMORY;
  } catch (const std::exception &e) {
    say(e.what());
    return WEFT_ERR_INTERNAL;
  } catch (...) {
    say("unknown exception");
    return WEFT_ERR_INTERNAL;
  }
}

// Runs `body`, translating every exception into a status and a message
// prefixed with the C function's name. Nothing escapes.
template <class Fn>
weft_status guarded(const char *function, Fn &&body) noexcept {
  try {
    clear_error();
    body();
    return WEFT_OK;
  } catch (const CError &e) {
    return set_error(e.status(), function, e.what());
  } catch (const Error &e) {
    return set_error(from_errc(e.code()), function, e.what());
  } catch (const std::bad_alloc &) {
    return set_error(WEFT_ERR_OUT_OF_MEMORY, function, "out of memory");
  } catch (const std::exception &e) {
    return set_error(WEFT_ERR_INTERNAL, function, e.what());
  } catch (...) {
    return set_error(WEFT_ERR_INTERNAL, function, "unknown exception");
  }
}

// --- Handles ---------------------------------------------------------------
//
// A C handle is an id in a process-wide registry, never an address: ids are
// never reused, so a freed (or foreign, or wrongly typed) handle is refused
// with WEFT_ERR_INVALID_HANDLE instead of being dereferenced. Each call holds
// a shared_ptr to the object while it runs, so freeing a handle on one thread
// while another uses it is safe: the object goes when the last call returns.

enum class Kind : std::uint8_t {
  model,
  executor,
  conversation,
  generation,
  event_list,
  bytes,
  conversation_list,
  adapter,
  projector,
  prepared_image,
  embedding,
  memory,
  memory_hits,
  memory_search,
};

const char *kind_name(Kind kind) noexcept;

std::uintptr_t add_handle(Kind kind, std::shared_ptr<void> object);
std::shared_ptr<void> find_handle(const void *handle, Kind kind);
// Removes a handle; returns its object (nullptr for a NULL handle), to be
// dropped outside the registry's lock.
std::shared_ptr<void> remove_handle(const void *handle, Kind kind);

template <class T>
std::shared_ptr<T> get(const void *handle, Kind kind) {
  return std::static_pointer_cast<T>(find_handle(handle, kind));
}

// A conversation handle's object; a handle every part of the ABI takes.
inline std::shared_ptr<Conversation> conv_of(const weft_conversation *c) {
  return get<Conversation>(c, Kind::conversation);
}

template <class Handle, class T>
Handle *make_handle(Kind kind, std::shared_ptr<T> object) {
  return reinterpret_cast<Handle *>(add_handle(kind, std::move(object)));
}

// Removes a handle if still there (a borrowed one after its callback);
// never throws.
void remove_handle_quietly(const void *handle, Kind kind) noexcept;

// Frees a handle: NULL is a no-op; the object is destroyed here unless a
// call on another thread still holds it.
weft_status free_handle(const char *function, const void *handle, Kind kind) noexcept;

// --- Arguments ---------------------------------------------------------------

inline void need(const void *ptr, const char *name) {
  if (ptr == nullptr) fail(WEFT_ERR_NULL_ARG, std::string("argument `") + name + "` is NULL");
}

// A versioned struct from the caller: struct_size must be one of `known`
// (the sizes of released versions, oldest first, sizeof(T) last); fields
// past an older version's size keep the defaults in `out`.
void check_struct_size(const char *name, std::size_t got, std::initializer_list<std::size_t> known);

template <class T>
void read_struct(const T *in, const char *name, T &out, std::initializer_list<std::size_t> known) {
  check_struct_size(name, in->struct_size, known);
  std::memcpy(static_cast<void *>(&out), in, in->struct_size);
}

// Writes `value` into the caller's result struct, up to its struct_size.
template <class T>
void write_struct(T *out, const char *name, T value, std::initializer_list<std::size_t> known) {
  need(out, name);
  check_struct_size(name, out->struct_size, known);
  value.struct_size = out->struct_size;
  std::memcpy(static_cast<void *>(out), &value, out->struct_size);
}

// Fills a parameter struct with defaults (weft_*_params_init).
template <class T>
void init_struct(T *out, std::size_t struct_size, const char *name, const T &defaults,
                 std::initializer_list<std::size_t> known) {
  need(out, "params");
  check_struct_size(name, struct_size, known);
  T value = defaults;
  value.struct_size = struct_size;
  std::memcpy(static_cast<void *>(out), &value, struct_size);
}

// UTF-8 text in: refuses NULL with len > 0 and invalid UTF-8 (naming the
// offset of the first bad byte).
std::string_view text_arg(const char *text, std::size_t len, const char *name);
// A NUL-terminated UTF-8 string in (NULL allowed when `optional`).
std::string_view cstr_arg(const char *text, const char *name, bool optional = false);
void check_flags(std::uint32_t flags, std::uint32_t allowed, const char *name);
// Bytes in: refuses NULL with len > 0 (WEFT_ERR_NULL_ARG naming the argument).
inline std::span<const std::uint8_t> bytes_arg(const std::uint8_t *data, std::size_t len, const char *name = "data") {
  if (len > 0) need(data, name);
  return {data, len};
}

// The embedder fields of weft_executor_params (c_api_embedding.cpp): their
// defaults, and as ExecutorParams::embedder (checked, naming the field).
void embedder_defaults(weft_executor_params &p);
void embedder_from_c(const weft_executor_params &p, weft::ExecutorParams &out);

// A weft_speculative_params as weft::SpeculativeParams (c_api_speculative.cpp),
// checked, `field` naming it in errors.
weft::SpeculativeParams speculative_from_c(const weft_speculative_params *in, const char *field);
// A weft_draft_model_params as weft::DraftModelParams (c_api_speculative.cpp),
// checked, `field` naming it in errors.
weft::DraftModelParams draft_model_from_c(const weft_draft_model_params *in, const char *field);

// Tools in (c_api_tools.cpp): a weft_tool array as weft::Tool (`field` names
// it in errors), a weft_tool_format as weft::ToolFormat (refused by name).
std::vector<weft::Tool> to_tools(const weft_tool *tools, std::size_t n, const char *field);
weft::ToolFormat to_tool_format(std::int32_t f, const char *field);

// Output copying: *out_n is always set; too small a buffer fails with
// WEFT_ERR_BUFFER_TOO_SMALL. Text gets a NUL (capacity needs len + 1).
void copy_text_out(std::string_view text, char *buf, std::size_t capacity, std::size_t *out_len);
template <class T>
void copy_array_out(std::span<const T> items, T *buf, std::size_t capacity, std::size_t *out_n) {
  need(out_n, "out_n");
  *out_n = items.size();
  if (capacity < items.size()) {
    fail(WEFT_ERR_BUFFER_TOO_SMALL, "the output needs " + std::to_string(items.size()) + " elements, capacity is " +
                                        std::to_string(capacity));
  }
  if (items.empty()) return;
  need(buf, "buf");
  std::memcpy(buf, items.data(), items.size() * sizeof(T));
}

// An error's code and message out (weft_conversation_error, weft_generation_error).
void copy_error_out(const std::optional<Error> &error, weft_status *out_code, char *buf, std::size_t capacity,
                    std::size_t *out_len);

// --- Callbacks -----------------------------------------------------------------

// The caller's user_data for a callback that outlives the registering call.
// Its free function runs when the last copy of the callback goes, but only
// once the registering call has succeeded (`arm()`): on failure the caller
// keeps ownership, as weft.h promises.
class UserData {
 public:
  UserData(void *data, weft_free_fn free_fn) : data_(data), free_fn_(free_fn) {}
  UserData(const UserData &) = delete;
  UserData &operator=(const UserData &) = delete;
  ~UserData() {
    if (armed_ && free_fn_ != nullptr) free_fn_(data_);
  }
  void *data() const noexcept { return data_; }
  void arm() noexcept { armed_.store(true); }

 private:
  void *data_;
  weft_free_fn free_fn_;
  std::atomic<bool> armed_{false};
};

}  // namespace weft::capi
