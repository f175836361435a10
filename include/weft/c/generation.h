// weft/c/generation.h — sampling step by step: start a generation on a
// conversation, then poll it, wait for it or cancel it.
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_GENERATION_H
#define WEFT_C_GENERATION_H

#include "weft/c/common.h"
#include "weft/c/conversation.h"
#include "weft/c/errors.h"
#include "weft/c/speculative.h"

WEFT_BEGIN_DECL

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
// Called once when the generation ends, with its weft_finish_reason, on the
// stepping thread after its last weft_token_callback: at the end of the
// step in which it ended, or of the next step when a call on another thread
// ended it (cancel, rewind, dispose), or in weft_executor_free.
// weft_generation_is_done is already true. Must not call a step.
typedef void (*weft_finish_callback)(int32_t reason, void *user_data);

// An action the reply may take (weft/tools.hpp): name 1-64 of
// [A-Za-z0-9_-]; description for the model (NULL = none); parameters a JSON
// Schema text of the arguments object (NULL or "" = any object).
typedef struct weft_tool {
  const char *name;
  const char *description;
  const char *parameters;
} weft_tool;

typedef enum weft_tool_choice {
  WEFT_TOOL_CHOICE_AUTO = 0,      // one call, or plain text that does not begin with '<'
  WEFT_TOOL_CHOICE_REQUIRED = 1,  // one call
} weft_tool_choice;

// weft::ToolFormat: how the model writes a call (weft/tools.hpp).
typedef enum weft_tool_format {
  WEFT_TOOL_FORMAT_AUTO = 0,     // weft_generate_params: the model's (weft_model_info.tool_format); else HERMES
  WEFT_TOOL_FORMAT_HERMES = 1,   // <tool_call>{"name", "arguments"}</tool_call>: Qwen, Hermes; weft's own
  WEFT_TOOL_FORMAT_LLAMA3 = 2,   // {"name", "parameters"}: Llama 3.1-3.3
  WEFT_TOOL_FORMAT_MISTRAL = 3,  // [TOOL_CALLS][{"name", "arguments"}]: Mistral
} weft_tool_format;

typedef struct weft_generate_params {
  size_t struct_size;
  const weft_sampler_params *sampler;  // this generation's sampler; NULL = the conversation's own
  const char *const *stop;             // n_stop NUL-terminated UTF-8 stop strings (non-empty)
  size_t n_stop;
  weft_token_callback on_token;        // default NULL
  void *user_data;                     // passed to on_token and on_finish
  weft_free_fn user_data_free;         // see "Callbacks" in weft.h: after both callbacks' last call
  uint32_t max_tokens;                 // >= 1. Default 128
  // Never sample an end-of-generation token (GenerateParams::ignore_eos):
  // the generation ends at max_tokens, a stop string, a full context or a
  // cancel. Default 0.
  weft_bool ignore_eos;
  weft_finish_callback on_finish;      // default NULL
  // Record each sampled token's log-probability under the model's logits
  // (GenerateParams::logprobs; read with weft_generation_logprob). Default 0.
  weft_bool logprobs;
  // How many most likely tokens each record lists too: 0..20, needs
  // logprobs. Default 0.
  uint32_t top_logprobs;
  // GenerateParams::tools: n_tools weft_tool entries (read when the
  // generation starts, not kept) and a weft_tool_choice. Default NULL, 0,
  // WEFT_TOOL_CHOICE_AUTO. NULL with n_tools > 0: WEFT_ERR_NULL_ARG.
  const weft_tool *tools;
  size_t n_tools;
  int32_t tool_choice;
  // The call's format, a weft_tool_format. Default WEFT_TOOL_FORMAT_AUTO.
  int32_t tool_format;
  // Speculative decoding for this generation (weft/c/speculative.h; read
  // when the generation starts, not kept). Default NULL: the executor's
  // (weft_executor_params.speculative).
  const weft_speculative_params *speculative;
  // Appended: a struct_size that ends before ignore_eos means 0 and NULL;
  // one that ends before logprobs means 0 for logprobs and top_logprobs;
  // one that ends before tools means no tools; one that ends before
  // tool_format means WEFT_TOOL_FORMAT_AUTO; one that ends before
  // speculative means NULL.
} weft_generate_params;

// A token and its log-probability (natural log; -INFINITY for a token the
// model rules out).
typedef struct weft_token_logprob {
  weft_token token;
  float logprob;
} weft_token_logprob;

WEFT_C_API weft_status weft_generate_params_init(weft_generate_params *params, size_t struct_size);

// Starts generating (`params` NULL = defaults): each step decodes the last
// sampled token and samples the next; queued input is decoded first. Every
// sampled token joins the conversation. Never waits for a running step or
// its sampling. WEFT_ERR_INVALID_ARGUMENT when a generation runs already,
// the conversation is empty or has an error set, or params are invalid.
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
// The log-probability record of sampled token `index` (generated with
// logprobs): *out the token and its logprob, `top` its *out_n_top most
// likely tokens, most likely first (WEFT_ERR_BUFFER_TOO_SMALL when
// top_capacity is less; *out_n_top says how many). WEFT_ERR_OUT_OF_RANGE
// when `index` is not below the records so far (weft_generation_n_tokens
// with logprobs, else 0). Copies the records so far: O(tokens) a call.
WEFT_C_API weft_status weft_generation_logprob(const weft_generation *generation, size_t index, weft_token_logprob *out,
                                               weft_token_logprob *top, size_t top_capacity, size_t *out_n_top);
// The call a finished generation with tools made: *out_has = 1 and its name
// and arguments (compact JSON), each NUL-terminated in its buffer (capacity
// needs length + 1; on WEFT_ERR_BUFFER_TOO_SMALL *name_len and
// *arguments_len both hold the lengths); *out_has
// = 0 (buffers untouched) when it spoke instead, was cut, or runs still.
WEFT_C_API weft_status weft_generation_tool_call(const weft_generation *generation, weft_bool *out_has, char *name,
                                                 size_t name_capacity, size_t *name_len, char *arguments,
                                                 size_t arguments_capacity, size_t *arguments_len);
// tools_prompt(): the system-prompt paragraph describing `tools` and the
// call format, NUL-terminated (WEFT_ERR_BUFFER_TOO_SMALL: *out_len is the
// size). WEFT_ERR_INVALID_ARGUMENT for bad tools, as a generation would be.
WEFT_C_API weft_status weft_tools_prompt(const weft_tool *tools, size_t n_tools, char *buf, size_t capacity,
                                         size_t *out_len);
// The same in a weft_tool_format (AUTO = HERMES): for MISTRAL its
// [AVAILABLE_TOOLS] block.
WEFT_C_API weft_status weft_tools_prompt_format(const weft_tool *tools, size_t n_tools, int32_t format, char *buf,
                                                size_t capacity, size_t *out_len);
// tool_call_text(): a call (name, arguments as a JSON object's text) written
// in a weft_tool_format, to render an earlier turn back into a prompt;
// NUL-terminated (as weft_tools_prompt). WEFT_ERR_INVALID_ARGUMENT when the
// arguments are not a JSON object or the name is empty.
WEFT_C_API weft_status weft_tool_call_text(const char *name, const char *arguments, int32_t format, char *buf,
                                           size_t capacity, size_t *out_len);
// tool_result_prompt(): the text that gives a call's result back, as the
// format's templates write it, NUL-terminated (as weft_tools_prompt).
WEFT_C_API weft_status weft_tool_result_prompt(const char *result, int32_t format, char *buf, size_t capacity,
                                               size_t *out_len);
// Speculative decoding so far (GenerationResult::drafted, ::accepted):
// draft tokens the steps verified for this generation, and of those the
// ones kept (each a decode fewer than without drafts). Either may be NULL.
WEFT_C_API weft_status weft_generation_drafts(const weft_generation *generation, uint32_t *out_drafted,
                                              uint32_t *out_accepted);
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

WEFT_END_DECL

#endif  // WEFT_C_GENERATION_H
