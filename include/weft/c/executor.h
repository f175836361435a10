// weft/c/executor.h — one llama.cpp context shared by many conversations:
// creating it, stepping it (by hand or on its worker thread), its stats.
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_EXECUTOR_H
#define WEFT_C_EXECUTOR_H

#include "weft/c/common.h"
#include "weft/c/errors.h"
#include "weft/c/speculative.h"

WEFT_BEGIN_DECL

// weft::KvType: the quantised ones (Q8_0 .. IQ4_NL) need flash attention and
// heads a multiple of 32 wide.
typedef enum weft_kv_type {
  WEFT_KV_F16 = 0,
  WEFT_KV_F32 = 1,
  WEFT_KV_Q8_0 = 2,
  WEFT_KV_BF16 = 3,
  WEFT_KV_Q4_0 = 4,
  WEFT_KV_Q4_1 = 5,
  WEFT_KV_Q5_0 = 6,
  WEFT_KV_Q5_1 = 7,
  WEFT_KV_IQ4_NL = 8,
} weft_kv_type;
typedef enum weft_flash_attn {
  WEFT_FLASH_ATTN_AUTO = 0,
  WEFT_FLASH_ATTN_ENABLED = 1,
  WEFT_FLASH_ATTN_DISABLED = 2,
} weft_flash_attn;
// How the context's attention kernel was chosen (weft_executor_stats).
typedef enum weft_attention_source {
  WEFT_ATTENTION_ASKED = 0,       // flash_attn was ENABLED or DISABLED
  WEFT_ATTENTION_GPU = 1,         // AUTO with layers on a GPU: left to llama.cpp
  WEFT_ATTENTION_KV_TYPE = 2,     // AUTO with a q8_0 cache (needs flash attention): left to llama.cpp
  WEFT_ATTENTION_MEASURED = 3,    // AUTO: both kernels timed when the executor was made
  WEFT_ATTENTION_REMEMBERED = 4,  // AUTO: an earlier probe's timings (same model, machine, build, shape)
  WEFT_ATTENTION_FALLBACK = 5,    // AUTO: the probe could not run (logged); flash attention off
  WEFT_ATTENTION_ENVIRONMENT = 6, // AUTO overridden by WEFT_FLASH_ATTN=on|off in the environment
} weft_attention_source;
// What happens when queued input cannot get KV cells now.
typedef enum weft_pressure_policy {
  WEFT_PRESSURE_WAIT = 0,      // it stays queued until cells free up
  WEFT_PRESSURE_FAIL = 1,      // prompting refuses what cannot fit now
  WEFT_PRESSURE_CALLBACK = 2,  // on_pressure runs, then the step plans once more
} weft_pressure_policy;
// Who runs the encoder on queued images (weft/c/projector.h).
typedef enum weft_image_encoding {
  WEFT_IMAGE_ENCODING_THREAD = 0,  // the executor's encoder thread, as soon as one is queued
  WEFT_IMAGE_ENCODING_CALLER = 1,  // whoever calls weft_executor_encode_images, when they choose
} weft_image_encoding;

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
  weft_free_fn pressure_user_data_free;  // see "Callbacks" in weft.h
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
  // A weft_flash_attn. Default WEFT_FLASH_ATTN_AUTO: llama.cpp decides with
  // GPU layers or a quantised KV; on the CPU both kernels are timed at this
  // executor's shape and the faster is used (weft::ExecutorParams::flash_attn;
  // the timings are kept per model, machine, build and shape: tuning_cache_dir).
  int32_t flash_attn;
  int32_t pressure;           // a weft_pressure_policy. Default WEFT_PRESSURE_WAIT
  uint32_t max_prompt_chunk;  // most prompt tokens per conversation per step; 0 = no cap. Default 0
  weft_bool events;           // post tokens, finished generations and errors for
                              // weft_executor_poll_events (a main thread that must
                              // not be called back). Default 0
  weft_bool spill_recompute;  // last resort when the tiers are full: keep tokens only,
                              // re-decode on return; 0 = such a one stays resident. Default 1
  // Added in 0.5 (a struct_size without it reads as the default). Prefix
  // reuse: most cells the prefix cache keeps; -1 = n_ctx / 4; 0 = reuse off
  // (no sharing between unforked conversations, no cache). <= n_ctx.
  // Default -1
  int64_t prefix_cache_cells;
  // Added in 0.8 (a struct_size without it reads as NULL). A projector for
  // images (weft/c/projector.h), borrowed:
  // the executor keeps its own reference, so the handle may be freed after
  // weft_executor_create. Must be loaded for this executor's model. NULL =
  // no images. Default NULL
  const weft_projector *projector;
  // Added with weft_executor_encode_images (a struct_size without it reads
  // as the default). A weft_image_encoding: who encodes queued images.
  // Ignored without a projector. Default WEFT_IMAGE_ENCODING_THREAD
  int32_t image_encoding;
  // Added with the attention probe (a struct_size without it reads as
  // NULL). NUL-terminated UTF-8 directory where WEFT_FLASH_ATTN_AUTO keeps
  // its probe's timings; NULL = $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft,
  // else %LOCALAPPDATA%/weft on Windows, else $HOME/.cache/weft; "" = this
  // process only. Copied; a failure to write there is logged, never fatal.
  // Default NULL
  const char *tuning_cache_dir;
  // Added with embeddings (a struct_size without them reads as the
  // defaults: no embedder). Text embeddings (weft/c/embedding.h): set,
  // the executor makes a second llama.cpp context (embed_n_ctx cells,
  // embed_n_seq_max sequences, embeddings on) over embedding_model or its
  // own model, freed with the executor; its steps decode the texts queued by
  // weft_executor_embed beside the conversations. Default 0: no embedder
  // (weft_executor_embed is WEFT_ERR_INVALID_ARGUMENT) and the fields below
  // are ignored, except that an embedding_model without `embedder` is
  // refused (WEFT_ERR_INVALID_ARGUMENT: set both).
  weft_bool embedder;
  int32_t embed_pooling;  // a weft_pooling. Default WEFT_POOLING_MODEL
  // The embedding model (an encoder, or a decoder with pooling), borrowed:
  // the executor keeps its own reference, so the handle may be freed after
  // weft_executor_create. NULL = the executor's own model, its hidden states
  // pooled. Default NULL
  const weft_model *embedding_model;
  // Most tokens of one text and of one embeddings decode (the context's
  // cells), in [8, the embedding model's n_ctx_train]. Default 512
  uint32_t embed_n_ctx;
  // Most texts in one decode (the context's sequences), [1, 256]. Default 16
  uint32_t embed_n_seq_max;
  // Scale each vector to unit length (L2), so that a dot product is the
  // cosine similarity. Default 1
  weft_bool embed_normalize;
  // Added with speculative decoding (a struct_size without it reads as
  // NULL; weft/c/speculative.h). What generations draft when their
  // weft_generate_params.speculative is NULL; read by weft_executor_create,
  // not kept. NULL = no drafter. Default NULL
  const weft_speculative_params *speculative;
  // Added with the draft model (a struct_size without it reads as NULL;
  // weft/c/speculative.h). The model WEFT_DRAFTER_MODEL drafts with; read
  // by weft_executor_create, not kept (the model handle inside is borrowed
  // as embedding_model is). NULL = none: a generation, or `speculative`
  // above, asking for WEFT_DRAFTER_MODEL is WEFT_ERR_INVALID_ARGUMENT.
  // Default NULL
  const weft_draft_model_params *draft_model;
} weft_executor_params;

WEFT_C_API weft_status weft_executor_params_init(weft_executor_params *params, size_t struct_size);

// Creates the context; `params` NULL = defaults. WEFT_ERR_INVALID_ARGUMENT
// for parameters outside their ranges, WEFT_ERR_BACKEND when llama.cpp
// cannot create the context.
WEFT_C_API weft_status weft_executor_create(const weft_model *model, const weft_executor_params *params,
                                            weft_executor **out);
// Stops the worker, ends running generations (reason cancelled) and frees
// the context once no other thread is inside a call on this executor. One
// of the few calls that wait for a running step (the context goes). Its
// conversations' operations then fail with WEFT_ERR_DISPOSED, and a
// weft_conversation_save_async still pending calls back with it, on this
// thread.
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
  // Added with embeddings (a smaller struct_size gets the fields before
  // these; weft/c/embedding.h).
  uint32_t tokens_embedded;  // tokens decoded for weft_executor_embed (not in tokens_decoded)
  uint32_t texts_embedded;   // texts whose vectors this step made
  // Added with speculative decoding (a smaller struct_size gets the fields
  // before these; weft/c/speculative.h).
  uint32_t tokens_drafted;   // draft tokens verified (in tokens_decoded)
  uint32_t drafts_accepted;  // of those, kept (in tokens_sampled)
  // Added with the draft model (a smaller struct_size gets the fields
  // before it): seconds in the draft model's context (WEFT_DRAFTER_MODEL).
  double draft_seconds;
} weft_step_result;

// One scheduling round: sample for generations, decode one batch within the
// budget, hand out logits, run on_token callbacks on this thread. `budget`
// NULL = defaults; `out` may be NULL (else set out->struct_size). Steps from
// several threads run one after the other: a step asked for while another
// runs (the worker's, say) waits for it. Called from a callback on the
// stepping thread it fails with WEFT_ERR_INVALID_ARGUMENT instead of waiting
// for itself. Decode failures do not fail the call: they reach the
// conversations concerned.
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
  // Added in 0.5 (a smaller struct_size gets the fields before these).
  // Prefix reuse: input tokens shared instead of decoded; lookups that found
  // a prefix (of which in the prefix cache) or none; cache entries evicted;
  // positions held beyond the cells used (what sharing saves, forks
  // included); cells the prefix cache holds (counted in cells_free);
  // prefixes pinned.
  uint64_t prefix_tokens_reused;
  uint64_t prefix_hits;
  uint64_t prefix_cache_hits;
  uint64_t prefix_misses;
  uint64_t prefix_evictions;
  uint64_t cells_saved;
  uint32_t prefix_cache_cells;
  uint32_t pinned_prefixes;
  // Added with adapters (a smaller struct_size gets the fields before
  // these; weft/c/adapter.h). Times a step switched the context's adapter
  // setting (each a llama_decode of its own, after which llama.cpp
  // re-reserves its graph), and what the cost model has learnt a switch
  // adds to that decode.
  uint64_t adapter_switches;
  double adapter_switch_ms;
  // Added with images (a smaller struct_size gets the fields before these;
  // weft/c/projector.h): images encoded by the executor's encoder (its
  // thread or weft_executor_encode_images) and its total time on them (never inside a step); embeddings batches
  // decoded by steps and their total llama_decode time.
  uint64_t images_encoded;
  double image_encode_ms;
  uint64_t image_batches;
  double image_decode_ms;
  // Added with weft_executor_encode_images (a smaller struct_size gets the
  // fields before it): images queued for the encoder or being encoded now.
  uint32_t images_pending;
  // Added with the attention probe (a smaller struct_size gets the fields
  // before these). For a probe (measured or remembered): one generation
  // step plus one prompt chunk at its shape (attn_probe_seqs conversations x
  // attn_probe_depth cells), fastest of three rounds, with and without
  // flash attention; 0 otherwise.
  double flash_attn_probe_ms;
  double plain_attn_probe_ms;
  int32_t flash_attn;         // the weft_flash_attn the context uses; AUTO = llama.cpp decided
  int32_t flash_attn_source;  // a weft_attention_source
  uint32_t attn_probe_seqs;
  uint32_t attn_probe_depth;
  // Added with model families (a smaller struct_size gets the fields before
  // these): conversations decoded again from their start because the
  // model's memory could not be cut or shared where an operation asked
  // (weft_model_info.memory), and the positions that took.
  uint64_t redecodes;
  uint64_t redecode_tokens;
  // Added with embeddings (a smaller struct_size gets the fields before
  // these; weft/c/embedding.h): texts embedded, their tokens, the
  // llama_decode calls and time they took, and texts queued now.
  uint64_t texts_embedded;
  uint64_t embed_tokens;
  uint64_t embed_decodes;
  double embed_ms;
  uint32_t embed_pending;
  // Added with speculative decoding (a smaller struct_size gets the fields
  // before these; weft/c/speculative.h): draft tokens verified (counted in
  // tokens_decoded) and of those kept (counted in tokens_sampled).
  uint64_t tokens_drafted;
  uint64_t drafts_accepted;
  // Added with the draft model (a smaller struct_size gets the fields
  // before these): tokens decoded in the draft model's context (catching
  // conversations up and drafting) and the seconds that took.
  uint64_t draft_model_tokens;
  double draft_model_seconds;
} weft_executor_stats;

// Keeps `tokens` (n_tokens ids) decoded in the cache for prefix reuse until
// unpinned: a game's lore that begins many conversations. Decoded by the
// next steps; never evicted or parked. WEFT_ERR_INVALID_ARGUMENT (reuse off,
// fewer than 16 tokens, pinned already), WEFT_ERR_OUT_OF_RANGE (an id
// outside the vocabulary, more than n_ctx - 1 tokens, no slot can be had).
// Never waits for a step.
WEFT_C_API weft_status weft_executor_pin_prefix(weft_executor *executor, const int32_t *tokens, size_t n_tokens);
// Lets a pinned prefix go (its cells join the prefix cache); *out_was_pinned
// (may be NULL) says whether it was pinned.
WEFT_C_API weft_status weft_executor_unpin_prefix(weft_executor *executor, const int32_t *tokens, size_t n_tokens,
                                                  weft_bool *out_was_pinned);

// Never waits for a running step. Set out->struct_size first. The KV
// counts (cells, slots, residency, parks) are the cache's as it is: KV work
// asked for while someone else steps (fork, rewind, dispose, park, ...)
// shows from the stepper's next boundary on (see "Waiting" in weft.h).
WEFT_C_API weft_status weft_executor_get_stats(const weft_executor *executor, weft_executor_stats *out);
// Free KV cells (cells shared by forks count once), as in the stats.
WEFT_C_API weft_status weft_executor_cells_free(const weft_executor *executor, uint32_t *out);
// The KV cache's cells (n_ctx as llama.cpp rounded it up), as the stats'
// n_ctx, without their cost. A conversation holds at most this many tokens.
WEFT_C_API weft_status weft_executor_n_ctx(const weft_executor *executor, uint32_t *out);

// The background worker: steps on an executor-owned thread until stopped,
// sleeping while idle and waking on new work. on_token callbacks then run on
// that thread; a main thread that must not be called back polls events.

// Called on the worker thread after every step it runs, with that step's
// result (struct_size set; idle steps included). Must not call a step; may
// call weft_executor_stop.
typedef void (*weft_step_callback)(const weft_step_result *result, void *user_data);

typedef struct weft_worker_params {
  size_t struct_size;
  const weft_step_budget *budget;  // each step's budget (deadline_us must be 0); NULL = n_batch tokens
  uint32_t idle_wait_ms;           // longest idle sleep before looking again; > 0. Default 100
  // Appended: a struct_size that ends before on_step means NULL.
  weft_step_callback on_step;      // default NULL
  void *user_data;                 // passed to on_step
  weft_free_fn user_data_free;     // see "Callbacks" in weft.h: once the worker is stopped
} weft_worker_params;

WEFT_C_API weft_status weft_worker_params_init(weft_worker_params *params, size_t struct_size);
// Starts the worker (`params` NULL = defaults). WEFT_ERR_INVALID_ARGUMENT
// when it runs already. weft_executor_step may still be called (turns).
WEFT_C_API weft_status weft_executor_start(weft_executor *executor, const weft_worker_params *params);
// Stops the worker after its current step and joins it (so it waits for
// that step). Nothing is lost: input stays queued, generations stay
// running. Idempotent.
WEFT_C_API weft_status weft_executor_stop(weft_executor *executor);
WEFT_C_API weft_status weft_executor_is_running(const weft_executor *executor, weft_bool *out);

WEFT_END_DECL

#endif  // WEFT_C_EXECUTOR_H
