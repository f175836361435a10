// weft/weft.h — weft's stable C ABI (C99): many LLM conversations on one
// llama.cpp context, for C and for bindings (C#/Unity: bindings/csharp).
//
// It wraps the C++ API (weft/weft.hpp); the contracts of each operation are
// the C++ ones (docs/EXECUTOR.md). The rules below are the C side's; more in
// docs/C_API.md.
//
// Status: every function except the few that return a `const char *` returns
// a weft_status: WEFT_OK (0) or a negative error code, and writes its results
// through out pointers. On failure, weft_last_error() says why (naming the
// value and the limit), handle out pointers are set to NULL and other out
// values are unspecified unless documented. No C++ exception crosses this
// header.
//
// Ownership: handles (weft_model, weft_executor, weft_conversation,
// weft_generation, and the lists and byte buffers calls return) are opaque.
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
// 0 asks for the size.
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
// the use either completes or fails with WEFT_ERR_INVALID_HANDLE. Steps are
// serialised; prompting and reading never wait for a running decode.
// weft_last_error() is per thread.
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

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

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------
// Status codes. The first ones are weft::Errc, negated (stable numbers).

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

typedef int32_t weft_token;  // a token id in [0, n_vocab)
typedef int32_t weft_bool;   // 0 = false, anything else = true

// Stable lower-case name of a status ("ok", "invalid_argument", ...);
// "unknown" for other values. Never NULL; static storage.
WEFT_C_API const char *weft_status_name(weft_status status);

// The message of the last failed weft call on this thread ("" after a call
// that succeeded). Valid until the next weft call on this thread.
WEFT_C_API const char *weft_last_error(void);

// The library's version ("0.1.0") and the llama.cpp it was built against.
// Static storage.
WEFT_C_API const char *weft_version(void);
WEFT_C_API const char *weft_llama_version(void);

typedef void (*weft_free_fn)(void *user_data);

// ---------------------------------------------------------------------------
// Logging: weft is silent until a callback is installed.

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
// replacing the previous one (whose user_data_free then runs once no thread
// is still in it). NULL or WEFT_LOG_NONE silences weft.
WEFT_C_API weft_status weft_set_log_callback(weft_log_callback callback, int32_t min_level, void *user_data,
                                             weft_free_fn user_data_free);

// ---------------------------------------------------------------------------
// Model: a loaded GGUF file, immutable and shared by executors and threads.

typedef struct weft_model weft_model;

// Called on the loading thread with progress in [0, 1]; return 0 to cancel.
typedef int32_t (*weft_progress_callback)(float progress, void *user_data);

typedef struct weft_model_params {
  size_t struct_size;
  const char *path;                    // NUL-terminated UTF-8 path of a GGUF file. Required.
  weft_progress_callback on_progress;  // default NULL; called during weft_model_load only
  void *progress_user_data;
  int32_t n_gpu_layers;                // layers to offload to a GPU backend; -1 = all. Default 0
  weft_bool use_mmap;                  // map the file instead of reading it. Default 1
  weft_bool vocab_only;                // tokenizer only, no weights. Default 0
} weft_model_params;

WEFT_C_API weft_status weft_model_params_init(weft_model_params *params, size_t struct_size);

// Loads a model. WEFT_ERR_NOT_FOUND (no such file), WEFT_ERR_INVALID_ARGUMENT
// (a directory), WEFT_ERR_CORRUPT (not a GGUF llama.cpp can read),
// WEFT_ERR_CANCELLED (on_progress returned 0).
WEFT_C_API weft_status weft_model_load(const weft_model_params *params, weft_model **out);
WEFT_C_API weft_status weft_model_free(weft_model *model);

typedef struct weft_model_info {
  size_t struct_size;
  uint64_t n_params;
  uint64_t size_bytes;
  uint64_t fingerprint;  // equal files give equal fingerprints
  int32_t n_vocab;
  int32_t n_ctx_train;
  int32_t n_embd;
  int32_t n_layer;
  weft_token bos;  // -1 when the vocabulary has none
  weft_token eos;  // -1 when the vocabulary has none
} weft_model_info;

// Fills `out` (set out->struct_size first).
WEFT_C_API weft_status weft_model_get_info(const weft_model *model, weft_model_info *out);
WEFT_C_API weft_status weft_model_n_vocab(const weft_model *model, int32_t *out);

// Flags for weft_model_tokenize and weft_conversation_prompt_text.
#define WEFT_TEXT_ADD_BOS 0x1u        // prepend BOS (set it on a conversation's first prompt)
#define WEFT_TEXT_PARSE_SPECIAL 0x2u  // parse "<s>"-style text into control tokens
// Flags for weft_model_detokenize and weft_model_token_piece.
#define WEFT_DETOK_REMOVE_SPECIAL 0x1u  // drop BOS/EOS (detokenize only)
#define WEFT_DETOK_RENDER_SPECIAL 0x2u  // render control tokens as their text

// Text -> tokens into `tokens[capacity]`; *out_n = the token count.
WEFT_C_API weft_status weft_model_tokenize(const weft_model *model, const char *text, size_t len, uint32_t flags,
                                           weft_token *tokens, size_t capacity, size_t *out_n);
// Tokens -> UTF-8 text into `buf[capacity]` (NUL-terminated); *out_len
// excludes the NUL. WEFT_ERR_OUT_OF_RANGE for an id outside the vocabulary.
WEFT_C_API weft_status weft_model_detokenize(const weft_model *model, const weft_token *tokens, size_t n_tokens,
                                             uint32_t flags, char *buf, size_t capacity, size_t *out_len);
// The bytes of one token (NUL-terminated), which may be a partial UTF-8
// sequence: join pieces before decoding them.
WEFT_C_API weft_status weft_model_token_piece(const weft_model *model, weft_token token, uint32_t flags, char *buf,
                                              size_t capacity, size_t *out_len);
// *out = 1 for end-of-generation tokens (EOS, EOT, ...).
WEFT_C_API weft_status weft_model_is_eog(const weft_model *model, weft_token token, weft_bool *out);
// llama.cpp's one-line description ("llama ?B all F32").
WEFT_C_API weft_status weft_model_description(const weft_model *model, char *buf, size_t capacity, size_t *out_len);
// A metadata value by NUL-terminated key ("general.name"); "" when absent.
WEFT_C_API weft_status weft_model_meta(const weft_model *model, const char *key, char *buf, size_t capacity,
                                       size_t *out_len);

// ---------------------------------------------------------------------------
// Executor: one llama.cpp context shared by many conversations.

typedef struct weft_executor weft_executor;
typedef struct weft_conversation weft_conversation;
typedef struct weft_generation weft_generation;

typedef enum weft_kv_type { WEFT_KV_F16 = 0, WEFT_KV_F32 = 1, WEFT_KV_Q8_0 = 2 } weft_kv_type;
typedef enum weft_flash_attn {
  WEFT_FLASH_ATTN_AUTO = 0,
  WEFT_FLASH_ATTN_ENABLED = 1,
  WEFT_FLASH_ATTN_DISABLED = 2,
} weft_flash_attn;
// What happens when queued input cannot get KV cells now.
typedef enum weft_pressure_policy {
  WEFT_PRESSURE_WAIT = 0,      // it stays queued until cells free up
  WEFT_PRESSURE_FAIL = 1,      // prompting refuses what cannot fit now
  WEFT_PRESSURE_CALLBACK = 2,  // on_pressure runs, then the step plans once more
} weft_pressure_policy;

// Called on the stepping thread when `conversation` needs `needed_cells` KV
// cells and `free_cells` are free. `conversation` is borrowed: valid during
// the call only, not to be freed; it may be rewound, shifted, disposed or
// forked here (applied at once).
typedef void (*weft_pressure_callback)(weft_conversation *conversation, uint32_t needed_cells, uint32_t free_cells,
                                       void *user_data);

typedef struct weft_executor_params {
  size_t struct_size;
  weft_pressure_callback on_pressure;  // required with WEFT_PRESSURE_CALLBACK
  void *pressure_user_data;
  weft_free_fn pressure_user_data_free;  // see "Callbacks" above
  // Parking (spill) tiers, used before the pressure policy: conversations
  // beyond the slots or cells are parked and restored when they next run.
  const char *spill_disk_dir;  // NUL-terminated directory for the disk tier; NULL or "" = none. Default NULL
  uint64_t spill_ram_bytes;    // RAM for parked KV data; 0 = no RAM tier. Default 1 GiB
  uint64_t spill_disk_bytes;   // disk budget. Default 8 GiB
  size_t events_capacity;     // most unread events kept; older ones are dropped. Default 65536; >= 1
  uint32_t n_ctx;             // KV cells shared by all conversations. Default 4096
  uint32_t n_batch;           // most tokens per decode and per step. Default 512; >= n_seq_max
  uint32_t n_ubatch;          // micro-batch; 0 = n_batch. Default 0
  uint32_t n_seq_max;         // conversations resident at once, [1, 256]. Default 16
  int32_t n_threads;          // decode threads; 0 = all hardware threads. Default 0
  int32_t kv_type;            // a weft_kv_type. Default WEFT_KV_F16
  // A weft_flash_attn. Default WEFT_FLASH_ATTN_AUTO: off on the CPU (llama.cpp's
  // CPU kernel slows with depth); llama.cpp decides with GPU layers or a q8_0 KV.
  int32_t flash_attn;
  int32_t pressure;           // a weft_pressure_policy. Default WEFT_PRESSURE_WAIT
  uint32_t max_prompt_chunk;  // most prompt tokens per conversation per step; 0 = no cap. Default 0
  weft_bool events;           // post tokens, finished generations and errors for
                              // weft_executor_poll_events (a main thread that must
                              // not be called back). Default 0
  weft_bool spill_recompute;  // last resort when the tiers are full: keep tokens only,
                              // re-decode on return; 0 = such a one stays resident. Default 1
} weft_executor_params;

WEFT_C_API weft_status weft_executor_params_init(weft_executor_params *params, size_t struct_size);

// Creates the context; `params` NULL = defaults. WEFT_ERR_INVALID_ARGUMENT
// for parameters outside their ranges, WEFT_ERR_BACKEND when llama.cpp
// cannot create the context.
WEFT_C_API weft_status weft_executor_create(const weft_model *model, const weft_executor_params *params,
                                            weft_executor **out);
// Stops the worker, ends running generations (reason cancelled) and frees
// the context once no other thread is inside a call on this executor; may
// wait for a running step. Its conversations' operations then fail with
// WEFT_ERR_DISPOSED.
WEFT_C_API weft_status weft_executor_free(weft_executor *executor);

typedef struct weft_step_budget {
  size_t struct_size;
  // Soft wall-clock target: decode what the cost model (learned from the
  // batches decoded so far) predicts fits, at least one conversation's
  // worth. 0 = none. Default 0.
  int64_t max_time_us;
  // Hard limit, relative to the call: stop between micro-batches (and abort
  // one in flight) once this much time has passed; decoded work is kept, the
  // rest stays queued. 0 = none. Default 0. Not for the worker.
  int64_t deadline_us;
  uint32_t max_tokens;  // most tokens to decode; 0 = n_batch (as in C++ and C#). Default 0; at most n_batch
} weft_step_budget;

WEFT_C_API weft_status weft_step_budget_init(weft_step_budget *budget, size_t struct_size);

typedef struct weft_step_result {
  size_t struct_size;
  double seconds;           // wall time of the step
  double decode_seconds;    // of which in llama_decode
  uint32_t tokens_decoded;  // tokens that entered the KV cache
  uint32_t conversations;   // conversations that advanced
  uint32_t tokens_sampled;  // tokens sampled for generations
  uint32_t decode_calls;    // llama_decode calls
  uint32_t failed;          // conversations whose decode failed (see weft_conversation_error)
  uint32_t blocked;         // conversations waiting for KV cells or a slot
  weft_bool idle;           // there was nothing to do
  weft_bool deadline_hit;   // the hard deadline stopped the step early
} weft_step_result;

// One scheduling round: sample for generations, decode one batch within the
// budget, hand out logits, run on_token callbacks on this thread. `budget`
// NULL = defaults; `out` may be NULL (else set out->struct_size). Steps from
// several threads run one after the other. Decode failures do not fail the
// call: they reach the conversations concerned.
WEFT_C_API weft_status weft_executor_step(weft_executor *executor, const weft_step_budget *budget,
                                          weft_step_result *out);

typedef struct weft_executor_stats {
  size_t struct_size;
  uint64_t queued_tokens;
  uint64_t steps;
  uint64_t tokens_decoded;
  uint64_t tokens_sampled;
  uint64_t decode_failures;
  uint64_t deadline_stops;      // steps cut short by a hard deadline
  uint64_t events_dropped;      // events beyond events_capacity
  uint64_t cost_model_samples;  // batches the time-budget cost model learned from
  uint64_t ram_bytes;           // parked KV data in RAM (shared by forks once)
  uint64_t disk_bytes;          // parked KV data on disk
  uint64_t parks;               // conversations parked so far
  uint64_t restores;            // restored from RAM or disk
  uint64_t recomputes;          // re-decoded from tokens instead
  double step_ms_p50;           // over the last 1024 steps that did work
  double step_ms_p99;
  double decode_ms_p50;
  double predicted_ms_per_token;  // the cost model's estimate at depth 0
  double park_ms;               // total time spent parking
  double restore_ms;            // total time spent restoring
  uint32_t n_ctx;       // the real context size (llama.cpp rounds up)
  uint32_t cells_used;  // distinct KV cells in use (shared prefixes once)
  uint32_t cells_free;
  uint32_t n_seq_max;
  uint32_t slots_used;
  uint32_t conversations;
  uint32_t generating;
  uint32_t resident;          // holding a slot (or nothing decoded)
  uint32_t parked_ram;
  uint32_t parked_disk;
  uint32_t parked_recompute;  // tokens only
  weft_bool worker_running;
} weft_executor_stats;

// Never waits for a running decode. Set out->struct_size first.
WEFT_C_API weft_status weft_executor_get_stats(const weft_executor *executor, weft_executor_stats *out);
// Free KV cells now (cells shared by forks count once).
WEFT_C_API weft_status weft_executor_cells_free(const weft_executor *executor, uint32_t *out);

// The background worker: steps on an executor-owned thread until stopped,
// sleeping while idle and waking on new work. on_token callbacks then run on
// that thread; a main thread that must not be called back polls events.
typedef struct weft_worker_params {
  size_t struct_size;
  const weft_step_budget *budget;  // each step's budget (deadline_us must be 0); NULL = n_batch tokens
  uint32_t idle_wait_ms;           // longest idle sleep before looking again; > 0. Default 100
} weft_worker_params;

WEFT_C_API weft_status weft_worker_params_init(weft_worker_params *params, size_t struct_size);
// Starts the worker (`params` NULL = defaults). WEFT_ERR_INVALID_ARGUMENT
// when it runs already. weft_executor_step may still be called (turns).
WEFT_C_API weft_status weft_executor_start(weft_executor *executor, const weft_worker_params *params);
// Stops the worker after its current step and joins it. Nothing is lost:
// input stays queued, generations stay running. Idempotent.
WEFT_C_API weft_status weft_executor_stop(weft_executor *executor);
WEFT_C_API weft_status weft_executor_is_running(const weft_executor *executor, weft_bool *out);

// Events (weft_executor_params.events): what steps did, for polling.
typedef enum weft_event_kind {
  WEFT_EVENT_TOKEN = 0,     // a generation produced a token (text: what it released)
  WEFT_EVENT_FINISHED = 1,  // a generation ended (reason; error_* for WEFT_FINISH_ERROR)
  WEFT_EVENT_ERROR = 2,     // a step set a conversation's error (error_*)
} weft_event_kind;

typedef struct weft_event_list weft_event_list;

typedef struct weft_event {
  size_t struct_size;
  uint64_t conversation;      // the conversation's weft_conversation_id
  const char *text;           // token: released text, NUL-terminated; "" otherwise. Owned by the list
  size_t text_len;
  const char *error_message;  // NUL-terminated; "" when error_code is WEFT_OK. Owned by the list
  int32_t kind;               // a weft_event_kind
  weft_token token;           // token: the token; -1 otherwise
  int32_t reason;             // finished: a weft_finish_reason; WEFT_FINISH_RUNNING otherwise
  int32_t error_code;         // a weft_status; WEFT_OK when no error
} weft_event;

// Takes up to `max` events (0 = all), oldest first, into a new list. Never
// waits for a decode; empty when events are off.
WEFT_C_API weft_status weft_executor_poll_events(weft_executor *executor, size_t max, weft_event_list **out);
WEFT_C_API weft_status weft_event_list_count(const weft_event_list *list, size_t *out);
// Fills `out` (set out->struct_size first); its strings live as long as the list.
WEFT_C_API weft_status weft_event_list_get(const weft_event_list *list, size_t index, weft_event *out);
WEFT_C_API weft_status weft_event_list_free(weft_event_list *list);

// ---------------------------------------------------------------------------
// Conversation: token history in the shared KV cache, queued input, logits,
// a sampler and at most one running generation.

// A new, empty conversation (nothing queued or decoded, no slot yet).
WEFT_C_API weft_status weft_conversation_create(weft_executor *executor, weft_conversation **out);
// Frees the handle, which disposes the conversation (slot and KV cells are
// released; may wait for a running step).
WEFT_C_API weft_status weft_conversation_free(weft_conversation *conversation);
// Disposes without freeing the handle: later operations fail with
// WEFT_ERR_DISPOSED. Idempotent.
WEFT_C_API weft_status weft_conversation_dispose(weft_conversation *conversation);
WEFT_C_API weft_status weft_conversation_is_disposed(const weft_conversation *conversation, weft_bool *out);
// The executor-unique id (never reused).
WEFT_C_API weft_status weft_conversation_id(const weft_conversation *conversation, uint64_t *out);

// Queues input; never decodes or waits for a decode. Any length: long input
// is decoded over several steps. `flags`: WEFT_TEXT_*. WEFT_ERR_OUT_OF_RANGE
// when the conversation would exceed n_ctx (or, under WEFT_PRESSURE_FAIL,
// the free cells) or for a token id outside the vocabulary;
// WEFT_ERR_INVALID_ARGUMENT for empty input or while a generation runs.
WEFT_C_API weft_status weft_conversation_prompt_text(weft_conversation *conversation, const char *text, size_t len,
                                                     uint32_t flags);
WEFT_C_API weft_status weft_conversation_prompt_tokens(weft_conversation *conversation, const weft_token *tokens,
                                                       size_t n_tokens);

// A new conversation with the same history, queued input, logits and
// sampler state, sharing the decoded prefix in the cache.
// WEFT_ERR_OUT_OF_RANGE when no sequence slot is free.
WEFT_C_API weft_status weft_conversation_fork(weft_conversation *conversation, weft_conversation **out);
// Drops the last n tokens (queued first, then decoded); cancels a running
// generation. WEFT_ERR_OUT_OF_RANGE when n > n_tokens.
WEFT_C_API weft_status weft_conversation_rewind(weft_conversation *conversation, uint32_t n);
// Removes history positions [p0, p1) and moves later tokens down.
// WEFT_ERR_OUT_OF_RANGE unless p0 <= p1 <= n_decoded.
WEFT_C_API weft_status weft_conversation_remove(weft_conversation *conversation, uint32_t p0, uint32_t p1);
// Context shift: keep the first `keep` tokens, drop the next `discard`.
WEFT_C_API weft_status weft_conversation_shift_left(weft_conversation *conversation, uint32_t keep,
                                                    uint32_t discard);

WEFT_C_API weft_status weft_conversation_n_tokens(const weft_conversation *conversation, uint32_t *out);
WEFT_C_API weft_status weft_conversation_n_decoded(const weft_conversation *conversation, uint32_t *out);
WEFT_C_API weft_status weft_conversation_n_queued(const weft_conversation *conversation, uint32_t *out);
// KV cells it references (shared ones included).
WEFT_C_API weft_status weft_conversation_n_cells(const weft_conversation *conversation, uint32_t *out);
// History (decoded) followed by queued input.
WEFT_C_API weft_status weft_conversation_tokens(const weft_conversation *conversation, weft_token *tokens,
                                                size_t capacity, size_t *out_n);

// *out = 1 when logits for the last token are ready (input fully decoded).
WEFT_C_API weft_status weft_conversation_has_logits(const weft_conversation *conversation, weft_bool *out);
// Copies the n_vocab logits. WEFT_ERR_INVALID_ARGUMENT when not ready. They
// stay until the next decode of this conversation replaces them.
WEFT_C_API weft_status weft_conversation_logits(const weft_conversation *conversation, float *logits,
                                                size_t capacity, size_t *out_n);
// Samples from the current logits with the conversation's sampler and
// advances its state; the token is not queued (prompt it to keep it).
WEFT_C_API weft_status weft_conversation_sample(weft_conversation *conversation, weft_token *out);

typedef struct weft_sampler_params {
  size_t struct_size;
  const char *grammar;       // NUL-terminated GBNF grammar; NULL or "" = none. Default NULL
  const char *grammar_root;  // NUL-terminated start rule; NULL = "root". Default NULL
  float temperature;         // 0 = greedy. Default 0
  float top_p;               // (0, 1]; 1 = off. Default 1
  float min_p;               // [0, 1]; 0 = off. Default 0
  float repeat_penalty;      // > 0; 1 = off. Default 1
  float frequency_penalty;   // 0 = off. Default 0
  float presence_penalty;    // 0 = off. Default 0
  int32_t top_k;             // 0 = off. Default 0
  int32_t penalty_last_n;    // tokens the penalties look at; -1 = whole context. Default 64
  uint32_t seed;             // RNG seed for temperature > 0. Default 0
} weft_sampler_params;

WEFT_C_API weft_status weft_sampler_params_init(weft_sampler_params *params, size_t struct_size);
// The conversation's own sampler (used by sample and by generations without
// their own). Default greedy. WEFT_ERR_INVALID_ARGUMENT for bad values or an
// unparsable grammar.
WEFT_C_API weft_status weft_conversation_set_sampler(weft_conversation *conversation,
                                                     const weft_sampler_params *params);
// Higher goes first when a step cannot serve everyone; a conversation waiting
// behind higher ones rises a level every 8 steps, so none starves.
WEFT_C_API weft_status weft_conversation_set_priority(weft_conversation *conversation, int32_t priority);

// The last error a step hit for this conversation: *out_code = WEFT_OK when
// none, else its code and its message in buf (NUL-terminated). While set,
// its input is held back (not lost) until weft_conversation_clear_error.
WEFT_C_API weft_status weft_conversation_error(const weft_conversation *conversation, weft_status *out_code,
                                               char *buf, size_t capacity, size_t *out_len);
WEFT_C_API weft_status weft_conversation_clear_error(weft_conversation *conversation);

// ---------------------------------------------------------------------------
// State: a conversation (or every conversation of an executor) as bytes or a
// file (docs/STATE_FORMAT.md), loadable into any executor of the same model.

typedef struct weft_bytes weft_bytes;
typedef struct weft_conversation_list weft_conversation_list;

// *data points into `bytes` and lives as long as it.
WEFT_C_API weft_status weft_bytes_data(const weft_bytes *bytes, const uint8_t **data, size_t *size);
WEFT_C_API weft_status weft_bytes_free(weft_bytes *bytes);

// History, queued input, logits, sampler state, a running generation (its
// callback does not travel) and KV data. Waits for a running step. The file
// is written atomically: a failure leaves the previous file intact.
WEFT_C_API weft_status weft_conversation_save(const weft_conversation *conversation, weft_bytes **out);
WEFT_C_API weft_status weft_conversation_save_file(const weft_conversation *conversation, const char *path);
// A saved conversation, back in this executor: resident if a slot and cells
// are free, else parked. WEFT_ERR_CORRUPT (damaged, version field included),
// WEFT_ERR_INCOMPATIBLE (another model, or an intact state of another format
// version), WEFT_ERR_OUT_OF_RANGE (longer than this n_ctx), WEFT_ERR_NOT_FOUND
// / WEFT_ERR_INVALID_ARGUMENT / WEFT_ERR_IO (files: missing, a directory,
// unreadable); the executor is then unchanged.
WEFT_C_API weft_status weft_executor_load(weft_executor *executor, const uint8_t *data, size_t size,
                                          weft_conversation **out);
WEFT_C_API weft_status weft_executor_load_file(weft_executor *executor, const char *path, weft_conversation **out);

// Every conversation of the executor, resident and parked, with its id.
WEFT_C_API weft_status weft_executor_save_all(weft_executor *executor, weft_bytes **out);
WEFT_C_API weft_status weft_executor_save_all_file(weft_executor *executor, const char *path);
// Restores a snapshot (all or nothing) into a list of (saved id, new
// conversation). The list holds the conversations: take the ones to keep
// with weft_conversation_list_get before freeing it, which disposes the rest.
WEFT_C_API weft_status weft_executor_load_all(weft_executor *executor, const uint8_t *data, size_t size,
                                              weft_conversation_list **out);
WEFT_C_API weft_status weft_executor_load_all_file(weft_executor *executor, const char *path,
                                                   weft_conversation_list **out);
WEFT_C_API weft_status weft_conversation_list_count(const weft_conversation_list *list, size_t *out);
// The entry's id at save time, and a new handle to its conversation (free it).
WEFT_C_API weft_status weft_conversation_list_get(const weft_conversation_list *list, size_t index,
                                                  uint64_t *out_saved_id, weft_conversation **out);
WEFT_C_API weft_status weft_conversation_list_free(weft_conversation_list *list);

// Where a conversation's KV data is now.
typedef enum weft_residency {
  WEFT_RESIDENCY_RESIDENT = 0,   // holds a slot and its cells (or has nothing decoded)
  WEFT_RESIDENCY_RAM = 1,        // parked: KV data in RAM
  WEFT_RESIDENCY_DISK = 2,       // parked: KV data in a spill file
  WEFT_RESIDENCY_RECOMPUTE = 3,  // parked: tokens only, decoded again when it next runs
} weft_residency;

WEFT_C_API const char *weft_residency_name(int32_t residency);
// *out = a weft_residency.
WEFT_C_API weft_status weft_conversation_residency(const weft_conversation *conversation, int32_t *out);
// Hints for a game that knows who speaks next. park moves it out of the
// cache now: *out_parked = 1 when it then holds no cells (parked now or
// before, or nothing decoded), 0 when no tier could take it. prefetch asks
// the next step to make it resident before it has input. Both wait for a
// running step.
WEFT_C_API weft_status weft_conversation_park(weft_conversation *conversation, weft_bool *out_parked);
WEFT_C_API weft_status weft_conversation_prefetch(weft_conversation *conversation);

// ---------------------------------------------------------------------------
// Generation: sampling step by step; poll it, wait for it, cancel it.

typedef enum weft_finish_reason {
  WEFT_FINISH_RUNNING = 0,
  WEFT_FINISH_MAX_TOKENS = 1,
  WEFT_FINISH_END_OF_GENERATION = 2,
  WEFT_FINISH_STOP_STRING = 3,
  WEFT_FINISH_CONTEXT_FULL = 4,
  WEFT_FINISH_CANCELLED = 5,  // cancel, or the conversation was disposed or rewound
  WEFT_FINISH_ERROR = 6,      // see weft_generation_error
} weft_finish_reason;

WEFT_C_API const char *weft_finish_reason_name(int32_t reason);

// Called on the stepping thread for each sampled token with the text that
// became final with it (UTF-8-complete, never part of a stop string, maybe
// empty; NUL-terminated, also `len` bytes), never concurrently for one
// generation. It may call weft (prompt, read, rewind, ...). It runs after
// the step has published the token, so another thread can see the
// generation done before the last callback has returned: user_data_free,
// not "done", marks the end of the callbacks.
typedef void (*weft_token_callback)(weft_token token, const char *text, size_t len, void *user_data);

typedef struct weft_generate_params {
  size_t struct_size;
  const weft_sampler_params *sampler;  // this generation's sampler; NULL = the conversation's own
  const char *const *stop;             // n_stop NUL-terminated UTF-8 stop strings (non-empty)
  size_t n_stop;
  weft_token_callback on_token;        // default NULL
  void *user_data;
  weft_free_fn user_data_free;         // see "Callbacks" above
  uint32_t max_tokens;                 // >= 1. Default 128
} weft_generate_params;

WEFT_C_API weft_status weft_generate_params_init(weft_generate_params *params, size_t struct_size);

// Starts generating (`params` NULL = defaults): each step decodes the last
// sampled token and samples the next; queued input is decoded first. Every
// sampled token joins the conversation. WEFT_ERR_INVALID_ARGUMENT when a
// generation runs already, the conversation is empty or has an error set,
// or params are invalid.
WEFT_C_API weft_status weft_conversation_generate(weft_conversation *conversation, const weft_generate_params *params,
                                                  weft_generation **out);
// A new handle to the running generation; *out = NULL when none runs.
WEFT_C_API weft_status weft_conversation_generation(const weft_conversation *conversation, weft_generation **out);

WEFT_C_API weft_status weft_generation_free(weft_generation *generation);
WEFT_C_API weft_status weft_generation_is_done(const weft_generation *generation, weft_bool *out);
// *out = a weft_finish_reason (WEFT_FINISH_RUNNING until done).
WEFT_C_API weft_status weft_generation_reason(const weft_generation *generation, int32_t *out);
WEFT_C_API weft_status weft_generation_n_tokens(const weft_generation *generation, size_t *out);
// The text released so far (complete once done), NUL-terminated. It grows
// while the generation runs: on WEFT_ERR_BUFFER_TOO_SMALL, grow and retry.
WEFT_C_API weft_status weft_generation_text(const weft_generation *generation, char *buf, size_t capacity,
                                            size_t *out_len);
// Every sampled token so far, the final one included.
WEFT_C_API weft_status weft_generation_tokens(const weft_generation *generation, weft_token *tokens,
                                              size_t capacity, size_t *out_n);
// Waits until done or `timeout_ms` passes; *out_done says which. Someone
// must be stepping the executor meanwhile.
WEFT_C_API weft_status weft_generation_wait(const weft_generation *generation, uint32_t timeout_ms,
                                            weft_bool *out_done);
// Ends it now with reason cancelled (if still running). Never waits for a
// decode. Sampled tokens stay in the conversation.
WEFT_C_API weft_status weft_generation_cancel(weft_generation *generation);
// For reason WEFT_FINISH_ERROR: the error's code and message (as
// weft_conversation_error); *out_code = WEFT_OK otherwise.
WEFT_C_API weft_status weft_generation_error(const weft_generation *generation, weft_status *out_code, char *buf,
                                             size_t capacity, size_t *out_len);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // WEFT_WEFT_H
