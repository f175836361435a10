/* C ABI tests: fork and rewind equivalence, remove and shift, samplers,
   dispose and a freed executor, pressure callbacks. */
#include "c_api_test.h"

/* Invariant 3 through the C ABI: fork, then prompt Y, equals a fresh
   conversation prompted with the whole history plus Y; then greedy
   continuations agree token for token. */
void test_fork_equivalence(void) {
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
  /* Reuse off: `fresh` decodes its history itself, an independent path. */
  ex = make_executor_reuse(m, 512, 4, 0);
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
void test_rewind_remove_shift(void) {
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

void test_sampler(void) {
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
  /* json_schema: refusals name the place; both it and a grammar is refused. */
  CHECK(sp.json_schema == NULL);
  sp.json_schema = "{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#/$defs/nope\"}}}";
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT,
            "SamplerParams.json_schema: JSON schema at #/properties/a/$ref: $ref '#/$defs/nope' does not resolve");
  sp.json_schema = "{\"type\": ";
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "JSON schema is not JSON");
  sp.json_schema = "{\"enum\": [\"gate\", \"coin\"]}";
  sp.grammar = "root ::= \"x\"";
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT,
            "SamplerParams.grammar and SamplerParams.json_schema are both set");
  sp.grammar = NULL;
  /* A generation under a schema gives JSON it admits, at temperature 1 over
     several seeds; a struct_size from before json_schema reads it as NULL
     (the same seed then writes something else). */
  {
    weft_generate_params gp;
    weft_generation *g = NULL;
    weft_conversation *j = NULL;
    char text[4096]; /* 40 unconstrained tokens of any length */
    size_t len = 0;
    int32_t reason = 0;
    uint32_t seed;
    sp.temperature = 1.0f;
    CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
    gp.sampler = &sp;
    gp.max_tokens = 40;
    for (seed = 1; seed <= 4; ++seed) {
      sp.seed = seed;
      sp.struct_size = sizeof sp;
      CHECK_OK(weft_conversation_fork(c, &j));
      CHECK_OK(weft_conversation_generate(j, &gp, &g));
      run_until_idle(ex);
      CHECK_OK(weft_generation_reason(g, &reason));
      CHECK(reason == WEFT_FINISH_END_OF_GENERATION);
      CHECK_OK(weft_generation_text(g, text, sizeof text, &len));
      CHECK(strcmp(text, "\"gate\"") == 0 || strcmp(text, "\"coin\"") == 0);
      CHECK_OK(weft_generation_free(g));
      CHECK_OK(weft_conversation_free(j));
      sp.struct_size = offsetof(weft_sampler_params, json_schema);
      CHECK_OK(weft_conversation_fork(c, &j));
      CHECK_OK(weft_conversation_generate(j, &gp, &g));
      run_until_idle(ex);
      CHECK_OK(weft_generation_text(g, text, sizeof text, &len));
      CHECK(strcmp(text, "\"gate\"") != 0 && strcmp(text, "\"coin\"") != 0);
      CHECK_OK(weft_generation_free(g));
      CHECK_OK(weft_conversation_free(j));
    }
    sp.struct_size = sizeof sp;
    sp.json_schema = NULL;
    sp.temperature = 0.0f;
    sp.seed = 0;
  }
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

void test_dispose_and_executor_gone(void) {
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

void test_pressure(void) {
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
  p.prefix_cache_cells = 0; /* small's prompt begins big's: no sharing, so it needs the cells */
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

/* The index of the largest of l[0, n), the first of equal maxima. */
static int32_t argmax_of(const float *l, size_t n) {
  size_t i, best = 0;
  for (i = 1; i < n; ++i)
    if (l[i] > l[best]) best = i;
  return (int32_t)best;
}

/* logit_bias: greedy samples the argmax of the conversation's logits plus
   the bias, and the logits it exposes stay unbiased; a state saved with the
   bias and loaded samples as the original does; the refusals; a struct_size
   from before logit_bias reads none. */
void test_logit_bias(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL, *back = NULL;
  weft_sampler_params sp;
  weft_logit_bias lb[3];
  weft_bytes *b = NULL;
  const uint8_t *data = NULL;
  float *logits, *after;
  size_t size = 0, n = 0;
  int32_t n_vocab = 0, top;
  weft_token t = -1, u = -1;
  int i;
  if (!m) return;
  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  logits = (float *)malloc(sizeof(float) * (size_t)n_vocab);
  after = (float *)malloc(sizeof(float) * (size_t)n_vocab);
  ex = make_executor(m, 512, 4);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "The king said", 13, WEFT_TEXT_ADD_BOS));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_logits(c, logits, (size_t)n_vocab, &n));
  top = argmax_of(logits, n);
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  CHECK(sp.logit_bias == NULL && sp.n_logit_bias == 0);
  /* Ban the argmax, boost token 5 past everything but a 3rd: token 5 wins. */
  lb[0].token = top;
  lb[0].bias = -INFINITY;
  lb[1].token = top == 5 ? 6 : 5;
  lb[1].bias = 1000.0f;
  lb[2].token = top == 9 ? 8 : 9;
  lb[2].bias = -3.0f;
  sp.logit_bias = lb;
  sp.n_logit_bias = 3;
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  CHECK_OK(weft_conversation_sample(c, &t));
  CHECK(t == lb[1].token);
  CHECK_OK(weft_conversation_logits(c, after, (size_t)n_vocab, &n));
  CHECK(memcmp(logits, after, sizeof(float) * n) == 0);
  /* With the ban alone: the argmax of the logits with the argmax banned. */
  sp.n_logit_bias = 1;
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  logits[top] = -INFINITY;
  CHECK_OK(weft_conversation_sample(c, &t));
  CHECK(t == argmax_of(logits, n));
  /* Saved and loaded, at a temperature: the same draws as the original. */
  sp.n_logit_bias = 3;
  lb[1].bias = 2.0f;
  sp.temperature = 1.0f;
  sp.top_k = 6;
  sp.seed = 3;
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  CHECK_OK(weft_conversation_sample(c, &t));
  CHECK_OK(weft_conversation_save(c, &b));
  CHECK_OK(weft_bytes_data(b, &data, &size));
  CHECK(size > 12 && data[8] == 8);
  CHECK_OK(weft_executor_load(ex, data, size, &back));
  CHECK_OK(weft_bytes_free(b));
  for (i = 0; i < 8; ++i) {
    CHECK_OK(weft_conversation_sample(c, &t));
    CHECK_OK(weft_conversation_sample(back, &u));
    CHECK(t == u && t != top);
  }
  /* Refusals. */
  sp.temperature = 0.0f;
  sp.logit_bias = NULL;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_NULL_ARG, "weft_sampler_params.logit_bias");
  sp.logit_bias = lb;
  sp.n_logit_bias = 1025;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT,
            "weft_sampler_params.n_logit_bias = 1025; at most 1024 are taken");
  sp.n_logit_bias = 3;
  lb[2].bias = NAN;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT,
            ") is NaN; it must be finite or -inf");
  lb[2].bias = 1.0f;
  lb[2].token = lb[1].token;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "SamplerParams.logit_bias lists token");
  lb[2].token = n_vocab;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_OUT_OF_RANGE, "is outside the vocabulary");
  /* The size from before logit_bias: no bias read, the plain argmax. */
  sp.struct_size = offsetof(weft_sampler_params, logit_bias);
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  CHECK_OK(weft_conversation_logits(c, logits, (size_t)n_vocab, &n));
  CHECK_OK(weft_conversation_sample(c, &t));
  CHECK(t == argmax_of(logits, n));
  free(logits);
  free(after);
  CHECK_OK(weft_conversation_free(back));
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}
