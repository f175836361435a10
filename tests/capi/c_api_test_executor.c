/* C ABI tests: executor parameters and step budgets, max_tokens = 0, the
   worker with events polled by a "main thread", hard deadlines. */
#include "c_api_test.h"

void test_executor_errors(void) {
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
  p.kv_type = WEFT_KV_Q4_0; /* tiny's heads are 16 wide: no quantised cache */
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "kv_type = q4_0 stores heads in blocks of 32");
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
  /* WEFT_FLASH_ATTN_AUTO on the CPU: both kernels timed, the faster used;
     or, as the test presets set it, WEFT_FLASH_ATTN in the environment. */
  if (getenv("WEFT_FLASH_ATTN") != NULL && (strcmp(getenv("WEFT_FLASH_ATTN"), "on") == 0 ||
                                            strcmp(getenv("WEFT_FLASH_ATTN"), "off") == 0)) {
    CHECK(st.flash_attn_source == WEFT_ATTENTION_ENVIRONMENT && st.flash_attn_probe_ms == 0);
    CHECK(st.flash_attn == (strcmp(getenv("WEFT_FLASH_ATTN"), "on") == 0 ? WEFT_FLASH_ATTN_ENABLED
                                                                          : WEFT_FLASH_ATTN_DISABLED));
  } else {
    CHECK(st.flash_attn_source == WEFT_ATTENTION_MEASURED || st.flash_attn_source == WEFT_ATTENTION_REMEMBERED);
    CHECK(st.flash_attn_probe_ms > 0 && st.plain_attn_probe_ms > 0 && st.attn_probe_seqs == 4 &&
          st.attn_probe_depth > 0);
    CHECK(st.flash_attn == (st.flash_attn_probe_ms <= st.plain_attn_probe_ms ? WEFT_FLASH_ATTN_ENABLED
                                                                             : WEFT_FLASH_ATTN_DISABLED));
  }
  /* A caller built before the probe's fields gets the fields before them. */
  memset(&st, 0, sizeof st);
  st.struct_size = offsetof(weft_executor_stats, flash_attn_probe_ms);
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.n_seq_max == 4 && st.flash_attn_probe_ms == 0 && st.attn_probe_seqs == 0 && st.flash_attn == 0);
  CHECK_OK(weft_executor_cells_free(ex, &free_cells));
  CHECK(free_cells == 256);
  CHECK_ERR(weft_executor_cells_free(ex, NULL), WEFT_ERR_NULL_ARG, "out");
  CHECK_OK(weft_executor_free(ex));

  /* Asked for: no probe; tuning_cache_dir "" keeps results in the process. */
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.n_ctx = 256;
  p.n_batch = 32;
  p.n_seq_max = 2;
  p.n_threads = 1;
  p.flash_attn = WEFT_FLASH_ATTN_DISABLED;
  p.tuning_cache_dir = "";
  CHECK_OK(weft_executor_create(m, &p, &ex));
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.flash_attn == WEFT_FLASH_ATTN_DISABLED && st.flash_attn_source == WEFT_ATTENTION_ASKED &&
        st.flash_attn_probe_ms == 0);
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* max_tokens = 0 means n_batch (64 here), as in C++ and C#: for a step and
   for the worker's budget. */
void test_budget_zero_is_n_batch(void) {
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

/* Counted by the worker's on_step and each generation's on_finish; read by
   this thread only after weft_executor_stop joined the worker. */
typedef struct {
  int calls, bad, freed;
  uint64_t sampled;
} Counted;

static void count_step(const weft_step_result *r, void *user_data) {
  Counted *s = (Counted *)user_data;
  ++s->calls;
  s->sampled += r->tokens_sampled;
  if (r->struct_size != sizeof *r) ++s->bad;
}

static void count_finish(int32_t reason, void *user_data) {
  Counted *f = (Counted *)user_data;
  ++f->calls;
  if (reason != WEFT_FINISH_MAX_TOKENS) ++f->bad;
}

static void counted_free(void *user_data) { ++((Counted *)user_data)->freed; }

/* The worker steps; this thread only polls events, as a game's main thread.
   on_step sees every step; on_finish ends each generation once. */
void test_worker_and_events(void) {
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
  Counted steps, ends[N];
  uint32_t n_ctx = 0;
  if (!m) return;
  memset(&steps, 0, sizeof steps);
  memset(ends, 0, sizeof ends);
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.n_ctx = 1024;
  p.n_batch = 64;
  p.n_seq_max = 8;
  p.n_threads = 2;
  p.events = 1;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  CHECK_OK(weft_executor_n_ctx(ex, &n_ctx));
  CHECK(n_ctx == 1024);
  CHECK_ERR(weft_executor_n_ctx(ex, NULL), WEFT_ERR_NULL_ARG, "out");
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  CHECK(gp.on_finish == NULL);
  gp.max_tokens = MAXT;
  gp.on_finish = count_finish;
  gp.user_data_free = counted_free;
  for (i = 0; i < N; ++i) {
    gp.user_data = &ends[i];
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
  CHECK(wp.on_step == NULL);
  wp.on_step = count_step;
  wp.user_data = &steps;
  wp.user_data_free = counted_free;
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
  /* Joined: every step it ran was counted, and its user_data let go. */
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(steps.calls >= 1 && (uint64_t)steps.calls == st.steps && steps.sampled == N * MAXT);
  CHECK(steps.bad == 0 && steps.freed == 1);
  for (i = 0; i < N; ++i) CHECK(ends[i].calls == 1 && ends[i].bad == 0 && ends[i].freed == 0);
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
  /* The generations' callbacks are gone with their last holders. */
  for (i = 0; i < N; ++i) CHECK(ends[i].calls == 1 && ends[i].freed == 1);
  CHECK_OK(weft_model_free(m));
}

/* Prefix reuse: two conversations never forked share a prefix; the older
   struct sizes still read; pin/unpin; a tokens-only save. */
void test_prefix_reuse(void) {
  enum { N = 48, OWN = 4 };
  weft_model *m = load_tiny();
  weft_executor_params p;
  weft_executor *ex = NULL;
  weft_conversation *a = NULL, *b = NULL;
  weft_token toks[N + OWN];
  weft_executor_stats st;
  weft_bytes *full = NULL, *small = NULL;
  const uint8_t *data;
  size_t full_n = 0, small_n = 0;
  weft_bool was = 0;
  int i;
  if (!m) return;
  for (i = 0; i < N + OWN; ++i) toks[i] = 200 + 7 * i;
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  CHECK(p.prefix_cache_cells == -1);
  p.prefix_cache_cells = -2;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "prefix_cache_cells = -2");
  /* A caller built against the struct before prefix_cache_cells: defaults. */
  CHECK_OK(weft_executor_params_init(&p, offsetof(weft_executor_params, prefix_cache_cells)));
  p.n_ctx = 512;
  p.n_batch = 64;
  p.n_seq_max = 4;
  p.n_threads = 2;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  CHECK_OK(weft_conversation_create(ex, &a));
  CHECK_OK(weft_conversation_prompt_tokens(a, toks, N));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_create(ex, &b));
  CHECK_OK(weft_conversation_prompt_tokens(b, toks, N + OWN));
  run_until_idle(ex);
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.prefix_tokens_reused == N && st.prefix_hits == 1 && st.tokens_decoded == N + OWN);
  CHECK(st.cells_used == N + OWN && st.cells_saved == N);
  /* The older stats struct: filled up to its size. */
  memset(&st, 0, sizeof st);
  st.struct_size = offsetof(weft_executor_stats, prefix_tokens_reused);
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.tokens_decoded == N + OWN && st.prefix_tokens_reused == 0);

  CHECK_ERR(weft_executor_pin_prefix(ex, toks, 10), WEFT_ERR_INVALID_ARGUMENT, "at least 16");
  CHECK_ERR(weft_executor_pin_prefix(ex, NULL, 10), WEFT_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_OK(weft_executor_pin_prefix(ex, toks, 32));
  CHECK_ERR(weft_executor_pin_prefix(ex, toks, 32), WEFT_ERR_INVALID_ARGUMENT, "pinned already");
  CHECK_OK(weft_executor_unpin_prefix(ex, toks, 32, &was));
  CHECK(was == 1);
  CHECK_OK(weft_executor_unpin_prefix(ex, toks, 32, &was));
  CHECK(was == 0);

  CHECK_OK(weft_conversation_save(b, &full));
  CHECK_OK(weft_conversation_save_tokens(b, &small));
  CHECK_OK(weft_bytes_data(full, &data, &full_n));
  CHECK_OK(weft_bytes_data(small, &data, &small_n));
  CHECK(small_n * 4 < full_n);
  CHECK_OK(weft_bytes_free(full));
  CHECK_OK(weft_bytes_free(small));
  CHECK_OK(weft_conversation_free(a));
  CHECK_OK(weft_conversation_free(b));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}
