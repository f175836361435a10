// weft/c/events.h — what steps did, for a main thread that polls instead
// of being called back (weft_executor_params.events).
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_EVENTS_H
#define WEFT_C_EVENTS_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

typedef enum weft_event_kind {
  WEFT_EVENT_TOKEN = 0,     // a generation produced a token (text: what it released)
  WEFT_EVENT_FINISHED = 1,  // a generation ended (reason; error_* for WEFT_FINISH_ERROR)
  WEFT_EVENT_ERROR = 2,     // a step set a conversation's error (error_*)
  WEFT_EVENT_TOOL_CALL = 3, // a generation's tool call is complete, just before its WEFT_EVENT_FINISHED:
                            // tool_name, and text = the arguments (a JSON object)
} weft_event_kind;
// Later versions may add kinds: skip a kind you do not know.

typedef struct weft_event {
  size_t struct_size;
  uint64_t conversation;      // the conversation's weft_conversation_id
  const char *text;           // token: released text; tool call: the arguments; NUL-terminated; "" otherwise.
                              // Owned by the list
  size_t text_len;
  const char *error_message;  // NUL-terminated; "" when error_code is WEFT_OK. Owned by the list
  int32_t kind;               // a weft_event_kind
  weft_token token;           // token: the token; -1 otherwise
  int32_t reason;             // finished: a weft_finish_reason; WEFT_FINISH_RUNNING otherwise
  int32_t error_code;         // a weft_status; WEFT_OK when no error
  // Appended (an older struct_size does not receive it):
  const char *tool_name;      // tool call: the tool's name, NUL-terminated; "" otherwise. Owned by the list
} weft_event;

// Takes up to `max` events (0 = all), oldest first, into a new list. Never
// waits for a step or its sampling (the queue has a lock of its own); empty
// when events are off.
WEFT_C_API weft_status weft_executor_poll_events(weft_executor *executor, size_t max, weft_event_list **out);
WEFT_C_API weft_status weft_event_list_count(const weft_event_list *list, size_t *out);
// Fills `out` (set out->struct_size first); its strings live as long as the list.
WEFT_C_API weft_status weft_event_list_get(const weft_event_list *list, size_t index, weft_event *out);
WEFT_C_API weft_status weft_event_list_free(weft_event_list *list);

WEFT_END_DECL

#endif  // WEFT_C_EVENTS_H
