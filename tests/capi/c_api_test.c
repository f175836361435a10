/* The C ABI (include/weft/weft.h), exercised from C99 against libweft.so:
   every function, the error paths (NULL handles and buffers, wrong struct
   sizes, invalid UTF-8, freed handles), callbacks and their user_data
   ownership, events, the worker, save_async, and calls from many threads.
   It asserts results: a fork's logits equal a fresh conversation's, greedy
   tokens agree, streamed text equals the generation's text.

   This file: the harness, shared fixtures and main(); the tests are in
   c_api_test_*.c by topic (c_api_test.h lists them).

   Usage: c_api_test <tiny.gguf> [test-name-substring]. Exit 0 = all passed. */
#include "c_api_test.h"

/* --- Harness ------------------------------------------------------------- */

int g_failures = 0;
const char *g_model_path = NULL;

void failf(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s:%d: FAILED: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  ++g_failures;
}

/* --- Numbers and time --------------------------------------------------------- */

double nmse(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  size_t i;
  for (i = 0; i < n; ++i) {
    const double d = (double)a[i] - (double)b[i];
    num += d * d;
    den += (double)b[i] * (double)b[i];
  }
  return den > 0 ? num / den : num;
}

size_t argmax(const float *v, size_t n, double *margin) {
  size_t best = 0, second = 1, i;
  if (v[second] > v[best]) {
    best = 1;
    second = 0;
  }
  for (i = 2; i < n; ++i) {
    if (v[i] > v[best]) {
      second = best;
      best = i;
    } else if (v[i] > v[second]) {
      second = i;
    }
  }
  if (margin) *margin = (double)v[best] - (double)v[second];
  return best;
}

double rms(const float *v, size_t n) {
  double s = 0;
  size_t i;
  for (i = 0; i < n; ++i) s += (double)v[i] * (double)v[i];
  return sqrt(s / (double)n);
}

/* One sequence for the whole run, as when the tests were one file. */
static uint32_t g_rng = 12345;
weft_token rand_token(int32_t n_vocab) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return (weft_token)(3 + (g_rng >> 8) % (uint32_t)(n_vocab - 3));
}

void sleep_ms(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- Shared fixtures ------------------------------------------------------ */

weft_model *load_tiny(void) {
  weft_model_params mp;
  weft_model *m = NULL;
  CHECK_OK(weft_model_params_init(&mp, sizeof mp));
  mp.path = g_model_path;
  CHECK_OK(weft_model_load(&mp, &m));
  return m;
}

weft_executor *make_executor(weft_model *m, uint32_t n_ctx, uint32_t n_seq_max) {
  return make_executor_reuse(m, n_ctx, n_seq_max, -1);
}

weft_executor *make_executor_reuse(weft_model *m, uint32_t n_ctx, uint32_t n_seq_max, int64_t prefix_cache_cells) {
  weft_executor_params p;
  weft_executor *ex = NULL;
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.prefix_cache_cells = prefix_cache_cells;
  p.n_ctx = n_ctx;
  p.n_batch = 64;
  p.n_seq_max = n_seq_max;
  p.n_threads = 2;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  return ex;
}

void run_until_idle(weft_executor *ex) {
  weft_step_result r;
  int guard = 0;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  do {
    CHECK_OK(weft_executor_step(ex, NULL, &r));
  } while (!r.idle && ++guard < 10000);
  CHECK(r.idle);
}

size_t get_logits(weft_conversation *c, float *buf, size_t cap) {
  size_t n = 0;
  CHECK_OK(weft_conversation_logits(c, buf, cap, &n));
  return n;
}

/* --- Shared by several test files ------------------------------------------- */

void collect_token(weft_token token, const char *text, size_t len, void *user_data) {
  Collected *c = (Collected *)user_data;
  if (strlen(text) != len) c->bad_text = 1; /* NUL-terminated at len */
  if (c->n_tokens < 256) c->tokens[c->n_tokens++] = token;
  if (c->text_len + len < sizeof c->text) {
    memcpy(c->text + c->text_len, text, len);
    c->text_len += len;
    c->text[c->text_len] = '\0';
  }
}

int g_freed = 0;
void count_free(void *user_data) {
  (void)user_data;
  ++g_freed;
}

char *generation_text(weft_generation *g, size_t *len) {
  char *buf;
  CHECK_ERR(weft_generation_text(g, NULL, 0, len), WEFT_ERR_BUFFER_TOO_SMALL, "plus a NUL");
  buf = (char *)malloc(*len + 1);
  CHECK_OK(weft_generation_text(g, buf, *len + 1, len));
  return buf;
}

void step_until_done(weft_executor *ex, weft_generation *g) {
  weft_bool done = 0;
  int guard = 0;
  do {
    CHECK_OK(weft_executor_step(ex, NULL, NULL));
    CHECK_OK(weft_generation_is_done(g, &done));
  } while (!done && ++guard < 10000);
  CHECK(done);
}

/* --- Main ----------------------------------------------------------------- */

typedef struct Test {
  const char *name;
  void (*fn)(void);
} Test;

int main(int argc, char **argv) {
  static const Test tests[] = {
      {"basics", test_basics},
      {"params_init", test_params_init},
      {"model", test_model},
      {"handles", test_handles},
      {"executor_errors", test_executor_errors},
      {"budget_zero_is_n_batch", test_budget_zero_is_n_batch},
      {"prefix_reuse", test_prefix_reuse},
      {"fork_equivalence", test_fork_equivalence},
      {"rewind_remove_shift", test_rewind_remove_shift},
      {"generation", test_generation},
      {"generation_logprobs", test_generation_logprobs},
      {"sampler", test_sampler},
      {"logit_bias", test_logit_bias},
      {"sampler_stages", test_sampler_stages},
      {"banned_strings", test_banned_strings},
      {"tools", test_tools},
      {"dispose_and_executor_gone", test_dispose_and_executor_gone},
      {"pressure", test_pressure},
      {"state", test_state},
      {"residency", test_residency},
      {"save_async", test_save_async},
      {"save_async_during_step", test_save_async_during_step},
      {"worker_and_events", test_worker_and_events},
      {"threads", test_threads},
      {"log", test_log},
      {"adapter_load", test_adapter_load},
      {"adapter_logits", test_adapter_logits},
      {"adapter_errors", test_adapter_errors},
      {"adapter_lifetime", test_adapter_lifetime},
      {"adapter_state", test_adapter_state},
      {"images", test_images},
      {"embeddings", test_embeddings},
      {"embedding_errors", test_embedding_errors},
      {"embedding_lifetime", test_embedding_lifetime},
      {"memory_search", test_memory_search},
      {"memory_embed", test_memory_embed},
      {"memory_conversation", test_memory_conversation},
      {"compact", test_compact},
      {"fit", test_fit},
      {"speculative", test_speculative},
      {"draft_model", test_draft_model},
  };
  size_t i;
  int ran = 0;
  if (argc < 2) {
    fprintf(stderr, "usage: %s <tiny.gguf> [test-name-substring]\n", argv[0]);
    return 2;
  }
  g_model_path = argv[1];
  for (i = 0; i < sizeof tests / sizeof tests[0]; ++i) {
    const int before = g_failures;
    double t0;
    if (argc > 2 && strstr(tests[i].name, argv[2]) == NULL) continue;
    t0 = now_s();
    tests[i].fn();
    printf("[%s] %s (%.2f s)\n", g_failures == before ? "  OK  " : "FAILED", tests[i].name, now_s() - t0);
    ++ran;
  }
  printf("%d tests, %d failed checks\n", ran, g_failures);
  return g_failures == 0 && ran > 0 ? 0 : 1;
}
