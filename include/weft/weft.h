// weft/weft.h — weft's stable C ABI (C99): many LLM conversations on one
// llama.cpp context, for C and for bindings (C#/Unity: bindings/csharp).
//
// This header includes the whole ABI, one header per concept under weft/c/
// (each self-contained C99, includable alone): common.h (export macro,
// basic and handle types, version), errors.h (status codes, last error),
// log.h, model.h, adapter.h (LoRA adapters and control vectors per
// conversation), executor.h (create, step, stats, worker), events.h,
// conversation.h, generation.h, state.h (save/load, save_async, parking),
// projector.h (images), embedding.h (text embeddings), fit.h (n_gpu_layers
// and n_ctx for a memory budget).
//
// It wraps the C++ API (weft/weft.hpp); the contracts of each operation are
// the C++ ones (docs/EXECUTOR.md). The rules below are the C side's, for
// every header under weft/c/; more in docs/C_API.md.
//
// Status: every function except the few that return a `const char *` returns
// a weft_status: WEFT_OK (0) or a negative error code, and writes its results
// through out pointers. On failure, weft_last_error() says why (naming the
// value and the limit), handle out pointers are set to NULL and other out
// values are unspecified unless documented. No C++ exception crosses this
// header.
//
// Ownership: handles (weft_model, weft_adapter, weft_executor,
// weft_conversation, weft_generation, weft_embedding, and the lists and byte
// buffers calls return) are opaque.
// A `weft_x **out` handle belongs to the caller and is released with
// weft_x_free(), once. Freeing NULL is a no-op;
// freeing or using a handle that was already freed is detected and refused
// with WEFT_ERR_INVALID_HANDLE (handle values are never reused), never a crash.
// Handles share what they point to: freeing an executor while its
// conversations are alive is safe (their operations then fail with
// WEFT_ERR_DISPOSED), a conversation is disposed when its handle is freed,
// and a generation stays readable after its conversation is gone.
//
// Structs: parameter and result structs start with `size_t struct_size`,
// which the caller sets to sizeof(the struct) of the header it compiled
// against; fields are only ever appended, so an older caller keeps working
// with a newer library. A size the library does not know is refused with
// WEFT_ERR_STRUCT_SIZE. weft_*_init() fills a parameter struct with the
// library's defaults (and sets struct_size).
//
// Strings: text going in is UTF-8, passed as pointer + byte length (no NUL
// needed) unless marked "NUL-terminated"; invalid UTF-8 is refused with
// WEFT_ERR_INVALID_ARGUMENT naming the byte offset. Text and arrays coming
// out are copied into caller buffers: `*out_len` (or `*out_n`) is always set
// to the full size, and a buffer smaller than that (plus 1 for the NUL that
// ends text) fails with WEFT_ERR_BUFFER_TOO_SMALL, so calling with capacity
// 0 asks for the size. File paths are NUL-terminated bytes as the OS takes
// them; on Windows they are UTF-8 (opened as UTF-16 paths, so non-ASCII
// names work), and one that is not UTF-8 fails with WEFT_ERR_INVALID_ARGUMENT.
//
// Callbacks take `void *user_data` last. Where a callback outlives the call
// that registers it, a `weft_free_fn` may come with it: if that call
// succeeds, weft calls it exactly once with user_data when it will never
// call the callback again (from whichever thread drops the callback last);
// if the call fails, weft never calls it and user_data stays the caller's.
// Callbacks must not unwind (no C++ exceptions, no longjmp) through weft.
//
// Thread-safety: every function may be called from any thread, as in C++.
// One handle may even be freed on one thread while another thread uses it:
// the use either completes or fails with WEFT_ERR_INVALID_HANDLE.
// weft_last_error() is per thread.
//
// Waiting: no function waits for a running step (its decode or its
// sampling) except weft_conversation_save and weft_executor_save_all (and
// their _file forms), which read the KV cache at a step boundary;
// weft_executor_step (steps are serialised); weft_executor_stop (joins the
// worker after its step); weft_executor_free (the context goes); and
// weft_generation_wait and weft_embedding_wait, which wait by design. A
// game thread can call everything else each frame: prompting, generating,
// reading, forking, rewinding, disposing, parking, loading, polling events,
// embedding, weft_conversation_save_async. Operations that change the KV
// cache change the conversation at once; the cache work is done at once
// when nobody else steps (no step in progress and no worker running, or
// when called from a callback on the stepping thread), else by the stepper
// at its next step boundary (the end of the running step, or the next step
// of the worker, which is woken for it): a game thread never does KV work
// while a worker runs. So KV facts — n_cells, cells_free, the stats' cell and residency
// counts, residency — show such a change from that boundary on.
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

#include "weft/c/common.h"        // WEFT_C_API, weft_token, weft_bool, weft_free_fn, handle types, version
#include "weft/c/errors.h"        // weft_status, weft_status_name, weft_last_error
#include "weft/c/log.h"           // weft_set_log_callback
#include "weft/c/model.h"         // weft_model_*: load, info, tokenizer, metadata
#include "weft/c/executor.h"      // weft_executor_*: create, step, stats, worker
#include "weft/c/events.h"        // weft_executor_poll_events, weft_event_list_*
#include "weft/c/conversation.h"  // weft_conversation_*: prompt, fork, rewind, logits, sampler
#include "weft/c/generation.h"    // weft_conversation_generate, weft_generation_*
#include "weft/c/state.h"         // save/load (save_async too), snapshots, residency, parking
#include "weft/c/adapter.h"       // weft_model_load_adapter, weft_adapter_*, weft_conversation_set_adapters
#include "weft/c/projector.h"     // weft_projector_*, weft_conversation_prompt_image, images
#include "weft/c/embedding.h"     // weft_executor_embed, weft_embedding_*, weft_cosine_similarity
#include "weft/c/memory.h"        // weft_memory_*: add, search, save/load; weft_conversation_set_memory, _compact
#include "weft/c/fit.h"           // weft_fit_choose: n_gpu_layers and n_ctx for a memory budget
#include "weft/c/speculative.h"   // weft_speculative_params, weft_draft_model_params: drafts verified in the batch

#endif  // WEFT_WEFT_H
