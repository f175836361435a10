// The C ABI, part 4 (include/weft/c/state.h): saving and loading
// conversations and executors, save_async, residency (parking) hints, and
// the byte buffers and lists they return.
#include <fmt/format.h>

#include <map>
#include <vector>

#include "capi/c_api_internal.hpp"

namespace weft::capi {
namespace {

static_assert(WEFT_RESIDENCY_RECOMPUTE == static_cast<int>(Residency::recompute));

using Bytes = std::vector<std::uint8_t>;
// A loaded snapshot: saved id -> conversation, in id order.
using ConversationList = std::vector<std::pair<std::uint64_t, Conversation>>;

std::string path_arg(const char *path) {
  need(path, "path");
  return path;  // bytes as the OS takes them: no UTF-8 check
}

weft_conversation *new_conv_handle(Conversation c) {
  return make_handle<weft_conversation>(Kind::conversation, std::make_shared<Conversation>(std::move(c)));
}

weft_conversation_list *new_list(std::map<std::uint64_t, Conversation> loaded) {
  auto list = std::make_shared<ConversationList>(loaded.begin(), loaded.end());
  return make_handle<weft_conversation_list>(Kind::conversation_list, std::move(list));
}

// Hands a save_async outcome to the C callback: a new weft_bytes handle (the
// callback's to free), or the status and message of the error. Runs where
// Conversation::save_async calls back: under the executor's state lock.
void deliver_save(weft_save_callback callback, void *user_data, Bytes bytes, std::exception_ptr error) noexcept {
  weft_bytes *handle = nullptr;
  if (!error) {
    try {
      handle = make_handle<weft_bytes>(Kind::bytes, std::make_shared<Bytes>(std::move(bytes)));
    } catch (...) {
      error = std::current_exception();
    }
  }
  std::string message;
  const weft_status status = status_of(error, message);
  if (status != WEFT_OK) {
    try {
      message.insert(0, "weft_conversation_save_async: ");
    } catch (...) {
      // The code still says what happened.
    }
  }
  callback(status, handle, message.c_str(), user_data);
}

}  // namespace
}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

// --- Byte buffers ------------------------------------------------------------------

weft_status weft_bytes_data(const weft_bytes *bytes, const uint8_t **data, size_t *size) {
  return guarded(__func__, [&] {
    auto b = get<Bytes>(bytes, Kind::bytes);
    need(data, "data");
    need(size, "size");
    *data = b->data();
    *size = b->size();
  });
}

weft_status weft_bytes_free(weft_bytes *bytes) { return free_handle(__func__, bytes, Kind::bytes); }

// --- One conversation ----------------------------------------------------------------

weft_status weft_conversation_save(const weft_conversation *conversation, weft_bytes **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto c = get<weft::Conversation>(conversation, Kind::conversation);
    *out = make_handle<weft_bytes>(Kind::bytes, std::make_shared<Bytes>(c->save()));
  });
}

weft_status weft_conversation_save_tokens(const weft_conversation *conversation, weft_bytes **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto c = get<weft::Conversation>(conversation, Kind::conversation);
    *out = make_handle<weft_bytes>(Kind::bytes, std::make_shared<Bytes>(c->save(weft::SaveOptions{.tokens_only = true})));
  });
}

weft_status weft_conversation_save_file(const weft_conversation *conversation, const char *path) {
  return guarded(__func__, [&] { get<weft::Conversation>(conversation, Kind::conversation)->save(path_arg(path)); });
}

weft_status weft_conversation_save_async(const weft_conversation *conversation, weft_save_callback callback,
                                         void *user_data) {
  return guarded(__func__, [&] {
    auto c = get<weft::Conversation>(conversation, Kind::conversation);
    if (callback == nullptr) fail(WEFT_ERR_NULL_ARG, "argument `callback` is NULL");
    // When nobody else steps the callback runs inside this call. C++
    // save_async throws only before it queues the save; once queued, exactly
    // one call follows (weft.h's promise rests on that).
    c->save_async([callback, user_data](Bytes bytes, std::exception_ptr error) {
      deliver_save(callback, user_data, std::move(bytes), std::move(error));
    });
    clear_error();  // the callback may have called weft on this thread
  });
}

weft_status weft_executor_load(weft_executor *executor, const uint8_t *data, size_t size, weft_conversation **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto ex = get<weft::Executor>(executor, Kind::executor);
    *out = new_conv_handle(ex->load(bytes_arg(data, size)));
  });
}

weft_status weft_executor_load_file(weft_executor *executor, const char *path, weft_conversation **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto ex = get<weft::Executor>(executor, Kind::executor);
    *out = new_conv_handle(ex->load(path_arg(path)));
  });
}

// --- Every conversation --------------------------------------------------------------

weft_status weft_executor_save_all(weft_executor *executor, weft_bytes **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto ex = get<weft::Executor>(executor, Kind::executor);
    *out = make_handle<weft_bytes>(Kind::bytes, std::make_shared<Bytes>(ex->save_all()));
  });
}

weft_status weft_executor_save_all_file(weft_executor *executor, const char *path) {
  return guarded(__func__, [&] { get<weft::Executor>(executor, Kind::executor)->save_all(path_arg(path)); });
}

weft_status weft_executor_load_all(weft_executor *executor, const uint8_t *data, size_t size,
                                   weft_conversation_list **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto ex = get<weft::Executor>(executor, Kind::executor);
    *out = new_list(ex->load_all(bytes_arg(data, size)));
  });
}

weft_status weft_executor_load_all_file(weft_executor *executor, const char *path, weft_conversation_list **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto ex = get<weft::Executor>(executor, Kind::executor);
    *out = new_list(ex->load_all(path_arg(path)));
  });
}

weft_status weft_conversation_list_count(const weft_conversation_list *list, size_t *out) {
  return guarded(__func__, [&] {
    auto l = get<ConversationList>(list, Kind::conversation_list);
    need(out, "out");
    *out = l->size();
  });
}

weft_status weft_conversation_list_get(const weft_conversation_list *list, size_t index, uint64_t *out_saved_id,
                                       weft_conversation **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto l = get<ConversationList>(list, Kind::conversation_list);
    need(out_saved_id, "out_saved_id");
    if (index >= l->size()) {
      fail(WEFT_ERR_OUT_OF_RANGE, fmt::format("index {} is past the list's {} conversations", index, l->size()));
    }
    *out_saved_id = (*l)[index].first;
    *out = new_conv_handle((*l)[index].second);
  });
}

weft_status weft_conversation_list_free(weft_conversation_list *list) {
  return free_handle(__func__, list, Kind::conversation_list);
}

// --- Residency --------------------------------------------------------------------

const char *weft_residency_name(int32_t residency) {
  if (residency < WEFT_RESIDENCY_RESIDENT || residency > WEFT_RESIDENCY_RECOMPUTE) return "unknown";
  return weft::residency_name(static_cast<weft::Residency>(residency));
}

weft_status weft_conversation_residency(const weft_conversation *conversation, int32_t *out) {
  return guarded(__func__, [&] {
    auto c = get<weft::Conversation>(conversation, Kind::conversation);
    need(out, "out");
    *out = static_cast<int32_t>(c->residency());
  });
}

weft_status weft_conversation_park(weft_conversation *conversation, weft_bool *out_parked) {
  return guarded(__func__, [&] {
    auto c = get<weft::Conversation>(conversation, Kind::conversation);
    need(out_parked, "out_parked");
    *out_parked = c->park() ? 1 : 0;
  });
}

weft_status weft_conversation_prefetch(weft_conversation *conversation) {
  return guarded(__func__, [&] { get<weft::Conversation>(conversation, Kind::conversation)->prefetch(); });
}

}  // extern "C"
