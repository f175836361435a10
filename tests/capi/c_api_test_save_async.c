/* C ABI tests: weft_conversation_save_async. When nobody else steps the
   callback runs before the call returns, on the calling thread; during a
   step, or with the worker running, it runs on the stepping thread at a
   later boundary; either way exactly once, with the bytes
   weft_conversation_save gives for the same state, or with the error
   (disposed conversation, freed executor). A disposed conversation is
   refused at the call, and then the callback never runs. */
#include "c_api_test.h"

typedef struct SaveCtx {
  int calls;
  weft_status status;
  weft_bytes *bytes;
  char message[256];
  pthread_t thread;
  int poke; /* make a weft call fail inside the callback */
} SaveCtx;

/* Callbacks may run on another thread: they write under this lock, and a
   thread that has not joined the stepper reads with saved_calls(). */
static pthread_mutex_t g_save_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_saved(weft_status status, weft_bytes *bytes, const char *message, void *user_data) {
  SaveCtx *s = (SaveCtx *)user_data;
  pthread_mutex_lock(&g_save_mu);
  ++s->calls;
  s->status = status;
  s->bytes = bytes;
  s->thread = pthread_self();
  snprintf(s->message, sizeof s->message, "%s", message != NULL ? message : "(null)");
  pthread_mutex_unlock(&g_save_mu);
  if (s->poke) (void)weft_bytes_free((weft_bytes *)(uintptr_t)0x10); /* fails: not a live handle */
}

static int saved_calls(SaveCtx *s) {
  int n;
  pthread_mutex_lock(&g_save_mu);
  n = s->calls;
  pthread_mutex_unlock(&g_save_mu);
  return n;
}

/* The saved bytes equal `data[size]`; frees them. */
static void check_same_bytes(SaveCtx *s, const uint8_t *data, size_t size) {
  const uint8_t *got = NULL;
  size_t n = 0;
  CHECK(s->calls == 1 && s->status == WEFT_OK && s->bytes != NULL && s->message[0] == '\0');
  if (s->bytes == NULL) return;
  CHECK_OK(weft_bytes_data(s->bytes, &got, &n));
  CHECK(n == size && got != NULL && memcmp(got, data, size) == 0);
  CHECK_OK(weft_bytes_free(s->bytes));
  s->bytes = NULL;
}

static weft_conversation *prompted(weft_executor *ex, const char *text) {
  weft_conversation *c = NULL;
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, text, strlen(text), WEFT_TEXT_ADD_BOS));
  return c;
}

void test_save_async(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c, *d, *back = NULL;
  weft_sampler_params sp;
  weft_bytes *ref = NULL;
  const uint8_t *data = NULL;
  size_t size = 0;
  uint32_t n1 = 0, n2 = 0;
  SaveCtx s;
  if (!m) return;
  ex = make_executor(m, 512, 4);
  c = prompted(ex, "The old sailor said");
  d = prompted(ex, "A second voice");
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  sp.temperature = 0.7f;
  sp.seed = 5;
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_save(c, &ref));
  CHECK_OK(weft_bytes_data(ref, &data, &size));

  /* No step running: done before the call returns, on this thread, with
     the bytes a synchronous save gives. */
  memset(&s, 0, sizeof s);
  s.poke = 1;
  CHECK_OK(weft_conversation_save_async(c, on_saved, &s));
  CHECK(s.calls == 1 && pthread_equal(s.thread, pthread_self()));
  CHECK(strcmp(weft_last_error(), "") == 0); /* the call succeeded, whatever the callback did */
  if (s.bytes != NULL) {
    const uint8_t *got = NULL;
    size_t n = 0;
    CHECK_OK(weft_bytes_data(s.bytes, &got, &n));
    CHECK_OK(weft_executor_load(ex, got, n, &back)); /* loadable, as save's bytes */
    CHECK_OK(weft_conversation_n_tokens(back, &n1));
    CHECK_OK(weft_conversation_n_tokens(c, &n2));
    CHECK(n1 == n2 && n1 > 0);
  }
  check_same_bytes(&s, data, size);

  /* Refused at the call: the callback never runs. */
  memset(&s, 0, sizeof s);
  CHECK_ERR(weft_conversation_save_async(c, NULL, &s), WEFT_ERR_NULL_ARG, "callback");
  CHECK_ERR(weft_conversation_save_async(NULL, on_saved, &s), WEFT_ERR_NULL_ARG, "weft_conversation handle is NULL");
  CHECK_ERR(weft_conversation_save_async((const weft_conversation *)ex, on_saved, &s), WEFT_ERR_INVALID_HANDLE,
            "not a weft_conversation");
  CHECK_OK(weft_conversation_dispose(d));
  CHECK_ERR(weft_conversation_save_async(d, on_saved, &s), WEFT_ERR_DISPOSED, "was disposed");
  CHECK(s.calls == 0);

  /* Still exactly once after more steps. */
  memset(&s, 0, sizeof s);
  CHECK_OK(weft_conversation_save_async(c, on_saved, &s));
  run_until_idle(ex);
  CHECK(s.calls == 1);
  check_same_bytes(&s, data, size);

  /* With the worker running, even idle, the worker takes it at its next
     boundary (a game thread does no KV work itself): on its thread. */
  {
    double t0;
    memset(&s, 0, sizeof s);
    CHECK_OK(weft_executor_start(ex, NULL));
    CHECK_OK(weft_conversation_save_async(c, on_saved, &s));
    t0 = now_s();
    while (saved_calls(&s) == 0 && now_s() - t0 < 30) sleep_ms(1);
    CHECK_OK(weft_executor_stop(ex));
    CHECK(s.calls == 1 && !pthread_equal(s.thread, pthread_self()));
    check_same_bytes(&s, data, size);
  }

  CHECK_OK(weft_executor_free(ex));
  memset(&s, 0, sizeof s);
  CHECK_ERR(weft_conversation_save_async(c, on_saved, &s), WEFT_ERR_DISPOSED, "executor was destroyed");
  CHECK(s.calls == 0);
  CHECK_OK(weft_bytes_free(ref));
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(d));
  CHECK_OK(weft_conversation_free(back));
  CHECK_OK(weft_model_free(m));
}

/* An on_token callback that holds the step until released, and that can
   save from the stepping thread. */
typedef struct Gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int held, release;
  weft_conversation *save_here; /* saved from the callback, once */
  SaveCtx inner;
  int inner_calls_at_return;
} Gate;

static void gate_token(weft_token token, const char *text, size_t len, void *user_data) {
  Gate *g = (Gate *)user_data;
  (void)token;
  (void)text;
  (void)len;
  pthread_mutex_lock(&g->mu);
  if (!g->release) {
    g->held = 1;
    pthread_cond_broadcast(&g->cv);
    while (!g->release) pthread_cond_wait(&g->cv, &g->mu);
  }
  pthread_mutex_unlock(&g->mu);
  if (g->save_here != NULL) {
    /* On the stepping thread: at once, inside the call. */
    CHECK_OK(weft_conversation_save_async(g->save_here, on_saved, &g->inner));
    g->inner_calls_at_return = g->inner.calls;
    g->save_here = NULL;
  }
}

static void gate_wait_held(Gate *g) {
  pthread_mutex_lock(&g->mu);
  while (!g->held) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void gate_set(Gate *g, int release) {
  pthread_mutex_lock(&g->mu);
  g->release = release;
  g->held = 0;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static void *step_once(void *arg) {
  CHECK_OK(weft_executor_step((weft_executor *)arg, NULL, NULL));
  return NULL;
}

void test_save_async_during_step(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *talker, *t, *d, *e;
  weft_generation *gen = NULL;
  weft_generate_params gp;
  weft_bytes *ref = NULL, *ref_e = NULL;
  const uint8_t *data = NULL, *data_e = NULL;
  size_t size = 0, size_e = 0;
  pthread_t stepper;
  SaveCtx st, sd, se;
  Gate gate;
  if (!m) return;
  memset(&gate, 0, sizeof gate);
  pthread_mutex_init(&gate.mu, NULL);
  pthread_cond_init(&gate.cv, NULL);
  ex = make_executor(m, 1024, 4);
  talker = prompted(ex, "The innkeeper says");
  t = prompted(ex, "The smith says");
  d = prompted(ex, "The guard says");
  e = prompted(ex, "The baker says");
  run_until_idle(ex);
  CHECK_OK(weft_conversation_save(t, &ref));
  CHECK_OK(weft_bytes_data(ref, &data, &size));
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  gp.max_tokens = 16; /* still running for the last part */
  gp.on_token = gate_token;
  gp.user_data = &gate;
  CHECK_OK(weft_conversation_generate(talker, &gp, &gen));

  /* A step held inside its callbacks: save_async and dispose return at
     once (they would deadlock here if they waited), nothing called yet. */
  memset(&st, 0, sizeof st);
  memset(&sd, 0, sizeof sd);
  pthread_create(&stepper, NULL, step_once, ex);
  gate_wait_held(&gate);
  CHECK_OK(weft_conversation_save_async(t, on_saved, &st));
  CHECK_OK(weft_conversation_save_async(d, on_saved, &sd));
  CHECK_OK(weft_conversation_dispose(d));
  CHECK(saved_calls(&st) == 0 && saved_calls(&sd) == 0);
  gate_set(&gate, 1);
  pthread_join(stepper, NULL);
  /* By the end of the next step both have run, once each: t's bytes are a
     synchronous save's, d learned it was disposed. */
  CHECK_OK(weft_executor_step(ex, NULL, NULL));
  check_same_bytes(&st, data, size);
  CHECK(sd.calls == 1 && sd.status == WEFT_ERR_DISPOSED && sd.bytes == NULL);
  CHECK(strstr(sd.message, "weft_conversation_save_async: ") == sd.message && strstr(sd.message, "disposed") != NULL);

  /* From a callback on the stepping thread: at once. */
  memset(&gate.inner, 0, sizeof gate.inner);
  gate.save_here = t;
  CHECK_OK(weft_executor_step(ex, NULL, NULL));
  CHECK(gate.save_here == NULL && gate.inner_calls_at_return == 1);
  check_same_bytes(&gate.inner, data, size);

  /* Asked for during a step's callbacks, then the executor freed: one call,
     either with the bytes (taken at a boundary before the executor went) or
     with WEFT_ERR_DISPOSED on the thread that freed it. */
  CHECK_OK(weft_conversation_save(e, &ref_e));
  CHECK_OK(weft_bytes_data(ref_e, &data_e, &size_e));
  memset(&se, 0, sizeof se);
  gate_set(&gate, 0);
  pthread_create(&stepper, NULL, step_once, ex);
  gate_wait_held(&gate);
  CHECK_OK(weft_conversation_save_async(e, on_saved, &se));
  CHECK(saved_calls(&se) == 0);
  gate_set(&gate, 1);
  pthread_join(stepper, NULL);
  CHECK_OK(weft_executor_free(ex));
  CHECK(se.calls == 1);
  if (se.status == WEFT_OK) {
    check_same_bytes(&se, data_e, size_e);
  } else {
    CHECK(se.status == WEFT_ERR_DISPOSED && se.bytes == NULL && strstr(se.message, "destroyed") != NULL);
    CHECK(pthread_equal(se.thread, pthread_self()));
  }
  CHECK(st.calls == 1 && sd.calls == 1 && gate.inner.calls == 1);

  CHECK_OK(weft_generation_free(gen));
  CHECK_OK(weft_bytes_free(ref));
  CHECK_OK(weft_bytes_free(ref_e));
  CHECK_OK(weft_conversation_free(talker));
  CHECK_OK(weft_conversation_free(t));
  CHECK_OK(weft_conversation_free(d));
  CHECK_OK(weft_conversation_free(e));
  CHECK_OK(weft_model_free(m));
  pthread_cond_destroy(&gate.cv);
  pthread_mutex_destroy(&gate.mu);
}
