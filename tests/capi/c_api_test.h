/* Shared by the C ABI's tests (tests/capi/c_api_test*.c): the check macros,
   numeric helpers, fixtures, and the test functions main() runs. Include it
   first (it sets _POSIX_C_SOURCE). Only weft.h: no C++ headers. */
#ifndef WEFT_C_API_TEST_H
#define WEFT_C_API_TEST_H

#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft/weft.h"

/* --- Harness ------------------------------------------------------------- */

extern int g_failures;
extern const char *g_model_path;

void failf(const char *file, int line, const char *fmt, ...);

#define CHECK(cond)                                          \
  do {                                                       \
    if (!(cond)) failf(__FILE__, __LINE__, "%s", #cond);     \
  } while (0)

#define CHECK_OK(call)                                                                                \
  do {                                                                                                \
    weft_status s_ = (call);                                                                          \
    if (s_ != WEFT_OK)                                                                                \
      failf(__FILE__, __LINE__, "%s -> %s: %s", #call, weft_status_name(s_), weft_last_error());      \
  } while (0)

/* The call fails with `expected`, and its message names `needle`. */
#define CHECK_ERR(call, expected, needle)                                                              \
  do {                                                                                                 \
    weft_status s_ = (call);                                                                           \
    if (s_ != (expected))                                                                              \
      failf(__FILE__, __LINE__, "%s -> %s (%s), expected %s", #call, weft_status_name(s_),             \
            weft_last_error(), weft_status_name(expected));                                            \
    else if (strstr(weft_last_error(), (needle)) == NULL)                                              \
      failf(__FILE__, __LINE__, "%s: message '%s' lacks '%s'", #call, weft_last_error(), (needle));    \
  } while (0)

/* Normalised mean squared error: sum (a-b)^2 / sum b^2. */
double nmse(const float *a, const float *b, size_t n);

/* "Same logits": tests/reference.cpp measures llama.cpp's own batch noise
   on the tiny model (max nmse 2e-8, printed by `weft_tests
   --gtest_filter=*NoiseFloor*`); weft's C++ tests allow 8x that floor, and
   so does this one. */
#define LOGITS_TOLERANCE (8 * 2e-8)
/* Greedy choices are compared only where the top two logits are further
   apart than this many standard deviations of that noise. */
#define MARGIN_SIGMAS 10.0

size_t argmax(const float *v, size_t n, double *margin);
double rms(const float *v, size_t n);
/* Deterministic token ids in [3, n_vocab); one sequence for the whole run. */
weft_token rand_token(int32_t n_vocab);
void sleep_ms(long ms);
double now_s(void);

/* --- Shared fixtures ------------------------------------------------------ */

weft_model *load_tiny(void);
weft_executor *make_executor(weft_model *m, uint32_t n_ctx, uint32_t n_seq_max);
/* prefix_cache_cells: -1 default, 0 = prefix reuse off (an independent path). */
weft_executor *make_executor_reuse(weft_model *m, uint32_t n_ctx, uint32_t n_seq_max, int64_t prefix_cache_cells);
void run_until_idle(weft_executor *ex);
size_t get_logits(weft_conversation *c, float *buf, size_t cap);

/* What a token callback saw. */
typedef struct Collected {
  weft_token tokens[256];
  size_t n_tokens;
  char text[4096];
  size_t text_len;
  int bad_text;
} Collected;

void collect_token(weft_token token, const char *text, size_t len, void *user_data);

/* count_free counts its calls in g_freed (a weft_free_fn). */
extern int g_freed;
void count_free(void *user_data);

/* The generation's text (malloc'ed; the caller frees it), after checking
   the size query. */
char *generation_text(weft_generation *g, size_t *len);
void step_until_done(weft_executor *ex, weft_generation *g);

/* --- The tests, by file ------------------------------------------------------ */

/* c_api_test_model.c */
void test_basics(void);
void test_params_init(void);
void test_model(void);
void test_handles(void);
void test_log(void);
/* c_api_test_executor.c */
void test_executor_errors(void);
void test_budget_zero_is_n_batch(void);
void test_prefix_reuse(void);
void test_worker_and_events(void);
/* c_api_test_conversation.c */
void test_fork_equivalence(void);
void test_rewind_remove_shift(void);
void test_sampler(void);
void test_logit_bias(void);
void test_dispose_and_executor_gone(void);
void test_pressure(void);
/* c_api_test_generation.c */
void test_generation(void);
void test_generation_logprobs(void);
/* c_api_test_sampler_stages.c */
void test_sampler_stages(void);
void test_banned_strings(void);
void test_tools(void);
/* c_api_test_state.c */
void test_state(void);
void test_residency(void);
/* c_api_test_save_async.c */
void test_save_async(void);
void test_save_async_during_step(void);
/* c_api_test_threads.c */
void test_threads(void);
/* c_api_test_adapter.c: the adapter tests' helpers (files made beside the
   model by the make_capi_adapters_* fixtures; a fixed prompt of N_PROMPT
   tokens; its logits decoded alone under a setting). */
#define N_PROMPT 12
const char *beside_model(int slot, const char *suffix);
const char *lora_path(void);
const char *cvec_path(void);
weft_adapter *load_adapter(weft_model *m, const char *path);
weft_adapter_use use_of(weft_adapter *a, float scale);
void prompt_fixed(weft_conversation *c);
void logits_alone(weft_model *m, const weft_adapter_use *uses, size_t n, float *out, size_t cap);
size_t adapter_count(weft_conversation *c);
void test_adapter_load(void);
void test_adapter_logits(void);
void test_adapter_errors(void);
void test_adapter_lifetime(void);
void test_adapter_state(void);
/* c_api_test_projector.c */
void test_images(void);
/* c_api_test_embedding.c: the embeddings tests' helpers (an executor over
   `m` whose embedder pools `em`, NULL = m; stepping until an embedding is
   done; a vector's squared length), and the tests. */
#define MAX_EMBD 1024
weft_executor *embed_executor(weft_model *m, const weft_model *em, uint32_t n_batch, uint32_t embed_n_ctx);
void step_until_embedded(weft_executor *ex, weft_embedding *e);
double norm2(const float *v, size_t n);
/* embed.gguf ($WEFT_TEST_EMBED_MODEL, else beside the model), NULL when absent. */
weft_model *load_embed_model(void);
void test_embeddings(void);
/* c_api_test_embedding_life.c */
void test_embedding_errors(void);
void test_embedding_lifetime(void);
/* c_api_test_memory.c */
void test_memory_search(void);
void test_memory_embed(void);
void test_memory_conversation(void);
void test_compact(void);
/* c_api_test_fit.c */
void test_fit(void);
/* c_api_test_speculative.c */
void test_speculative(void);
/* c_api_test_draft_model.c */
void test_draft_model(void);

#endif /* WEFT_C_API_TEST_H */
