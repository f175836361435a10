// weft/c/common.h — what every part of weft's C ABI shares: the export
// macro, the basic types, the opaque handle types and the version.
//
// Part of weft.h (include that one; the rules it states apply here). Each
// header under weft/c/ is self-contained C99 and may be included alone.
#ifndef WEFT_C_COMMON_H
#define WEFT_C_COMMON_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(WEFT_C_BUILDING)
#define WEFT_C_API __declspec(dllexport)
#elif defined(WEFT_C_STATIC)
#define WEFT_C_API
#else
#define WEFT_C_API __declspec(dllimport)
#endif
#else
#define WEFT_C_API __attribute__((visibility("default")))
#endif

// Wrap each header's declarations: C linkage when included from C++.
#ifdef __cplusplus
#define WEFT_BEGIN_DECL extern "C" {
#define WEFT_END_DECL }
#else
#define WEFT_BEGIN_DECL
#define WEFT_END_DECL
#endif

WEFT_BEGIN_DECL

typedef int32_t weft_token;  // a token id in [0, n_vocab)
typedef int32_t weft_bool;   // 0 = false, anything else = true

// Frees the user_data of a callback that outlives the call registering it
// (weft.h, "Callbacks").
typedef void (*weft_free_fn)(void *user_data);

// The opaque handles (weft.h, "Ownership"), each released with its _free.
typedef struct weft_model weft_model;                          // weft/c/model.h
typedef struct weft_adapter weft_adapter;                      // weft/c/adapter.h
typedef struct weft_projector weft_projector;                  // weft/c/projector.h
typedef struct weft_prepared_image weft_prepared_image;        // weft/c/projector.h
typedef struct weft_executor weft_executor;                    // weft/c/executor.h
typedef struct weft_conversation weft_conversation;            // weft/c/conversation.h
typedef struct weft_generation weft_generation;                // weft/c/generation.h
typedef struct weft_event_list weft_event_list;                // weft/c/events.h
typedef struct weft_bytes weft_bytes;                          // weft/c/state.h
typedef struct weft_conversation_list weft_conversation_list;  // weft/c/state.h
typedef struct weft_embedding weft_embedding;                  // weft/c/embedding.h
typedef struct weft_memory weft_memory;                        // weft/c/memory.h
typedef struct weft_memory_hits weft_memory_hits;              // weft/c/memory.h
typedef struct weft_memory_search_handle weft_memory_search_handle;  // weft/c/memory.h

// The library's version ("0.1.0") and the llama.cpp it was built against.
// Static storage.
WEFT_C_API const char *weft_version(void);
WEFT_C_API const char *weft_llama_version(void);

WEFT_END_DECL

#endif  // WEFT_C_COMMON_H
