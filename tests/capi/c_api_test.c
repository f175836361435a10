/* The C ABI (include/weft/weft.h), exercised from C99 against libweft.so:
   every function, the error paths (NULL handles and buffers, wrong struct
   sizes, invalid UTF-8, freed handles), callbacks and their user_data
   ownership, events, the worker, and calls from many threads. It asserts
   results: a fork's logits equal a fresh conversation's, greedy tokens
   agree, streamed text equals the generation's text.

   Usage: c_api_test <tiny.gguf> [test-name-substring]. Exit 0 = all passed. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft/weft.h"

/* --- Harness ------------------------------------------------------------- */

static int g_failures = 0;
static const char *g_model_path = NULL;

static void failf(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s:%d: FAILED: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  ++g_failures;
}

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
static double nmse(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  size_t i;
  for (i = 0; i < n; ++i) {
    const double d = (double)a[i] - (double)b[i];
    num += d * d;
    den += (double)b[i] * (double)b[i];
  }
  return den > 0 ? num / den : num;
}

/* "Same logits": tests/reference.cpp measures llama.cpp's own batch noise
   on the tiny model (max nmse 2e-8, printed by `weft_tests
   --gtest_filter=*NoiseFloor*`); weft's C++ tests allow 8x that floor, and
   so does this one. */
#define LOGITS_TOLERANCE (8 * 2e-8)
/* Greedy choices are compared only where the top two logits are further
   apart than this many standard deviations of that noise. */
#define MARGIN_SIGMAS 10.0

static size_t argmax(const float *v, size_t n, double *margin) {
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

static double rms(const float *v, size_t n) {
  double s = 0;
  size_t i;
  for (i = 0; i < n; ++i) s += (double)v[i] * (double)v[i];
  return sqrt(s / (double)n);
}

/* Deterministic token ids in [3, n_vocab). */
static uint32_t g_rng = 12345;
static weft_token rand_token(int32_t n_vocab) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return (weft_token)(3 + (g_rng >> 8) % (uint32_t)(n_vocab - 3));
}

static void sleep_ms(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- Shared fixtures ------------------------------------------------------ */

static weft_model *load_tiny(void) {
  weft_model_params mp;
  weft_model *m = NULL;
  CHECK_OK(weft_model_params_init(&mp, sizeof mp));
  mp.path = g_model_path;
  CHECK_OK(weft_model_load(&mp, &m));
  return m;
}

static weft_executor *make_executor(weft_model *m, uint32_t n_ctx, uint32_t n_seq_max) {
  weft_executor_params p;
  weft_executor *ex = NULL;
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.n_ctx = n_ctx;
  p.n_batch = 64;
  p.n_seq_max = n_seq_max;
  p.n_threads = 2;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  return ex;
}

static void run_until_idle(weft_executor *ex) {
  weft_step_result r;
  int guard = 0;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  do {
    CHECK_OK(weft_executor_step(ex, NULL, &r));
  } while (!r.idle && ++guard < 10000);
  CHECK(r.idle);
}

static size_t get_logits(weft_conversation *c, float *buf, size_t cap) {
  size_t n = 0;
  CHECK_OK(weft_conversation_logits(c, buf, cap, &n));
  return n;
}

/* --- Tests -------------------------------------------------------------- */

static void test_basics(void) {
  CHECK(strlen(weft_version()) >= 5);
  CHECK(strstr(weft_llama_version(), "v0.4.0") != NULL);
  CHECK(strcmp(weft_status_name(WEFT_OK), "ok") == 0);
  CHECK(strcmp(weft_status_name(WEFT_ERR_DISPOSED), "disposed") == 0);
  CHECK(strcmp(weft_status_name(WEFT_ERR_BUFFER_TOO_SMALL), "buffer_too_small") == 0);
  CHECK(strcmp(weft_status_name(WEFT_ERR_INVALID_HANDLE), "invalid_handle") == 0);
  CHECK(strcmp(weft_status_name((weft_status)12345), "unknown") == 0);
  CHECK(strcmp(weft_finish_reason_name(WEFT_FINISH_STOP_STRING), "stop_string") == 0);
  CHECK(strcmp(weft_finish_reason_name(99), "unknown") == 0);
  /* A failure sets the message; the next successful call clears it. */
  CHECK_ERR(weft_model_load(NULL, NULL), WEFT_ERR_NULL_ARG, "weft_model_load: argument `out` is NULL");
  CHECK_OK(weft_set_log_callback(NULL, WEFT_LOG_NONE, NULL, NULL));
  CHECK(strcmp(weft_last_error(), "") == 0);
}

static void test_params_init(void) {
  weft_model_params mp;
  weft_executor_params ep;
  weft_sampler_params sp;
  weft_generate_params gp;
  weft_step_budget b;
  weft_worker_params wp;
  CHECK_OK(weft_model_params_init(&mp, sizeof mp));
  CHECK(mp.struct_size == sizeof mp && mp.use_mmap == 1 && mp.n_gpu_layers == 0 && mp.path == NULL);
  CHECK_OK(weft_executor_params_init(&ep, sizeof ep));
  CHECK(ep.n_ctx == 4096 && ep.n_batch == 512 && ep.n_seq_max == 16 && ep.kv_type == WEFT_KV_F16);
  CHECK(ep.pressure == WEFT_PRESSURE_WAIT && ep.events == 0 && ep.events_capacity == 65536);
  CHECK(ep.spill_ram_bytes == (1ull << 30) && ep.spill_disk_bytes == (8ull << 30) && ep.spill_recompute == 1 &&
        ep.spill_disk_dir == NULL);
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  CHECK(sp.temperature == 0.0f && sp.top_p == 1.0f && sp.penalty_last_n == 64 && sp.grammar == NULL);
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  CHECK(gp.max_tokens == 128 && gp.on_token == NULL && gp.n_stop == 0);
  CHECK_OK(weft_step_budget_init(&b, sizeof b));
  CHECK(b.max_tokens == 0 && b.max_time_us == 0 && b.deadline_us == 0);
  CHECK_OK(weft_worker_params_init(&wp, sizeof wp));
  CHECK(wp.idle_wait_ms == 100 && wp.budget == NULL);

  /* Sizes the library does not know, and NULL. */
  CHECK_ERR(weft_executor_params_init(&ep, sizeof ep - 4), WEFT_ERR_STRUCT_SIZE, "weft_executor_params.struct_size");
  CHECK_ERR(weft_model_params_init(&mp, 0), WEFT_ERR_STRUCT_SIZE, "struct_size = 0");
  CHECK_ERR(weft_sampler_params_init(&sp, sizeof sp + 8), WEFT_ERR_STRUCT_SIZE, "sizeof(weft_sampler_params)");
  CHECK_ERR(weft_generate_params_init(NULL, sizeof gp), WEFT_ERR_NULL_ARG, "`params`");
}

static int32_t g_progress_calls = 0;
static int32_t cancel_progress(float progress, void *user_data) {
  (void)progress;
  ++*(int32_t *)user_data;
  return 0;
}

static void test_model(void) {
  weft_model_params mp;
  weft_model *m = (weft_model *)&mp; /* must be reset to NULL on failure */
  weft_model_info info;
  weft_token toks[64];
  size_t n = 0, len = 0;
  char text[256];
  int32_t n_vocab = 0;
  weft_bool eog = 0;

  CHECK_OK(weft_model_params_init(&mp, sizeof mp));
  mp.path = "/nonexistent/weft-model.gguf";
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_NOT_FOUND, "/nonexistent/weft-model.gguf");
  CHECK(m == NULL);
  mp.path = NULL;
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_NULL_ARG, "path");
  mp.path = "/tmp"; /* a directory is named as one, not "does not exist" */
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_INVALID_ARGUMENT, "'/tmp' is a directory");
  CHECK(m == NULL);
  mp.path = __FILE__; /* a C file is not a GGUF */
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_CORRUPT, "");
  mp.path = g_model_path;
  mp.struct_size = 3;
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_STRUCT_SIZE, "weft_model_params.struct_size = 3");
  mp.struct_size = sizeof mp;
  mp.on_progress = cancel_progress;
  mp.progress_user_data = &g_progress_calls;
  mp.use_mmap = 0;  /* llama.cpp reports progress while reading */
  CHECK_ERR(weft_model_load(&mp, &m), WEFT_ERR_CANCELLED, "");
  CHECK(g_progress_calls >= 1);

  m = load_tiny();
  if (!m) return;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(weft_model_get_info(m, &info));
  CHECK(info.n_vocab == 32000 && info.n_layer == 2 && info.n_embd == 64 && info.bos == 1 && info.eos == 2);
  CHECK(info.fingerprint != 0 && info.n_params > 0);
  info.struct_size = 1;
  CHECK_ERR(weft_model_get_info(m, &info), WEFT_ERR_STRUCT_SIZE, "weft_model_info");
  CHECK_ERR(weft_model_get_info(m, NULL), WEFT_ERR_NULL_ARG, "");
  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  CHECK(n_vocab == 32000);

  /* Size query, then the real call. */
  CHECK_ERR(weft_model_tokenize(m, "Hello world", 11, WEFT_TEXT_ADD_BOS, NULL, 0, &n), WEFT_ERR_BUFFER_TOO_SMALL,
            "needs 3 elements");
  CHECK(n == 3);
  CHECK_OK(weft_model_tokenize(m, "Hello world", 11, WEFT_TEXT_ADD_BOS, toks, 64, &n));
  CHECK(n == 3 && toks[0] == 1 && toks[1] == 15043 && toks[2] == 3186);
  CHECK_OK(weft_model_tokenize(m, "", 0, 0, NULL, 0, &n));
  CHECK(n == 0);
  CHECK_ERR(weft_model_tokenize(m, NULL, 5, 0, toks, 64, &n), WEFT_ERR_NULL_ARG, "`text`");
  CHECK_ERR(weft_model_tokenize(m, "x", 1, 0x80, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "unknown bits 0x80");
  CHECK_ERR(weft_model_tokenize(m, "x", 1, 0, toks, 64, NULL), WEFT_ERR_NULL_ARG, "out_n");

  /* Invalid UTF-8 is refused with the offset; valid multi-byte text is fine. */
  CHECK_ERR(weft_model_tokenize(m, "\xff", 1, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 0 (0xff)");
  CHECK_ERR(weft_model_tokenize(m, "ab\xc0\xaf", 4, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 2");  /* overlong */
  CHECK_ERR(weft_model_tokenize(m, "\xed\xa0\x80", 3, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 0"); /* surrogate */
  CHECK_ERR(weft_model_tokenize(m, "ab\xe2\x82", 4, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 2 (0xe2) of 4");
  CHECK_ERR(weft_model_tokenize(m, "\xf4\x90\x80\x80", 4, 0, toks, 64, &n), WEFT_ERR_INVALID_ARGUMENT, "byte 0"); /* > U+10FFFF */
  CHECK_OK(weft_model_tokenize(m, "h\xc3\xa9llo \xe2\x82\xac \xf0\x9d\x84\x9e", 15, 0, toks, 64, &n));
  CHECK(n > 0);

  /* Round trip; text out needs room for the NUL. */
  CHECK_OK(weft_model_tokenize(m, "Hello world", 11, WEFT_TEXT_ADD_BOS, toks, 64, &n));
  CHECK_ERR(weft_model_detokenize(m, toks, n, WEFT_DETOK_REMOVE_SPECIAL, text, 0, &len), WEFT_ERR_BUFFER_TOO_SMALL,
            "plus a NUL");
  CHECK(len >= 11);
  CHECK_ERR(weft_model_detokenize(m, toks, n, WEFT_DETOK_REMOVE_SPECIAL, text, len, &len), WEFT_ERR_BUFFER_TOO_SMALL,
            "");
  CHECK_OK(weft_model_detokenize(m, toks, n, WEFT_DETOK_REMOVE_SPECIAL, text, len + 1, &len));
  CHECK(strlen(text) == len && strstr(text, "Hello world") != NULL);
  toks[1] = 32000;
  CHECK_ERR(weft_model_detokenize(m, toks, n, 0, text, sizeof text, &len), WEFT_ERR_OUT_OF_RANGE, "32000");
  CHECK_ERR(weft_model_detokenize(m, NULL, 2, 0, text, sizeof text, &len), WEFT_ERR_NULL_ARG, "tokens");

  CHECK_OK(weft_model_token_piece(m, 15043, 0, text, sizeof text, &len));
  CHECK(strcmp(text, " Hello") == 0 && len == 6);
  CHECK_ERR(weft_model_token_piece(m, -1, 0, text, sizeof text, &len), WEFT_ERR_OUT_OF_RANGE, "-1");
  CHECK_ERR(weft_model_token_piece(m, 5, WEFT_DETOK_REMOVE_SPECIAL, text, sizeof text, &len),
            WEFT_ERR_INVALID_ARGUMENT, "unknown bits");
  CHECK_OK(weft_model_is_eog(m, info.eos, &eog));
  CHECK(eog == 1);
  CHECK_OK(weft_model_is_eog(m, 15043, &eog));
  CHECK(eog == 0);
  CHECK_OK(weft_model_description(m, text, sizeof text, &len));
  CHECK(len > 0 && strstr(text, "llama") != NULL);
  CHECK_OK(weft_model_meta(m, "general.architecture", text, sizeof text, &len));
  CHECK(strcmp(text, "llama") == 0);
  CHECK_OK(weft_model_meta(m, "no.such.key", text, sizeof text, &len));
  CHECK(len == 0 && text[0] == '\0');
  CHECK_ERR(weft_model_meta(m, NULL, text, sizeof text, &len), WEFT_ERR_NULL_ARG, "key");
  CHECK_OK(weft_model_free(m));
}

static void test_handles(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL;
  int32_t n_vocab = 0;
  uint32_t n = 0;
  if (!m) return;
  ex = make_executor(m, 256, 2);
  CHECK_OK(weft_conversation_create(ex, &c));

  /* NULL, never-made, wrongly typed and freed handles: refused, not crashed. */
  CHECK_ERR(weft_model_n_vocab(NULL, &n_vocab), WEFT_ERR_NULL_ARG, "weft_model handle is NULL");
  CHECK_ERR(weft_model_n_vocab((weft_model *)(uintptr_t)0x1234, &n_vocab), WEFT_ERR_INVALID_HANDLE, "not live");
  CHECK_ERR(weft_model_n_vocab((const weft_model *)c, &n_vocab), WEFT_ERR_INVALID_HANDLE,
            "is a weft_conversation, not a weft_model");
  CHECK_ERR(weft_conversation_n_tokens((const weft_conversation *)ex, &n), WEFT_ERR_INVALID_HANDLE,
            "is a weft_executor, not a weft_conversation");
  CHECK_OK(weft_model_free(NULL));
  CHECK_OK(weft_conversation_free(c));
  CHECK_ERR(weft_conversation_n_tokens(c, &n), WEFT_ERR_INVALID_HANDLE, "weft_conversation handle");
  CHECK_ERR(weft_conversation_free(c), WEFT_ERR_INVALID_HANDLE, "already freed");
  CHECK_OK(weft_executor_free(ex));
  CHECK_ERR(weft_executor_step(ex, NULL, NULL), WEFT_ERR_INVALID_HANDLE, "weft_executor handle");
  CHECK_OK(weft_model_free(m));
  CHECK_ERR(weft_model_free(m), WEFT_ERR_INVALID_HANDLE, "weft_model handle");
}

static void test_executor_errors(void) {
  weft_model *m = load_tiny();
  weft_executor_params p;
  weft_executor *ex = (weft_executor *)&p;
  weft_step_budget b;
  weft_step_result r;
  weft_executor_stats st;
  uint32_t free_cells = 0;
  if (!m) return;
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.n_batch = 4;
  p.n_seq_max = 8;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "n_batch = 4");
  CHECK(ex == NULL);
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.kv_type = 9;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "kv_type = 9 is not a weft_kv_type");
  p.kv_type = WEFT_KV_F16;
  p.pressure = WEFT_PRESSURE_CALLBACK;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "on_pressure");
  p.pressure = -1;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "pressure = -1");
  p.pressure = WEFT_PRESSURE_WAIT;
  p.struct_size = sizeof p + 16;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_STRUCT_SIZE, "weft_executor_params");
  CHECK_ERR(weft_executor_create(NULL, NULL, &ex), WEFT_ERR_NULL_ARG, "weft_model handle is NULL");

  ex = make_executor(m, 256, 4);
  CHECK_OK(weft_step_budget_init(&b, sizeof b));
  b.max_tokens = 65;
  CHECK_ERR(weft_executor_step(ex, &b, NULL), WEFT_ERR_INVALID_ARGUMENT, "max_tokens = 65");
  b.max_tokens = 0;
  b.max_time_us = -5;
  CHECK_ERR(weft_executor_step(ex, &b, NULL), WEFT_ERR_INVALID_ARGUMENT, "max_time_us = -5");
  b.max_time_us = 0;
  b.deadline_us = -1;
  CHECK_ERR(weft_executor_step(ex, &b, NULL), WEFT_ERR_INVALID_ARGUMENT, "deadline_us = -1");
  r.struct_size = 8;
  CHECK_ERR(weft_executor_step(ex, NULL, &r), WEFT_ERR_STRUCT_SIZE, "weft_step_result");
  r.struct_size = sizeof r;
  CHECK_OK(weft_executor_step(ex, NULL, &r));
  CHECK(r.idle == 1 && r.tokens_decoded == 0 && r.deadline_hit == 0);
  CHECK_OK(weft_executor_step(ex, NULL, NULL));
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.n_ctx == 256 && st.cells_free == 256 && st.cells_used == 0 && st.n_seq_max == 4 && st.steps == 2);
  CHECK_OK(weft_executor_cells_free(ex, &free_cells));
  CHECK(free_cells == 256);
  CHECK_ERR(weft_executor_cells_free(ex, NULL), WEFT_ERR_NULL_ARG, "out");
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* max_tokens = 0 means n_batch (64 here), as in C++ and C#: for a step and
   for the worker's budget. */
static void test_budget_zero_is_n_batch(void) {
  enum { N = 100 };
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL;
  weft_token toks[N];
  weft_step_budget b;
  weft_step_result r;
  weft_worker_params wp;
  weft_executor_stats st;
  double t0;
  int i;
  if (!m) return;
  ex = make_executor(m, 512, 2);
  for (i = 0; i < N; ++i) toks[i] = 100 + i;
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_tokens(c, toks, N));
  CHECK_OK(weft_step_budget_init(&b, sizeof b));
  b.max_tokens = 0;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  CHECK_OK(weft_executor_step(ex, &b, &r));
  CHECK(r.tokens_decoded == 64);
  CHECK_OK(weft_worker_params_init(&wp, sizeof wp));
  wp.budget = &b;
  CHECK_OK(weft_executor_start(ex, &wp));
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  t0 = now_s();
  do {
    sleep_ms(2);
    CHECK_OK(weft_executor_get_stats(ex, &st));
  } while (st.queued_tokens > 0 && now_s() - t0 < 30);
  CHECK(st.queued_tokens == 0 && st.tokens_decoded == N);
  CHECK_OK(weft_executor_stop(ex));
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* Invariant 3 through the C ABI: fork, then prompt Y, equals a fresh
   conversation prompted with the whole history plus Y; then greedy
   continuations agree token for token. */
static void test_fork_equivalence(void) {
  enum { NV = 32000, BASE = 24, Y = 7, GREEDY = 8 };
  static float la[NV], lb[NV];
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *a = NULL, *b = NULL, *fresh = NULL;
  weft_token base[BASE + Y], got[BASE + Y + 1];
  weft_executor_stats st;
  size_t n = 0, i;
  uint32_t cells = 0;
  int step;
  weft_bool ready = 0;
  if (!m) return;
  ex = make_executor(m, 512, 4);
  base[0] = 1;
  for (i = 1; i < BASE + Y; ++i) base[i] = rand_token(NV);
  CHECK_OK(weft_conversation_create(ex, &a));
  CHECK_OK(weft_conversation_prompt_tokens(a, base, BASE));
  CHECK_OK(weft_conversation_has_logits(a, &ready));
  CHECK(ready == 0);
  CHECK_ERR(weft_conversation_logits(a, la, NV, &n), WEFT_ERR_INVALID_ARGUMENT, "no logits yet");
  run_until_idle(ex);
  CHECK_OK(weft_conversation_fork(a, &b));
  CHECK_OK(weft_conversation_tokens(b, got, BASE + Y + 1, &n));
  CHECK(n == BASE && memcmp(got, base, BASE * sizeof(weft_token)) == 0);
  CHECK_OK(weft_conversation_prompt_tokens(b, base + BASE, Y));
  CHECK_OK(weft_conversation_create(ex, &fresh));
  CHECK_OK(weft_conversation_prompt_tokens(fresh, base, BASE + Y));
  run_until_idle(ex);

  /* The prefix is shared: fewer cells than two private copies. */
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.cells_used == BASE + Y + (BASE + Y)); /* a, b's suffix, fresh */
  CHECK_OK(weft_conversation_n_cells(b, &cells));
  CHECK(cells == BASE + Y);

  CHECK_ERR(weft_conversation_logits(b, lb, 10, &n), WEFT_ERR_BUFFER_TOO_SMALL, "needs 32000 elements");
  CHECK(n == NV);
  for (step = 0; step < GREEDY; ++step) {
    double err, margin = 0, floor_sd;
    size_t ta, tb;
    weft_token next;
    CHECK(get_logits(b, la, NV) == NV);
    CHECK(get_logits(fresh, lb, NV) == NV);
    err = nmse(la, lb, NV);
    if (err >= LOGITS_TOLERANCE) failf(__FILE__, __LINE__, "fork vs fresh, step %d: nmse %g >= %g", step, err, LOGITS_TOLERANCE);
    ta = argmax(la, NV, &margin);
    tb = argmax(lb, NV, NULL);
    floor_sd = sqrt(2e-8) * rms(lb, NV);
    if (margin > MARGIN_SIGMAS * floor_sd && ta != tb) failf(__FILE__, __LINE__, "greedy differs at step %d", step);
    /* sample() with the default greedy sampler is the argmax. */
    CHECK_OK(weft_conversation_sample(b, &next));
    CHECK((size_t)next == ta);
    CHECK_OK(weft_conversation_prompt_tokens(b, &next, 1));
    CHECK_OK(weft_conversation_prompt_tokens(fresh, &next, 1));
    run_until_idle(ex);
  }
  CHECK_OK(weft_conversation_free(a));
  CHECK_OK(weft_conversation_free(b));
  CHECK_OK(weft_conversation_free(fresh));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* Invariant 4: prompt A+B, rewind |B|, prompt C equals A+C. Plus remove,
   shift and their range errors. */
static void test_rewind_remove_shift(void) {
  enum { NV = 32000, A = 20, B = 9, C = 5 };
  static float l1[NV], l2[NV];
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL, *ref = NULL;
  weft_token a[A], bb[B], cc[C], ac[A + C];
  uint32_t n = 0;
  size_t i;
  if (!m) return;
  ex = make_executor(m, 512, 4);
  a[0] = 1;
  for (i = 1; i < A; ++i) a[i] = rand_token(NV);
  for (i = 0; i < B; ++i) bb[i] = rand_token(NV);
  for (i = 0; i < C; ++i) cc[i] = rand_token(NV);
  memcpy(ac, a, sizeof a);
  memcpy(ac + A, cc, sizeof cc);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_tokens(c, a, A));
  CHECK_OK(weft_conversation_prompt_tokens(c, bb, B));
  run_until_idle(ex);
  CHECK_ERR(weft_conversation_rewind(c, A + B + 1), WEFT_ERR_OUT_OF_RANGE, "cannot rewind 30 tokens, it has 29");
  CHECK_OK(weft_conversation_rewind(c, B));
  CHECK_OK(weft_conversation_prompt_tokens(c, cc, C));
  CHECK_OK(weft_conversation_create(ex, &ref));
  CHECK_OK(weft_conversation_prompt_tokens(ref, ac, A + C));
  run_until_idle(ex);
  CHECK(get_logits(c, l1, NV) == NV && get_logits(ref, l2, NV) == NV);
  CHECK(nmse(l1, l2, NV) < LOGITS_TOLERANCE);

  CHECK_ERR(weft_conversation_remove(c, 5, 4), WEFT_ERR_OUT_OF_RANGE, "range [5, 4)");
  CHECK_ERR(weft_conversation_remove(c, 0, A + C + 1), WEFT_ERR_OUT_OF_RANGE, "decoded tokens");
  CHECK_OK(weft_conversation_shift_left(c, 4, 6));
  CHECK_OK(weft_conversation_n_tokens(c, &n));
  CHECK(n == A + C - 6);
  CHECK_ERR(weft_conversation_shift_left(c, 0xFFFFFFFFu, 2), WEFT_ERR_OUT_OF_RANGE, "overflows");
  CHECK_OK(weft_conversation_remove(c, 1, 3));
  CHECK_OK(weft_conversation_n_tokens(c, &n));
  CHECK(n == A + C - 8);
  run_until_idle(ex);
  CHECK_OK(weft_conversation_n_decoded(c, &n));
  CHECK(n == A + C - 8);
  CHECK_OK(weft_conversation_n_queued(c, &n));
  CHECK(n == 0);
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(ref));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* What a token callback saw. */
typedef struct Collected {
  weft_token tokens[256];
  size_t n_tokens;
  char text[4096];
  size_t text_len;
  int bad_text;
} Collected;

static void collect_token(weft_token token, const char *text, size_t len, void *user_data) {
  Collected *c = (Collected *)user_data;
  if (strlen(text) != len) c->bad_text = 1; /* NUL-terminated at len */
  if (c->n_tokens < 256) c->tokens[c->n_tokens++] = token;
  if (c->text_len + len < sizeof c->text) {
    memcpy(c->text + c->text_len, text, len);
    c->text_len += len;
    c->text[c->text_len] = '\0';
  }
}

static int g_freed = 0;
static void count_free(void *user_data) {
  (void)user_data;
  ++g_freed;
}

static char *generation_text(weft_generation *g, size_t *len) {
  char *buf;
  CHECK_ERR(weft_generation_text(g, NULL, 0, len), WEFT_ERR_BUFFER_TOO_SMALL, "plus a NUL");
  buf = (char *)malloc(*len + 1);
  CHECK_OK(weft_generation_text(g, buf, *len + 1, len));
  return buf;
}

/* The first offset from `from` of three printable ASCII bytes in a row; len if none. */
static size_t find_ascii3(const char *t, size_t len, size_t from) {
  size_t at, k;
  for (at = from; at + 3 <= len; ++at) {
    for (k = 0; k < 3 && t[at + k] > 32 && t[at + k] < 127; ++k) {
    }
    if (k == 3) return at;
  }
  return len;
}

static void step_until_done(weft_executor *ex, weft_generation *g) {
  weft_bool done = 0;
  int guard = 0;
  do {
    CHECK_OK(weft_executor_step(ex, NULL, NULL));
    CHECK_OK(weft_generation_is_done(g, &done));
  } while (!done && ++guard < 10000);
  CHECK(done);
}

static void test_generation(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL, *f1 = NULL, *f2 = NULL, *empty = NULL;
  weft_generation *g = NULL, *g2 = NULL, *cur = NULL;
  weft_generate_params gp;
  weft_sampler_params sp;
  Collected col;
  weft_token toks[64];
  size_t n = 0, len = 0, len2 = 0, at = 0;
  uint32_t before = 0, after = 0;
  int32_t reason = -1;
  weft_status code = WEFT_ERR_INTERNAL;
  char *text, *text2, stop[8];
  const char *stops[1];
  const char *bad_stops[1];
  char msg[8];
  if (!m) return;
  ex = make_executor(m, 1024, 4);
  memset(&col, 0, sizeof col);

  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "Once upon a time", 16, WEFT_TEXT_ADD_BOS));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_n_tokens(c, &before));

  /* Failures leave user_data with the caller: its free function is not called. */
  g_freed = 0;
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  gp.on_token = collect_token;
  gp.user_data = &col;
  gp.user_data_free = count_free;
  CHECK_OK(weft_conversation_create(ex, &empty));
  CHECK_ERR(weft_conversation_generate(empty, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "is empty");
  CHECK(g == NULL);
  gp.max_tokens = 0;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "max_tokens = 0");
  gp.max_tokens = 12;
  gp.n_stop = 1;
  gp.stop = NULL;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_NULL_ARG, "stop");
  bad_stops[0] = "ok\xc3";
  gp.stop = bad_stops;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "stop[0]` is not valid UTF-8");
  bad_stops[0] = "";
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "");
  gp.n_stop = 0;
  gp.stop = NULL;
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  sp.temperature = -1.0f;
  gp.sampler = &sp;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "temperature");
  gp.sampler = NULL;
  CHECK(g_freed == 0);

  /* Fork twice before generating: both forks continue identically (greedy,
     each stepped alone on the same cache layout, f1 freed before f2 runs),
     so the second run can stop on a string the first produced. */
  CHECK_OK(weft_conversation_fork(c, &f1));
  CHECK_OK(weft_conversation_fork(c, &f2));
  CHECK_OK(weft_conversation_generate(f1, &gp, &g));
  CHECK_ERR(weft_conversation_generate(f1, NULL, &g2), WEFT_ERR_INVALID_ARGUMENT, "already generating");
  CHECK_ERR(weft_conversation_prompt_text(f1, "x", 1, 0), WEFT_ERR_INVALID_ARGUMENT, "is generating");
  CHECK_OK(weft_conversation_generation(f1, &cur));
  CHECK(cur != NULL && cur != g);
  CHECK_OK(weft_generation_reason(cur, &reason));
  CHECK(reason == WEFT_FINISH_RUNNING);
  step_until_done(ex, g);
  CHECK_OK(weft_generation_reason(cur, &reason)); /* both handles see one generation */
  CHECK(reason == WEFT_FINISH_MAX_TOKENS);
  CHECK_OK(weft_generation_free(cur));
  CHECK_OK(weft_conversation_generation(f1, &cur));
  CHECK(cur == NULL);
  CHECK_OK(weft_generation_n_tokens(g, &n));
  CHECK(n == 12);
  CHECK_OK(weft_generation_tokens(g, toks, 64, &n));
  CHECK(n == 12 && col.n_tokens == 12 && memcmp(toks, col.tokens, n * sizeof(weft_token)) == 0);
  CHECK(col.bad_text == 0);
  text = generation_text(g, &len);
  CHECK(len == col.text_len && memcmp(text, col.text, len) == 0);
  CHECK_OK(weft_generation_error(g, &code, msg, sizeof msg, &n));
  CHECK(code == WEFT_OK && n == 0 && msg[0] == '\0');
  /* Every sampled token joined the conversation. */
  CHECK_OK(weft_conversation_n_tokens(f1, &after));
  CHECK(after == before + 12);
  /* The free function runs once the last holder of the callback is gone. */
  CHECK(g_freed == 0);
  CHECK_OK(weft_generation_free(g));
  CHECK(g_freed == 1);
  CHECK_OK(weft_conversation_free(f1));
  f1 = NULL;

  /* Stop on a string from the middle of the first run's text (three ASCII
     bytes, so the stop string is valid UTF-8). */
  at = find_ascii3(text, len, len / 2);
  if (at == len) at = find_ascii3(text, len, 0);
  if (at < len) {
    memcpy(stop, text + at, 3);
    stop[3] = '\0';
  }
  if (at < len) {
    const char *hit;
    size_t prefix;
    hit = strstr(text, stop);
    prefix = (size_t)(hit - text);
    stops[0] = stop;
    gp.stop = stops;
    gp.n_stop = 1;
    gp.on_token = NULL;
    CHECK_OK(weft_conversation_generate(f2, &gp, &g2));
    step_until_done(ex, g2);
    CHECK_OK(weft_generation_reason(g2, &reason));
    CHECK(reason == WEFT_FINISH_STOP_STRING);
    text2 = generation_text(g2, &len2);
    CHECK(len2 == prefix && memcmp(text2, text, prefix) == 0);
    free(text2);
    CHECK_OK(weft_generation_free(g2));
  } else {
    failf(__FILE__, __LINE__, "no three ASCII characters in a row in the first generation's text");
  }
  free(text);

  /* Cancel, and a generation with its own seeded sampler. */
  gp.stop = NULL;
  gp.n_stop = 0;
  gp.max_tokens = 100;
  sp.temperature = 0.9f;
  sp.seed = 42;
  gp.sampler = &sp;
  CHECK_OK(weft_conversation_generate(c, &gp, &g));
  CHECK_OK(weft_executor_step(ex, NULL, NULL));
  CHECK_OK(weft_generation_cancel(g));
  CHECK_OK(weft_generation_reason(g, &reason));
  CHECK(reason == WEFT_FINISH_CANCELLED);
  CHECK_OK(weft_generation_cancel(g)); /* idempotent */
  CHECK_OK(weft_generation_free(g));

  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(f1));
  CHECK_OK(weft_conversation_free(f2));
  CHECK_OK(weft_conversation_free(empty));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

static void test_sampler(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL, *f1 = NULL, *f2 = NULL;
  weft_sampler_params sp;
  weft_token t1[6], t2[6];
  int i;
  if (!m) return;
  ex = make_executor(m, 512, 4);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "The king said", 13, WEFT_TEXT_ADD_BOS));
  run_until_idle(ex);
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  sp.top_p = 0.0f;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "top_p");
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  sp.grammar = "root ::= (";
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "grammar");
  sp.grammar = "root ::= \"\xff\"";
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "grammar` is not valid UTF-8");
  sp.grammar = NULL;
  CHECK_ERR(weft_conversation_set_sampler(c, NULL), WEFT_ERR_NULL_ARG, "params");
  /* A seeded sampler is part of the state a fork copies: both forks draw
     the same tokens from the same logits. */
  sp.temperature = 1.0f;
  sp.seed = 7;
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  CHECK_OK(weft_conversation_set_priority(c, 5));
  CHECK_OK(weft_conversation_fork(c, &f1));
  CHECK_OK(weft_conversation_fork(c, &f2));
  for (i = 0; i < 6; ++i) {
    CHECK_OK(weft_conversation_sample(f1, &t1[i]));
    CHECK_OK(weft_conversation_sample(f2, &t2[i]));
  }
  CHECK(memcmp(t1, t2, sizeof t1) == 0);
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(f1));
  CHECK_OK(weft_conversation_free(f2));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

static void test_dispose_and_executor_gone(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL, *d = NULL, *e = NULL;
  weft_generation *g = NULL;
  weft_generate_params gp;
  weft_bool disposed = 0, done = 0;
  int32_t reason = -1;
  uint64_t id1 = 0, id2 = 0;
  size_t n = 0, len = 0;
  char buf[64];
  if (!m) return;
  ex = make_executor(m, 256, 4);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_create(ex, &d));
  CHECK_OK(weft_conversation_id(c, &id1));
  CHECK_OK(weft_conversation_id(d, &id2));
  CHECK(id1 != id2);
  CHECK_ERR(weft_conversation_prompt_tokens(c, NULL, 0), WEFT_ERR_INVALID_ARGUMENT, "empty prompt");
  CHECK_ERR(weft_conversation_prompt_text(c, "", 0, 0), WEFT_ERR_INVALID_ARGUMENT, "gives no tokens");
  CHECK_ERR(weft_conversation_prompt_tokens(c, NULL, 3), WEFT_ERR_NULL_ARG, "tokens");
  {
    weft_token bad = 40000;
    CHECK_ERR(weft_conversation_prompt_tokens(c, &bad, 1), WEFT_ERR_OUT_OF_RANGE, "40000");
  }
  CHECK_OK(weft_conversation_dispose(c));
  CHECK_OK(weft_conversation_dispose(c)); /* idempotent */
  CHECK_OK(weft_conversation_is_disposed(c, &disposed));
  CHECK(disposed == 1);
  CHECK_ERR(weft_conversation_prompt_text(c, "hi", 2, 0), WEFT_ERR_DISPOSED, "was disposed");
  CHECK_OK(weft_conversation_free(c));

  /* Freeing the executor first: conversations then say DISPOSED, a
     generation stays readable (cancelled). */
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  CHECK_OK(weft_conversation_prompt_text(d, "Hello", 5, WEFT_TEXT_ADD_BOS));
  CHECK_OK(weft_conversation_generate(d, &gp, &g));
  CHECK_OK(weft_executor_step(ex, NULL, NULL));
  CHECK_OK(weft_executor_free(ex));
  CHECK_ERR(weft_conversation_prompt_text(d, "hi", 2, 0), WEFT_ERR_DISPOSED, "executor was destroyed");
  CHECK_ERR(weft_conversation_fork(d, &e), WEFT_ERR_DISPOSED, "");
  CHECK(e == NULL);
  CHECK_OK(weft_conversation_is_disposed(d, &disposed));
  CHECK(disposed == 1);
  CHECK_OK(weft_generation_wait(g, 1000, &done));
  CHECK(done == 1);
  CHECK_OK(weft_generation_reason(g, &reason));
  CHECK(reason == WEFT_FINISH_CANCELLED);
  CHECK_OK(weft_generation_text(g, buf, sizeof buf, &len));
  {
    /* Size query: OK only when there is nothing to copy. */
    const weft_status s = weft_generation_tokens(g, NULL, 0, &n);
    CHECK(s == (n == 0 ? WEFT_OK : WEFT_ERR_BUFFER_TOO_SMALL) && n <= 1);
  }
  CHECK_OK(weft_conversation_free(d));
  CHECK_OK(weft_generation_free(g));
  CHECK_OK(weft_model_free(m));
}

/* Pressure callback: its conversation handle is borrowed, it can dispose
   another conversation to make room, and its user_data is freed once. */
typedef struct PressureCtx {
  weft_conversation *victim;
  weft_conversation *seen;
  uint64_t seen_id;
  uint32_t needed, free_cells;
  int calls;
} PressureCtx;

static void on_pressure(weft_conversation *conv, uint32_t needed, uint32_t free_cells, void *user_data) {
  PressureCtx *p = (PressureCtx *)user_data;
  ++p->calls;
  p->seen = conv;
  p->needed = needed;
  p->free_cells = free_cells;
  CHECK_OK(weft_conversation_id(conv, &p->seen_id));
  CHECK_OK(weft_conversation_dispose(p->victim)); /* applied at once on the stepping thread */
}

static void test_pressure(void) {
  enum { NV = 32000 };
  weft_model *m = load_tiny();
  weft_executor_params p;
  weft_executor *ex = NULL;
  weft_conversation *big = NULL, *small = NULL;
  weft_token toks[200];
  PressureCtx ctx;
  uint64_t small_id = 0;
  uint32_t n = 0;
  size_t i;
  if (!m) return;
  memset(&ctx, 0, sizeof ctx);
  for (i = 0; i < 200; ++i) toks[i] = rand_token(NV);
  g_freed = 0;
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.n_ctx = 256;
  p.n_batch = 256;
  p.n_seq_max = 4;
  p.n_threads = 2;
  p.spill_ram_bytes = 0; /* no parking: the pressure policy applies */
  p.spill_recompute = 0;
  p.pressure = WEFT_PRESSURE_CALLBACK;
  p.on_pressure = on_pressure;
  p.pressure_user_data = &ctx;
  p.pressure_user_data_free = count_free;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  CHECK_OK(weft_conversation_create(ex, &big));
  CHECK_OK(weft_conversation_create(ex, &small));
  CHECK_OK(weft_conversation_id(small, &small_id));
  ctx.victim = big;
  CHECK_OK(weft_conversation_prompt_tokens(big, toks, 200));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_prompt_tokens(small, toks, 100));
  run_until_idle(ex);
  CHECK(ctx.calls == 1 && ctx.seen_id == small_id && ctx.needed == 100 && ctx.free_cells == 56);
  CHECK_OK(weft_conversation_n_decoded(small, &n));
  CHECK(n == 100);
  CHECK_ERR(weft_conversation_id(ctx.seen, &small_id), WEFT_ERR_INVALID_HANDLE, "not live"); /* borrowed */
  CHECK_ERR(weft_conversation_n_tokens(big, &n), WEFT_ERR_DISPOSED, "disposed");
  CHECK_OK(weft_conversation_free(big));
  CHECK_OK(weft_conversation_free(small));
  CHECK(g_freed == 0);
  CHECK_OK(weft_executor_free(ex));
  CHECK(g_freed == 1);

  /* PRESSURE_FAIL refuses what cannot fit now, at prompt time. */
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.n_ctx = 256;
  p.n_batch = 256;
  p.n_seq_max = 4;
  p.n_threads = 2;
  p.spill_ram_bytes = 0;
  p.spill_recompute = 0;
  p.pressure = WEFT_PRESSURE_FAIL;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  CHECK_OK(weft_conversation_create(ex, &big));
  CHECK_OK(weft_conversation_create(ex, &small));
  CHECK_OK(weft_conversation_prompt_tokens(big, toks, 200));
  CHECK_ERR(weft_conversation_prompt_tokens(small, toks, 100), WEFT_ERR_OUT_OF_RANGE, "do not fit");
  {
    weft_status code = WEFT_ERR_INTERNAL;
    char msg[4];
    size_t len = 99;
    CHECK_OK(weft_conversation_error(small, &code, msg, sizeof msg, &len));
    CHECK(code == WEFT_OK && len == 0);
    CHECK_OK(weft_conversation_error(small, &code, NULL, 0, &len));
    CHECK_OK(weft_conversation_clear_error(small));
  }
  CHECK_OK(weft_conversation_free(big));
  CHECK_OK(weft_conversation_free(small));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* Invariant 5 through the C ABI: save, load (same or another executor),
   continue: same logits and sampler draws as never saved. Bad state is
   refused with a code, the executor unchanged. */
static weft_bytes *save(weft_conversation *c, const uint8_t **data, size_t *size) {
  weft_bytes *b = NULL;
  CHECK_OK(weft_conversation_save(c, &b));
  CHECK_OK(weft_bytes_data(b, data, size));
  return b;
}

static void test_state(void) {
  enum { NV = 32000, H = 30, X = 6 };
  static float l1[NV], l2[NV];
  static uint8_t corrupt[1 << 20];
  weft_model *m = load_tiny();
  weft_executor *ex, *other;
  weft_conversation *c = NULL, *back = NULL, *far = NULL, *ff = NULL, *none = (weft_conversation *)&l1;
  weft_conversation *convs[3];
  weft_conversation_list *list = NULL;
  weft_sampler_params sp;
  weft_bytes *b, *all;
  const uint8_t *data = NULL;
  size_t size = 0, n = 0, i;
  weft_token h[H], x[X], got[H + X + 1], t1, t2, t3;
  uint64_t ids[3];
  char path[256];
  if (!m) return;
  ex = make_executor(m, 512, 4);
  other = make_executor(m, 1024, 8); /* other n_ctx and slots: allowed */
  h[0] = 1;
  for (i = 1; i < H; ++i) h[i] = rand_token(NV);
  for (i = 0; i < X; ++i) x[i] = rand_token(NV);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_tokens(c, h, H));
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  sp.temperature = 0.8f;
  sp.seed = 99;
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  run_until_idle(ex);

  b = save(c, &data, &size);
  CHECK(size > 0 && data != NULL);
  CHECK_OK(weft_executor_load(ex, data, size, &back));
  CHECK_OK(weft_executor_load(other, data, size, &far));
  CHECK_OK(weft_conversation_tokens(back, got, H + X + 1, &n));
  CHECK(n == H && memcmp(got, h, sizeof h) == 0);
  /* Logits and sampler state travel: the same draw at once. */
  CHECK(get_logits(c, l1, NV) == NV && get_logits(far, l2, NV) == NV);
  CHECK(nmse(l1, l2, NV) < LOGITS_TOLERANCE);
  CHECK_OK(weft_conversation_sample(c, &t1));
  CHECK_OK(weft_conversation_sample(back, &t2));
  CHECK_OK(weft_conversation_sample(far, &t3));
  CHECK(t1 == t2 && t1 == t3);
  /* And they continue alike. */
  CHECK_OK(weft_conversation_prompt_tokens(c, x, X));
  CHECK_OK(weft_conversation_prompt_tokens(back, x, X));
  CHECK_OK(weft_conversation_prompt_tokens(far, x, X));
  run_until_idle(ex);
  run_until_idle(other);
  CHECK(get_logits(c, l1, NV) == NV);
  CHECK(get_logits(back, l2, NV) == NV && nmse(l1, l2, NV) < LOGITS_TOLERANCE);
  CHECK(get_logits(far, l2, NV) == NV && nmse(l1, l2, NV) < LOGITS_TOLERANCE);

  /* A file, written atomically. */
  sprintf(path, "/tmp/weft-c-api-%ld.state", (long)getpid());
  CHECK_OK(weft_conversation_save_file(c, path));
  CHECK_OK(weft_executor_load_file(other, path, &ff));
  CHECK_OK(weft_conversation_n_tokens(ff, (uint32_t *)&t1));
  CHECK(t1 == H + X);
  remove(path);
  CHECK_ERR(weft_executor_load_file(other, path, &none), WEFT_ERR_NOT_FOUND, "");
  CHECK(none == NULL);
  CHECK_ERR(weft_conversation_save_file(c, "/nonexistent-dir/x.state"), WEFT_ERR_IO, "");
  CHECK_ERR(weft_conversation_save_file(c, NULL), WEFT_ERR_NULL_ARG, "path");

  /* Bad bytes: refused, nothing added. */
  if (size <= sizeof corrupt) {
    memcpy(corrupt, data, size);
    for (i = 0; i < size; i += 97) corrupt[i] ^= 0x5a;
    CHECK_ERR(weft_executor_load(ex, corrupt, size, &none), WEFT_ERR_CORRUPT, "");
    CHECK_ERR(weft_executor_load(ex, data, size / 2, &none), WEFT_ERR_CORRUPT, "");
  }
  CHECK_ERR(weft_executor_load(ex, NULL, 0, &none), WEFT_ERR_CORRUPT, "");
  CHECK_ERR(weft_executor_load(ex, NULL, 10, &none), WEFT_ERR_NULL_ARG, "data");
  {
    weft_executor_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_OK(weft_executor_get_stats(ex, &st));
    CHECK(st.conversations == 2);
  }
  CHECK_OK(weft_bytes_free(b));
  CHECK_ERR(weft_bytes_data(b, &data, &size), WEFT_ERR_INVALID_HANDLE, "weft_bytes");

  /* Every conversation at once, into another executor. */
  CHECK_OK(weft_executor_save_all(ex, &all));
  CHECK_OK(weft_bytes_data(all, &data, &size));
  CHECK_OK(weft_executor_load_all(other, data, size, &list));
  CHECK_OK(weft_conversation_list_count(list, &n));
  CHECK(n == 2);
  for (i = 0; i < n && i < 3; ++i) {
    uint32_t count = 0;
    CHECK_OK(weft_conversation_list_get(list, i, &ids[i], &convs[i]));
    CHECK_OK(weft_conversation_n_tokens(convs[i], &count));
    CHECK(count == H + X);
  }
  CHECK(n < 2 || ids[0] != ids[1]);
  CHECK_ERR(weft_conversation_list_get(list, n, &ids[0], &none), WEFT_ERR_OUT_OF_RANGE, "past the list");
  CHECK_OK(weft_conversation_list_free(list)); /* the handles taken stay valid */
  for (i = 0; i < n && i < 3; ++i) {
    weft_bool ready = 0;
    CHECK_OK(weft_conversation_has_logits(convs[i], &ready));
    CHECK(ready == 1);
    CHECK_OK(weft_conversation_free(convs[i]));
  }
  CHECK_ERR(weft_executor_load_all(other, data, size / 3, &list), WEFT_ERR_CORRUPT, "");
  CHECK(list == NULL);
  CHECK_OK(weft_bytes_free(all));

  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(back));
  CHECK_OK(weft_conversation_free(far));
  CHECK_OK(weft_conversation_free(ff));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_executor_free(other));
  CHECK_OK(weft_model_free(m));
}

/* Parking: a hint moves a conversation to RAM; its next input brings it
   back, with the same logits as if it had stayed. */
static void test_residency(void) {
  enum { NV = 32000, H = 25 };
  static float l1[NV], l2[NV];
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL, *ref = NULL, *empty = NULL;
  weft_executor_stats st;
  weft_token h[H + 1];
  weft_bool parked = 0;
  int32_t where = -1;
  size_t i;
  if (!m) return;
  ex = make_executor(m, 512, 4);
  h[0] = 1;
  for (i = 1; i <= H; ++i) h[i] = rand_token(NV);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_create(ex, &empty));
  CHECK_OK(weft_conversation_prompt_tokens(c, h, H));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_residency(c, &where));
  CHECK(where == WEFT_RESIDENCY_RESIDENT);
  CHECK(strcmp(weft_residency_name(WEFT_RESIDENCY_RAM), "ram") == 0 && strcmp(weft_residency_name(9), "unknown") == 0);
  CHECK_OK(weft_conversation_park(empty, &parked)); /* nothing decoded: holds no cells already */
  CHECK(parked == 1);
  CHECK_OK(weft_conversation_residency(empty, &where));
  CHECK(where == WEFT_RESIDENCY_RESIDENT);
  CHECK_OK(weft_conversation_park(c, &parked));
  CHECK(parked == 1);
  CHECK_OK(weft_conversation_residency(c, &where));
  CHECK(where == WEFT_RESIDENCY_RAM);
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.parked_ram == 1 && st.parks == 1 && st.ram_bytes > 0 && st.cells_used == 0);
  CHECK_OK(weft_conversation_prompt_tokens(c, h + H, 1));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_residency(c, &where));
  CHECK(where == WEFT_RESIDENCY_RESIDENT);
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.restores == 1 && st.parked_ram == 0);
  CHECK_OK(weft_conversation_create(ex, &ref));
  CHECK_OK(weft_conversation_prompt_tokens(ref, h, H + 1));
  run_until_idle(ex);
  CHECK(get_logits(c, l1, NV) == NV && get_logits(ref, l2, NV) == NV);
  CHECK(nmse(l1, l2, NV) < LOGITS_TOLERANCE);
  CHECK_OK(weft_conversation_park(c, &parked));
  CHECK_OK(weft_conversation_prefetch(c));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_residency(c, &where));
  CHECK(where == WEFT_RESIDENCY_RESIDENT);
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(ref));
  CHECK_OK(weft_conversation_free(empty));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* The worker steps; this thread only polls events, as a game's main thread. */
static void test_worker_and_events(void) {
  enum { N = 4, MAXT = 10 };
  weft_model *m = load_tiny();
  weft_executor_params p;
  weft_executor *ex = NULL;
  weft_conversation *c[N];
  weft_generation *g[N];
  weft_generate_params gp;
  weft_worker_params wp;
  weft_step_budget wb;
  weft_executor_stats st;
  weft_bool running = 0;
  uint64_t ids[N];
  size_t n_tok_events[N], text_len[N];
  static char text[N][4096];
  int finished[N], finished_total = 0, i;
  double t0;
  weft_event ev;
  if (!m) return;
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.n_ctx = 1024;
  p.n_batch = 64;
  p.n_seq_max = 8;
  p.n_threads = 2;
  p.events = 1;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  gp.max_tokens = MAXT;
  for (i = 0; i < N; ++i) {
    char prompt[32];
    int len = sprintf(prompt, "NPC %d says:", i);
    CHECK_OK(weft_conversation_create(ex, &c[i]));
    CHECK_OK(weft_conversation_id(c[i], &ids[i]));
    CHECK_OK(weft_conversation_prompt_text(c[i], prompt, (size_t)len, WEFT_TEXT_ADD_BOS));
    CHECK_OK(weft_conversation_generate(c[i], &gp, &g[i]));
    n_tok_events[i] = text_len[i] = 0;
    finished[i] = 0;
  }
  CHECK_OK(weft_worker_params_init(&wp, sizeof wp));
  CHECK_OK(weft_step_budget_init(&wb, sizeof wb));
  wb.deadline_us = 1000;
  wp.budget = &wb;
  CHECK_ERR(weft_executor_start(ex, &wp), WEFT_ERR_INVALID_ARGUMENT, "take no deadline");
  wb.deadline_us = 0;
  wb.max_tokens = 16;
  wp.idle_wait_ms = 5;
  CHECK_OK(weft_executor_start(ex, &wp));
  CHECK_ERR(weft_executor_start(ex, NULL), WEFT_ERR_INVALID_ARGUMENT, "");
  CHECK_OK(weft_executor_is_running(ex, &running));
  CHECK(running == 1);

  t0 = now_s();
  while (finished_total < N && now_s() - t0 < 60) {
    weft_event_list *list = NULL;
    size_t count = 0, k;
    CHECK_OK(weft_executor_poll_events(ex, 0, &list));
    CHECK_OK(weft_event_list_count(list, &count));
    for (k = 0; k < count; ++k) {
      int who = -1, j;
      memset(&ev, 0, sizeof ev);
      ev.struct_size = sizeof ev;
      CHECK_OK(weft_event_list_get(list, k, &ev));
      for (j = 0; j < N; ++j) {
        if (ids[j] == ev.conversation) who = j;
      }
      CHECK(who >= 0);
      if (who < 0) continue;
      CHECK(strlen(ev.text) == ev.text_len && ev.error_code == WEFT_OK && ev.error_message[0] == '\0');
      if (ev.kind == WEFT_EVENT_TOKEN) {
        CHECK(ev.token >= 0 && !finished[who]);
        ++n_tok_events[who];
        if (text_len[who] + ev.text_len < sizeof text[who]) {
          memcpy(text[who] + text_len[who], ev.text, ev.text_len);
          text_len[who] += ev.text_len;
        }
      } else if (ev.kind == WEFT_EVENT_FINISHED) {
        CHECK(ev.reason == WEFT_FINISH_MAX_TOKENS && ev.token == -1);
        finished[who] = 1;
        ++finished_total;
      } else {
        failf(__FILE__, __LINE__, "unexpected event kind %d", ev.kind);
      }
    }
    if (count > 0) {
      ev.struct_size = 4;
      CHECK_ERR(weft_event_list_get(list, 0, &ev), WEFT_ERR_STRUCT_SIZE, "weft_event");
      ev.struct_size = sizeof ev;
    }
    CHECK_ERR(weft_event_list_get(list, count, &ev), WEFT_ERR_OUT_OF_RANGE, "past the list");
    CHECK_OK(weft_event_list_free(list));
    sleep_ms(2); /* a frame */
  }
  CHECK(finished_total == N);
  for (i = 0; i < N; ++i) {
    size_t len = 0;
    char *t = generation_text(g[i], &len);
    CHECK(n_tok_events[i] == MAXT);
    CHECK(len == text_len[i] && memcmp(t, text[i], len) == 0);
    free(t);
  }
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.worker_running == 1 && st.events_dropped == 0 && st.tokens_sampled == N * MAXT);
  CHECK_OK(weft_executor_stop(ex));
  CHECK_OK(weft_executor_stop(ex)); /* idempotent */
  CHECK_OK(weft_executor_is_running(ex, &running));
  CHECK(running == 0);

  /* A hard deadline already past: nothing decoded, nothing lost. */
  {
    weft_step_budget b;
    weft_step_result r;
    weft_token toks[100];
    uint32_t queued = 0, queued_before = 0, total = 0;
    size_t k;
    for (k = 0; k < 100; ++k) toks[k] = rand_token(32000);
    CHECK_OK(weft_conversation_prompt_tokens(c[0], toks, 100));
    CHECK_OK(weft_conversation_n_tokens(c[0], &total));
    CHECK_OK(weft_conversation_n_queued(c[0], &queued_before));
    CHECK(queued_before >= 100);
    CHECK_OK(weft_step_budget_init(&b, sizeof b));
    b.deadline_us = 1;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    CHECK_OK(weft_executor_step(ex, &b, &r));
    /* Already late when the step began: nothing; else only its first
       micro-batch, which always completes. Either way nothing is lost. */
    CHECK(r.tokens_decoded > 0 || r.deadline_hit == 1);
    CHECK_OK(weft_conversation_n_queued(c[0], &queued));
    CHECK(queued + r.tokens_decoded == queued_before);
    b.deadline_us = 0;
    b.max_time_us = 2000;
    CHECK_OK(weft_executor_step(ex, &b, &r));
    CHECK(r.tokens_decoded >= 1);
    run_until_idle(ex);
    CHECK_OK(weft_conversation_n_queued(c[0], &queued));
    CHECK(queued == 0);
    CHECK_OK(weft_conversation_n_decoded(c[0], &queued));
    CHECK(queued == total);
  }
  for (i = 0; i < N; ++i) {
    CHECK_OK(weft_generation_free(g[i]));
    CHECK_OK(weft_conversation_free(c[i]));
  }
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* --- Threads ------------------------------------------------------------- */

typedef struct ThreadArgs {
  weft_executor *ex;
  weft_conversation *conv;
  int index;
  int done_generations;
  Collected col;
  weft_status worst;
  int callbacks_over;
  int stop; /* under g_cb_mu */
} ThreadArgs;

/* Set by user_data_free: weft will not call this thread's callback again. */
static pthread_mutex_t g_cb_mu = PTHREAD_MUTEX_INITIALIZER;
static void mark_callbacks_over(void *user_data) {
  ThreadArgs *t = (ThreadArgs *)user_data;
  pthread_mutex_lock(&g_cb_mu);
  t->callbacks_over = 1;
  pthread_mutex_unlock(&g_cb_mu);
}

static void collect_thread_token(weft_token token, const char *text, size_t len, void *user_data) {
  collect_token(token, text, len, &((ThreadArgs *)user_data)->col);
}

/* Each thread: its own conversation, prompt, generate with a callback, wait. */
static void *npc_thread(void *arg) {
  ThreadArgs *t = (ThreadArgs *)arg;
  weft_conversation *c = NULL;
  weft_generation *g = NULL;
  weft_generate_params gp;
  weft_bool done = 0;
  size_t n = 0;
  int over = 0, guard = 0;
  char prompt[32];
  int len = sprintf(prompt, "Villager %d:", t->index);
  CHECK_OK(weft_conversation_create(t->ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, prompt, (size_t)len, WEFT_TEXT_ADD_BOS));
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  gp.max_tokens = 8;
  gp.on_token = collect_thread_token;
  gp.user_data = t;
  gp.user_data_free = mark_callbacks_over;
  CHECK_OK(weft_conversation_generate(c, &gp, &g));
  CHECK_OK(weft_generation_wait(g, 60000, &done));
  CHECK(done == 1);
  CHECK_OK(weft_generation_n_tokens(g, &n));
  CHECK_OK(weft_generation_free(g));
  CHECK_OK(weft_conversation_free(c));
  /* "Done" can be seen before the last callback has run (it runs on the
     stepping thread after the step's lock is released); user_data_free
     marks the end of the callbacks. */
  while (!over && ++guard < 60000) {
    pthread_mutex_lock(&g_cb_mu);
    over = t->callbacks_over;
    pthread_mutex_unlock(&g_cb_mu);
    if (!over) sleep_ms(1);
  }
  if (over && n == 8 && t->col.n_tokens == 8) t->done_generations = 1;
  else failf(__FILE__, __LINE__, "villager %d: %zu tokens, %zu callbacks, over %d", t->index, n, t->col.n_tokens, over);
  return NULL;
}

static int stopped(ThreadArgs *t) {
  int s;
  pthread_mutex_lock(&g_cb_mu);
  s = t->stop;
  pthread_mutex_unlock(&g_cb_mu);
  return s;
}

static void *stepper_thread(void *arg) {
  ThreadArgs *t = (ThreadArgs *)arg;
  while (!stopped(t)) {
    weft_step_result r;
    r.struct_size = sizeof r;
    CHECK_OK(weft_executor_step(t->ex, NULL, &r));
    if (r.idle) sleep_ms(1);
  }
  return NULL;
}

/* Reads a conversation until its handle is freed under it. */
static void *reader_thread(void *arg) {
  ThreadArgs *t = (ThreadArgs *)arg;
  for (;;) {
    uint32_t n = 0;
    weft_executor_stats st;
    weft_status s = weft_conversation_n_tokens(t->conv, &n);
    st.struct_size = sizeof st;
    CHECK_OK(weft_executor_get_stats(t->ex, &st));
    if (s == WEFT_ERR_INVALID_HANDLE) break;
    if (s != WEFT_OK) {
      t->worst = s;
      break;
    }
  }
  return NULL;
}

/* weft_last_error is per thread. */
static pthread_barrier_t g_barrier;
static void *error_thread(void *arg) {
  ThreadArgs *t = (ThreadArgs *)arg;
  weft_token bad = 100000 + t->index;
  char needle[16];
  weft_status s = weft_conversation_prompt_tokens(t->conv, &bad, 1);
  sprintf(needle, "%d", 100000 + t->index);
  pthread_barrier_wait(&g_barrier); /* both have failed before either reads */
  if (s != WEFT_ERR_OUT_OF_RANGE || strstr(weft_last_error(), needle) == NULL) t->worst = WEFT_ERR_INTERNAL;
  return NULL;
}

static void test_threads(void) {
  enum { NPCS = 8 };
  weft_model *m = load_tiny();
  weft_executor *ex;
  pthread_t npcs[NPCS], stepper, reader, errs[2];
  static ThreadArgs args[NPCS];
  ThreadArgs step_args, read_args, err_args[2];
  weft_conversation *victim = NULL;
  int i;
  if (!m) return;
  ex = make_executor(m, 2048, 16);
  memset(&step_args, 0, sizeof step_args);
  step_args.ex = ex;
  pthread_create(&stepper, NULL, stepper_thread, &step_args);
  for (i = 0; i < NPCS; ++i) {
    memset(&args[i], 0, sizeof args[i]);
    args[i].ex = ex;
    args[i].index = i;
    pthread_create(&npcs[i], NULL, npc_thread, &args[i]);
  }

  /* Free a handle while another thread is using it. */
  CHECK_OK(weft_conversation_create(ex, &victim));
  CHECK_OK(weft_conversation_prompt_text(victim, "to be freed", 11, 0));
  memset(&read_args, 0, sizeof read_args);
  read_args.ex = ex;
  read_args.conv = victim;
  read_args.worst = WEFT_OK;
  pthread_create(&reader, NULL, reader_thread, &read_args);
  sleep_ms(20);
  CHECK_OK(weft_conversation_free(victim));
  pthread_join(reader, NULL);
  CHECK(read_args.worst == WEFT_OK);

  for (i = 0; i < NPCS; ++i) pthread_join(npcs[i], NULL);
  pthread_mutex_lock(&g_cb_mu);
  step_args.stop = 1;
  pthread_mutex_unlock(&g_cb_mu);
  pthread_join(stepper, NULL);
  for (i = 0; i < NPCS; ++i) {
    CHECK(args[i].done_generations == 1);
    CHECK(args[i].col.bad_text == 0);
  }

  pthread_barrier_init(&g_barrier, NULL, 2);
  for (i = 0; i < 2; ++i) {
    memset(&err_args[i], 0, sizeof err_args[i]);
    err_args[i].index = i;
    CHECK_OK(weft_conversation_create(ex, &err_args[i].conv));
    pthread_create(&errs[i], NULL, error_thread, &err_args[i]);
  }
  for (i = 0; i < 2; ++i) {
    pthread_join(errs[i], NULL);
    CHECK(err_args[i].worst == WEFT_OK);
    CHECK_OK(weft_conversation_free(err_args[i].conv));
  }
  pthread_barrier_destroy(&g_barrier);
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* --- Logging -------------------------------------------------------------- */

typedef struct LogCtx {
  int lines;
  int bad;
} LogCtx;

static void on_log(int32_t level, const char *line, size_t len, void *user_data) {
  LogCtx *l = (LogCtx *)user_data;
  ++l->lines;
  if (level < WEFT_LOG_DEBUG || level > WEFT_LOG_ERROR || strlen(line) != len || memchr(line, '\n', len) != NULL)
    l->bad = 1;
}

static void test_log(void) {
  LogCtx ctx = {0, 0};
  weft_model *m;
  g_freed = 0;
  CHECK_ERR(weft_set_log_callback(on_log, 9, &ctx, count_free), WEFT_ERR_INVALID_ARGUMENT, "min_level = 9");
  CHECK(g_freed == 0);
  CHECK_OK(weft_set_log_callback(on_log, WEFT_LOG_DEBUG, &ctx, count_free));
  m = load_tiny(); /* llama.cpp logs the load at info and debug */
  CHECK(ctx.lines > 0 && ctx.bad == 0);
  CHECK_OK(weft_set_log_callback(NULL, WEFT_LOG_NONE, NULL, NULL));
  CHECK(g_freed == 1);
  ctx.lines = 0;
  CHECK_OK(weft_model_free(m));
  m = load_tiny();
  CHECK(ctx.lines == 0);
  CHECK_OK(weft_model_free(m));
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
      {"fork_equivalence", test_fork_equivalence},
      {"rewind_remove_shift", test_rewind_remove_shift},
      {"generation", test_generation},
      {"sampler", test_sampler},
      {"dispose_and_executor_gone", test_dispose_and_executor_gone},
      {"pressure", test_pressure},
      {"state", test_state},
      {"residency", test_residency},
      {"worker_and_events", test_worker_and_events},
      {"threads", test_threads},
      {"log", test_log},
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
