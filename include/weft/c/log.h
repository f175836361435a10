// weft/c/log.h — logging: weft is silent until a callback is installed.
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_LOG_H
#define WEFT_C_LOG_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

typedef enum weft_log_level {
  WEFT_LOG_DEBUG = 0,
  WEFT_LOG_INFO = 1,
  WEFT_LOG_WARN = 2,
  WEFT_LOG_ERROR = 3,
  WEFT_LOG_NONE = 4,
} weft_log_level;

// One line (NUL-terminated, also `len` bytes, no newline) from weft or
// llama.cpp/ggml. Called from whichever thread logs, possibly concurrently;
// must not call weft.
typedef void (*weft_log_callback)(int32_t level, const char *line, size_t len, void *user_data);

// Installs `callback` for lines at `min_level` (a weft_log_level) or above,
// replacing the previous one. NULL or WEFT_LOG_NONE silences weft. May be
// called from any thread at any time: it returns once no other thread is
// still inside the previous callback and that callback's user_data_free
// has run (on this thread), so from then on nothing calls the previous
// callback or its free function again — what a host that unloads the code
// behind them (a Unity domain reload) needs. Called from inside the
// previous callback it cannot wait for itself: that callback's
// user_data_free then runs on this thread when the callback returns.
WEFT_C_API weft_status weft_set_log_callback(weft_log_callback callback, int32_t min_level, void *user_data,
                                             weft_free_fn user_data_free);

WEFT_END_DECL

#endif  // WEFT_C_LOG_H
