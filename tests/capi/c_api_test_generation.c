/* C ABI tests: generations (token callbacks and their user_data, stop
   strings, cancel, a generation's own sampler). */
#include "c_api_test.h"

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

void test_generation(void) {
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

  /* ignore_eos: where a grammar admits only an end token, the generation
     ends in an error with it and at that end token without it; a struct_size
     from before ignore_eos reads it as 0. */
  {
    weft_conversation *y1 = NULL, *y2 = NULL;
    weft_generation *gy1 = NULL, *gy2 = NULL;
    weft_status ecode = WEFT_OK;
    char emsg[256];
    CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
    sp.grammar = "root ::= \"yes\" | \"no\"";
    CHECK_OK(weft_conversation_fork(c, &y1));
    CHECK_OK(weft_conversation_fork(c, &y2));
    CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
    CHECK(gp.ignore_eos == 0);
    gp.sampler = &sp;
    gp.max_tokens = 10;
    gp.ignore_eos = 1;
    CHECK_OK(weft_conversation_generate(y1, &gp, &gy1));
    gp.struct_size = offsetof(weft_generate_params, ignore_eos);
    CHECK_OK(weft_conversation_generate(y2, &gp, &gy2));
    run_until_idle(ex);
    CHECK_OK(weft_generation_reason(gy1, &reason));
    CHECK(reason == WEFT_FINISH_ERROR);
    CHECK_OK(weft_generation_error(gy1, &ecode, emsg, sizeof emsg, &len));
    CHECK(ecode == WEFT_ERR_INVALID_ARGUMENT);
    CHECK(strstr(emsg, "grammar admits no token") != NULL);
    CHECK_OK(weft_generation_reason(gy2, &reason));
    CHECK(reason == WEFT_FINISH_END_OF_GENERATION);
    CHECK_OK(weft_generation_free(gy1));
    CHECK_OK(weft_generation_free(gy2));
    CHECK_OK(weft_conversation_free(y1));
    CHECK_OK(weft_conversation_free(y2));
  }

  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(f1));
  CHECK_OK(weft_conversation_free(f2));
  CHECK_OK(weft_conversation_free(empty));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* logprobs through the C ABI: each record's token is the sampled one, its
   logprob the log-softmax of the logits read just before (computed here in
   double), its top list sorted with the greedy pick first; the errors. */
void test_generation_logprobs(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL;
  weft_generation *g = NULL;
  weft_generate_params gp;
  weft_token_logprob rec, top[4];
  weft_token toks[4];
  float *logits;
  int32_t n_vocab = 0;
  size_t n = 0, n_top = 0, i;
  double mx, sum;
  weft_bool done = 0;
  int step;
  if (!m) return;
  ex = make_executor(m, 1024, 4);
  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  logits = (float *)malloc((size_t)n_vocab * sizeof *logits);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "The merchant said", 17, WEFT_TEXT_ADD_BOS));
  run_until_idle(ex);
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  CHECK(gp.logprobs == 0 && gp.top_logprobs == 0);
  gp.top_logprobs = 2;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "needs GenerateParams.logprobs");
  gp.logprobs = 1;
  gp.top_logprobs = 21;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_OUT_OF_RANGE, "top_logprobs = 21");
  gp.top_logprobs = 3;
  gp.max_tokens = 1;
  for (step = 0; step < 4; ++step) {
    CHECK_OK(weft_conversation_logits(c, logits, (size_t)n_vocab, &n));
    CHECK_OK(weft_conversation_generate(c, &gp, &g));
    run_until_idle(ex);
    CHECK_OK(weft_generation_wait(g, 60000, &done));
    CHECK(done == 1);
    CHECK_OK(weft_generation_tokens(g, toks, 4, &n));
    CHECK(n == 1);
    CHECK_OK(weft_generation_logprob(g, 0, &rec, top, 4, &n_top));
    CHECK(rec.token == toks[0]);
    CHECK(n_top == 3);
    mx = logits[0];
    for (i = 1; i < (size_t)n_vocab; ++i) mx = logits[i] > mx ? logits[i] : mx;
    sum = 0;
    for (i = 0; i < (size_t)n_vocab; ++i) sum += exp((double)logits[i] - mx);
    CHECK(fabs(rec.logprob - ((double)logits[rec.token] - mx - log(sum))) < 1e-5);
    CHECK(top[0].token == rec.token && top[0].logprob == rec.logprob); /* greedy */
    CHECK(top[0].logprob >= top[1].logprob && top[1].logprob >= top[2].logprob);
    CHECK_ERR(weft_generation_logprob(g, 0, &rec, top, 2, &n_top), WEFT_ERR_BUFFER_TOO_SMALL, "capacity is 2");
    CHECK(n_top == 3);
    CHECK_ERR(weft_generation_logprob(g, 1, &rec, top, 4, &n_top), WEFT_ERR_OUT_OF_RANGE, "past the generation's 1");
    CHECK_OK(weft_generation_free(g));
    g = NULL;
  }
  free(logits);
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}
