// weft/c/state.h — a conversation (or every conversation of an executor)
// as bytes or a file (docs/STATE_FORMAT.md), loadable into any executor of
// the same model; residency (parking) hints.
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_STATE_H
#define WEFT_C_STATE_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

// *data points into `bytes` and lives as long as it.
WEFT_C_API weft_status weft_bytes_data(const weft_bytes *bytes, const uint8_t **data, size_t *size);
WEFT_C_API weft_status weft_bytes_free(weft_bytes *bytes);

// History, queued input, logits, sampler state, a running generation (its
// callback does not travel) and KV data. One of the few calls that wait for
// a running step: the KV data is read at a step boundary (save_async below
// does not wait). The file is written atomically: a failure leaves the
// previous file intact.
WEFT_C_API weft_status weft_conversation_save(const weft_conversation *conversation, weft_bytes **out);
WEFT_C_API weft_status weft_conversation_save_file(const weft_conversation *conversation, const char *path);
// Tokens only, no KV data and no logits: the smallest state (a few bytes a
// token); loading it decodes the history again, sharing whatever the
// loading executor's cache holds of it already.
WEFT_C_API weft_status weft_conversation_save_tokens(const weft_conversation *conversation, weft_bytes **out);

// The outcome of weft_conversation_save_async, delivered exactly once. On
// success `status` is WEFT_OK, `bytes` a new weft_bytes that the callback
// owns (free it with weft_bytes_free, then or later, from any thread) and
// `message` is "". On failure `bytes` is NULL and `message` (NUL-terminated)
// says why, as weft_last_error() would: WEFT_ERR_DISPOSED when the
// conversation or its executor went first. `message` is valid during the
// call only. The callback runs with the executor's state lock held: it must
// not call weft functions on that executor, its conversations or its
// generations (they would deadlock); weft_bytes_data and weft_bytes_free
// are fine. It must return quickly (the stepping thread waits for it).
typedef void (*weft_save_callback)(weft_status status, weft_bytes *bytes, const char *message, void *user_data);

// weft_conversation_save without waiting for a running step: the same
// bytes, taken at a step boundary and handed to `callback`:
// - nobody else stepping (no step in progress, no worker running), or
//   called from a callback on the stepping thread: at once, on this thread,
//   before this function returns;
// - else on the stepping thread, at its next boundary: the end of the
//   running step, or, with the worker running, the start of the worker's
//   next step (it is woken for it). Asked for while a step already runs its
//   on_token callbacks, it waits for the start of the next step: the
//   worker's, else the next weft_executor_step;
// - the executor freed first: on the thread that frees it, with
//   WEFT_ERR_DISPOSED.
// Returns WEFT_OK when the save was taken or queued; the callback then runs
// exactly once. On any other status (WEFT_ERR_NULL_ARG for a NULL callback,
// WEFT_ERR_INVALID_HANDLE, WEFT_ERR_DISPOSED for a conversation disposed
// already) it never runs and user_data stays the caller's.
WEFT_C_API weft_status weft_conversation_save_async(const weft_conversation *conversation,
                                                    weft_save_callback callback, void *user_data);

// A saved conversation, back in this executor: resident if a slot and cells
// are free, else parked. WEFT_ERR_CORRUPT (damaged, version field included),
// WEFT_ERR_INCOMPATIBLE (another model, or an intact state of another format
// version), WEFT_ERR_OUT_OF_RANGE (longer than this n_ctx), WEFT_ERR_NOT_FOUND
// (an adapter it was decoded under is not loaded for this model:
// weft_model_load_adapter it first; or, for files, missing) /
// WEFT_ERR_INVALID_ARGUMENT / WEFT_ERR_IO (files: a directory, unreadable);
// the executor is then unchanged. Never waits for a running
// step: the KV data goes into the cache at once when nobody else steps (a
// refusal by llama.cpp then fails the call), else at the stepper's next
// boundary (a refusal then means its tokens are decoded again instead).
WEFT_C_API weft_status weft_executor_load(weft_executor *executor, const uint8_t *data, size_t size,
                                          weft_conversation **out);
WEFT_C_API weft_status weft_executor_load_file(weft_executor *executor, const char *path, weft_conversation **out);

// Every conversation of the executor, resident and parked, with its id.
// Waits for a running step, as weft_conversation_save does.
WEFT_C_API weft_status weft_executor_save_all(weft_executor *executor, weft_bytes **out);
WEFT_C_API weft_status weft_executor_save_all_file(weft_executor *executor, const char *path);
// Restores a snapshot (all or nothing) into a list of (saved id, new
// conversation). The list holds the conversations: take the ones to keep
// with weft_conversation_list_get before freeing it, which disposes the rest.
// Never waits for a running step (as weft_executor_load).
WEFT_C_API weft_status weft_executor_load_all(weft_executor *executor, const uint8_t *data, size_t size,
                                              weft_conversation_list **out);
WEFT_C_API weft_status weft_executor_load_all_file(weft_executor *executor, const char *path,
                                                   weft_conversation_list **out);
WEFT_C_API weft_status weft_conversation_list_count(const weft_conversation_list *list, size_t *out);
// The entry's id at save time, and a new handle to its conversation (free it).
WEFT_C_API weft_status weft_conversation_list_get(const weft_conversation_list *list, size_t index,
                                                  uint64_t *out_saved_id, weft_conversation **out);
WEFT_C_API weft_status weft_conversation_list_free(weft_conversation_list *list);

// Where a conversation's KV data is now (a park asked for while someone
// else steps shows from the stepper's next boundary on).
typedef enum weft_residency {
  WEFT_RESIDENCY_RESIDENT = 0,   // holds a slot and its cells (or has nothing decoded)
  WEFT_RESIDENCY_RAM = 1,        // parked: KV data in RAM
  WEFT_RESIDENCY_DISK = 2,       // parked: KV data in a spill file
  WEFT_RESIDENCY_RECOMPUTE = 3,  // parked: tokens only, decoded again when it next runs
} weft_residency;

WEFT_C_API const char *weft_residency_name(int32_t residency);
// *out = a weft_residency.
WEFT_C_API weft_status weft_conversation_residency(const weft_conversation *conversation, int32_t *out);
// Hints for a game that knows who speaks next. Neither waits for a running
// step. park moves it out of the cache: when nobody else steps at once, and
// *out_parked = 1 when it then holds no cells (parked now or before, or
// nothing decoded), 0 when no tier could take it; else at the stepper's
// next boundary, and *out_parked says whether a parking tier is configured
// (whether one took it shows in weft_conversation_residency after that
// boundary). prefetch asks the next step to make it resident before it has
// input.
WEFT_C_API weft_status weft_conversation_park(weft_conversation *conversation, weft_bool *out_parked);
WEFT_C_API weft_status weft_conversation_prefetch(weft_conversation *conversation);

WEFT_END_DECL

#endif  // WEFT_C_STATE_H
