// weft/c/conversation.h — one dialogue: token history in the shared KV
// cache, queued input, logits, a sampler and at most one running
// generation (weft/c/generation.h). Saving and parking: weft/c/state.h.
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_CONVERSATION_H
#define WEFT_C_CONVERSATION_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

// A new, empty conversation (nothing queued or decoded, no slot yet).
WEFT_C_API weft_status weft_conversation_create(weft_executor *executor, weft_conversation **out);
// Frees the handle, which disposes the conversation (its slot and KV cells
// are released at once, or at the stepper's next boundary: see "Waiting" in
// weft.h; never waits).
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

// Fork, rewind, remove and shift_left change the conversation's tokens now
// and never wait for a running step: the KV cache follows at once when
// nobody else steps, else at the stepper's next boundary (see "Waiting" in
// weft.h). Until then n_cells, residency and the executor's cell counts
// show the cache as it is.
//
// A new conversation with the same history, queued input, logits and
// sampler state, sharing the decoded prefix in the cache (without a free
// slot an idle conversation is parked to make one, or the child starts
// parked). WEFT_ERR_OUT_OF_RANGE when it needs a slot and none can be had.
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
// KV cells it references (shared ones included), as of the last step
// boundary.
WEFT_C_API weft_status weft_conversation_n_cells(const weft_conversation *conversation, uint32_t *out);
// History (decoded) followed by queued input.
WEFT_C_API weft_status weft_conversation_tokens(const weft_conversation *conversation, weft_token *tokens,
                                                size_t capacity, size_t *out_n);

// *out = 1 when logits for the last token are ready (input fully decoded);
// 0 during a generation (it samples from llama.cpp's output in place), and
// after a rewind or cancel that leaves its last token until the next step.
WEFT_C_API weft_status weft_conversation_has_logits(const weft_conversation *conversation, weft_bool *out);
// Copies the n_vocab logits. WEFT_ERR_INVALID_ARGUMENT when not ready. They
// stay until the next decode of this conversation replaces them.
WEFT_C_API weft_status weft_conversation_logits(const weft_conversation *conversation, float *logits,
                                                size_t capacity, size_t *out_n);
// Samples from the current logits with the conversation's sampler and
// advances its state; the token is not queued (prompt it to keep it).
WEFT_C_API weft_status weft_conversation_sample(weft_conversation *conversation, weft_token *out);

// One logit bias: `bias` is added to `token`'s logit. A NaN or +inf bias, a
// token listed twice or more than 1024 entries: WEFT_ERR_INVALID_ARGUMENT; a
// token outside the vocabulary: WEFT_ERR_OUT_OF_RANGE.
typedef struct weft_logit_bias {
  weft_token token;
  float bias;
} weft_logit_bias;

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
  // Appended (an older caller's smaller struct_size leaves it NULL):
  const char *json_schema;   // NUL-terminated JSON Schema text: sample only JSON that matches it
                             // (weft/json_schema.hpp: keywords, cache); NULL or "" = none; set
                             // with a grammar: WEFT_ERR_INVALID_ARGUMENT. Default NULL
  // Appended after json_schema (an older struct_size leaves them NULL and 0):
  const weft_logit_bias *logit_bias;  // n_logit_bias entries, added to those tokens'
                             // logits before any other sampling step (-INFINITY bans one); read
                             // when the sampler is set, not kept. Default NULL
  size_t n_logit_bias;       // at most 1024. NULL with n > 0: WEFT_ERR_NULL_ARG. Default 0
  // Appended after n_logit_bias (an older struct_size leaves the defaults);
  // SamplerParams says what each does:
  float typical_p;           // (0, 1]; 1 = off. Default 1
  float xtc_probability;     // [0, 1]; 0 = off. Default 0
  float xtc_threshold;       // (0, 1]. Default 0.1
  float dry_multiplier;      // >= 0; 0 = off. Default 0
  float dry_base;            // >= 1. Default 1.75
  int32_t dry_allowed_length;  // >= 1. Default 2
  int32_t dry_penalty_last_n;  // -1 = the whole context, 0 = off. Default -1
  // n_dry_sequence_breakers NUL-terminated UTF-8 strings (1-40 bytes, at
  // most 64); NULL = the default set ("\n", ":", "\"", "*"), a non-NULL
  // pointer with n 0 = none. Read when the sampler is set. Default NULL
  const char *const *dry_sequence_breakers;
  size_t n_dry_sequence_breakers;
  int32_t mirostat;          // 0 = off, 2 = Mirostat 2.0. Default 0
  float mirostat_tau;        // > 0. Default 5
  float mirostat_eta;        // (0, 1]. Default 0.1
  // Appended after mirostat_eta (an older struct_size leaves none):
  // n_banned_strings NUL-terminated strings (1-256 bytes, at most 256) a
  // generation never writes (SamplerParams::banned_strings). Read when the
  // sampler is set. NULL with n > 0: WEFT_ERR_NULL_ARG. Default NULL
  const char *const *banned_strings;
  size_t n_banned_strings;
} weft_sampler_params;

WEFT_C_API weft_status weft_sampler_params_init(weft_sampler_params *params, size_t struct_size);
// The conversation's own sampler (used by sample and by generations without
// their own). Default greedy. WEFT_ERR_INVALID_ARGUMENT for bad values, an
// unparsable grammar, a json_schema that does not convert (the message
// names where: "JSON schema at #/properties/a: ...") or a bad logit bias
// (see weft_logit_bias); WEFT_ERR_OUT_OF_RANGE for a logit_bias token
// outside the vocabulary.
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

WEFT_END_DECL

#endif  // WEFT_C_CONVERSATION_H
