// weft/c/errors.h — status codes and the last error's message.
//
// Part of weft.h: every function except the few that return a
// `const char *` returns a weft_status, and on failure weft_last_error()
// says why.
#ifndef WEFT_C_ERRORS_H
#define WEFT_C_ERRORS_H

#include "weft/c/common.h"

WEFT_BEGIN_DECL

// The first codes are weft::Errc, negated (stable numbers).
typedef enum weft_status {
  WEFT_OK = 0,
  WEFT_ERR_INVALID_ARGUMENT = -1,  // a value outside its documented domain (also invalid UTF-8)
  WEFT_ERR_OUT_OF_RANGE = -2,      // a count or index past a limit (context, vocabulary, slots)
  WEFT_ERR_NOT_FOUND = -3,         // a file that does not exist
  WEFT_ERR_IO = -4,                // reading or writing a file failed
  WEFT_ERR_CORRUPT = -5,           // bytes that do not parse (model file)
  WEFT_ERR_INCOMPATIBLE = -6,      // well-formed input for another model or version
  WEFT_ERR_BACKEND = -7,           // llama.cpp refused an operation (e.g. no memory for a context)
  WEFT_ERR_DISPOSED = -8,          // the conversation was disposed or its executor freed
  WEFT_ERR_CANCELLED = -9,         // the caller cancelled (model load progress returned 0)
  WEFT_ERR_NULL_ARG = -20,         // a required pointer argument is NULL
  WEFT_ERR_STRUCT_SIZE = -21,      // struct_size is not a size this library knows
  WEFT_ERR_BUFFER_TOO_SMALL = -22, // the output does not fit; *out_len / *out_n says what does
  WEFT_ERR_INVALID_HANDLE = -23,   // not a live handle of this type: freed, never made, or another type
  WEFT_ERR_OUT_OF_MEMORY = -24,    // an allocation failed
  WEFT_ERR_INTERNAL = -99,         // an unexpected failure inside weft (a bug: please report)
} weft_status;

// Stable lower-case name of a status ("ok", "invalid_argument", ...);
// "unknown" for other values. Never NULL; static storage.
WEFT_C_API const char *weft_status_name(weft_status status);

// The message of the last failed weft call on this thread ("" after a call
// that succeeded). Valid until the next weft call on this thread.
WEFT_C_API const char *weft_last_error(void);

WEFT_END_DECL

#endif  // WEFT_C_ERRORS_H
