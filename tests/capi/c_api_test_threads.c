/* C ABI tests from many threads: eight generating while one steps, a
   handle freed while another thread uses it, per-thread weft_last_error. */
#include "c_api_test.h"

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

void test_threads(void) {
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
