/* C ABI tests: the draft model (WEFT_DRAFTER_MODEL). tiny.gguf drafts for
   itself: a greedy generation gives the tokens of one without drafts, its
   drafts are counted (the generation, the step results, the stats, the
   draft model's tokens and seconds); older struct sizes still work; a
   drafter without a draft model and values out of range are refused by
   code and message. */
#include "c_api_test.h"

#define DM_TOKENS 40

/* As in c_api_test_speculative.c: greedy over a few tokens far above the
   rest, so that a near-tie of batch noise cannot part the two runs (the
   draft model picks with the generation's logit biases too). */
static const weft_logit_bias kFew[] = {{300, 30.0f}, {301, 30.0f}, {302, 30.0f}, {303, 30.0f}, {304, 30.0f}};

typedef struct DmRun {
  weft_token tokens[DM_TOKENS];
  size_t n;
  uint32_t drafted, accepted;
  uint64_t step_drafted;
  double step_draft_seconds;
} DmRun;

/* Generates DM_TOKENS on a fresh conversation, stepping until idle and
   summing the step results' drafts and draft seconds. */
static void dm_generate(weft_executor *ex, const weft_speculative_params *spec, DmRun *run) {
  weft_conversation *c = NULL;
  weft_generation *g = NULL;
  weft_generate_params gp;
  weft_sampler_params sp;
  weft_step_result r;
  int guard = 0;
  memset(run, 0, sizeof *run);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "Once upon a time there was a time", 33, WEFT_TEXT_ADD_BOS));
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  sp.logit_bias = kFew;
  sp.n_logit_bias = sizeof kFew / sizeof kFew[0];
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  gp.sampler = &sp;
  gp.max_tokens = DM_TOKENS;
  gp.ignore_eos = 1;
  gp.speculative = spec;
  CHECK_OK(weft_conversation_generate(c, &gp, &g));
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  do {
    CHECK_OK(weft_executor_step(ex, NULL, &r));
    CHECK(r.drafts_accepted <= r.tokens_drafted);
    CHECK(r.draft_seconds >= 0);
    run->step_drafted += r.tokens_drafted;
    run->step_draft_seconds += r.draft_seconds;
  } while (!r.idle && ++guard < 10000);
  CHECK_OK(weft_generation_tokens(g, run->tokens, DM_TOKENS, &run->n));
  CHECK_OK(weft_generation_drafts(g, &run->drafted, &run->accepted));
  weft_generation_free(g);
  weft_conversation_free(c);
}

/* An executor drafting with `draft` (NULL = none), its default drafter `spec`. */
static weft_executor *dm_executor(weft_model *m, const weft_draft_model_params *draft,
                                  const weft_speculative_params *spec, size_t struct_size) {
  weft_executor_params p;
  weft_executor *ex = NULL;
  CHECK_OK(weft_executor_params_init(&p, struct_size));
  p.n_ctx = 1024;
  p.n_batch = 64;
  p.n_seq_max = 4;
  p.n_threads = 2;
  if (struct_size == sizeof p) p.draft_model = draft;
  p.speculative = spec;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  return ex;
}

static void same_tokens(const DmRun *a, const DmRun *b) {
  CHECK(a->n == DM_TOKENS && b->n == a->n);
  CHECK(memcmp(a->tokens, b->tokens, a->n * sizeof a->tokens[0]) == 0);
}

static void check_refusals(weft_model *m, const weft_draft_model_params *good, const weft_speculative_params *model) {
  weft_draft_model_params bad;
  weft_executor_params ep;
  weft_executor *ex = NULL, *plain;
  weft_conversation *c = NULL;
  weft_generation *g = NULL;
  weft_generate_params gp;

  /* WEFT_DRAFTER_MODEL without a draft model: the executor's default, and a generation. */
  CHECK_OK(weft_executor_params_init(&ep, sizeof ep));
  ep.n_ctx = 256;
  ep.n_batch = 64;
  ep.n_seq_max = 2;
  ep.n_threads = 2;
  ep.speculative = model;
  CHECK_ERR(weft_executor_create(m, &ep, &ex), WEFT_ERR_INVALID_ARGUMENT, "needs ExecutorParams::draft_model");
  CHECK(ex == NULL);
  plain = make_executor(m, 256, 2);
  CHECK_OK(weft_conversation_create(plain, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "Once", 4, WEFT_TEXT_ADD_BOS));
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  gp.speculative = model;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT,
            "speculative.drafter = model needs ExecutorParams::draft_model");
  CHECK(g == NULL);
  weft_conversation_free(c);
  weft_executor_free(plain);

  /* Values out of range, naming the C field, its value and the limit. */
  ep.speculative = NULL;
  ep.draft_model = &bad;
  bad = *good;
  bad.n_seq_max = 0;
  CHECK_ERR(weft_executor_create(m, &ep, &ex), WEFT_ERR_OUT_OF_RANGE,
            "weft_executor_params.draft_model.n_seq_max = 0 is outside [1, 256]");
  bad.n_seq_max = 257;
  CHECK_ERR(weft_executor_create(m, &ep, &ex), WEFT_ERR_OUT_OF_RANGE, "n_seq_max = 257 is outside [1, 256]");
  bad = *good;
  bad.n_ctx = 32;
  CHECK_ERR(weft_executor_create(m, &ep, &ex), WEFT_ERR_OUT_OF_RANGE, "weft_executor_params.draft_model.n_ctx = 32");
  /* Above n_ctx_train * n_seq_max: the executor's check, with the draft model's limit. */
  bad.n_ctx = 0xFFFFFFF0u;
  bad.n_seq_max = 1;
  CHECK_ERR(weft_executor_create(m, &ep, &ex), WEFT_ERR_OUT_OF_RANGE, "n_ctx = 4294967280 is outside [64,");
  bad = *good;
  bad.p_min = 1.5f;
  CHECK_ERR(weft_executor_create(m, &ep, &ex), WEFT_ERR_OUT_OF_RANGE,
            "weft_executor_params.draft_model.p_min = 1.5 is outside [0, 1]");
  bad.p_min = -0.25f;
  CHECK_ERR(weft_executor_create(m, &ep, &ex), WEFT_ERR_OUT_OF_RANGE, "p_min = -0.25");
  bad = *good;
  bad.model = NULL;
  CHECK_ERR(weft_executor_create(m, &ep, &ex), WEFT_ERR_NULL_ARG, "weft_executor_params.draft_model.model");
  bad = *good;
  bad.struct_size = 4;
  CHECK_ERR(weft_executor_create(m, &ep, &ex), WEFT_ERR_STRUCT_SIZE, "draft_model.struct_size = 4");
  CHECK(ex == NULL);
}

void test_draft_model(void) {
  weft_model *m = load_tiny(), *draft_handle = load_tiny();
  weft_draft_model_params dm;
  weft_speculative_params by_model, none;
  weft_executor *plain, *drafting;
  weft_executor_stats st;
  weft_step_result old_r;
  DmRun base, got;
  if (!m || !draft_handle) return;

  CHECK(strcmp(weft_drafter_name(WEFT_DRAFTER_MODEL), "model") == 0);
  CHECK(strcmp(weft_drafter_name(3), "unknown") == 0);
  CHECK_OK(weft_draft_model_params_init(&dm, sizeof dm));
  CHECK(dm.model == NULL && dm.n_ctx == 4096 && dm.n_seq_max == 16 && dm.p_min == 0.5f);
  CHECK_ERR(weft_draft_model_params_init(&dm, 3), WEFT_ERR_STRUCT_SIZE, "weft_draft_model_params.struct_size = 3");
  CHECK_OK(weft_draft_model_params_init(&dm, sizeof dm));
  dm.model = draft_handle;
  dm.n_ctx = 512;
  dm.n_seq_max = 2;
  dm.p_min = 0.0f; /* draft max_draft whatever the confidence */
  CHECK_OK(weft_speculative_params_init(&none, sizeof none));
  by_model = none;
  by_model.drafter = WEFT_DRAFTER_MODEL;
  by_model.max_draft = 4;
  by_model.adaptive = 0; /* every draft the budgets allow: on a CPU the cost model often declines them */

  plain = dm_executor(m, NULL, NULL, sizeof(weft_executor_params));
  dm_generate(plain, NULL, &base);
  CHECK(base.n == DM_TOKENS && base.drafted == 0);

  /* The draft model as the executor's default; its handle is borrowed. */
  drafting = dm_executor(m, &dm, &by_model, sizeof(weft_executor_params));
  weft_model_free(draft_handle);
  dm_generate(drafting, NULL, &got);
  same_tokens(&base, &got);
  CHECK(got.drafted > 0 && got.step_drafted == got.drafted);
  /* Drafting for itself: nearly every draft is kept. */
  CHECK(got.accepted > 0 && got.accepted <= got.drafted && got.accepted * 2 > got.drafted);
  CHECK(got.step_draft_seconds > 0);
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(drafting, &st));
  CHECK(st.tokens_drafted == got.drafted && st.drafts_accepted == got.accepted);
  CHECK(st.draft_model_tokens > 0 && st.draft_model_seconds > 0);
  CHECK(fabs(st.draft_model_seconds - got.step_draft_seconds) < 1e-9);
  printf("  draft model: %u drafted, %u accepted of %zu tokens; %llu draft-model tokens in %.1f ms\n", got.drafted,
         got.accepted, got.n, (unsigned long long)st.draft_model_tokens, st.draft_model_seconds * 1e3);

  /* A generation opts out; lookup on the same executor still works. */
  dm_generate(drafting, &none, &got);
  same_tokens(&base, &got);
  CHECK(got.drafted == 0 && got.step_draft_seconds == 0);

  /* Older result structs: the fields before the draft model's. */
  memset(&st, 0, sizeof st);
  st.struct_size = offsetof(weft_executor_stats, draft_model_tokens);
  CHECK_OK(weft_executor_get_stats(drafting, &st));
  CHECK(st.draft_model_tokens == 0 && st.tokens_drafted > 0);
  memset(&old_r, 0, sizeof old_r);
  old_r.struct_size = offsetof(weft_step_result, draft_seconds);
  CHECK_OK(weft_executor_step(drafting, NULL, &old_r));
  CHECK(old_r.idle && old_r.draft_seconds == 0);
  weft_executor_free(drafting);

  /* The draft model per generation, on an executor without a default drafter. */
  dm.model = m;
  drafting = dm_executor(m, &dm, NULL, sizeof(weft_executor_params));
  dm_generate(drafting, &by_model, &got);
  same_tokens(&base, &got);
  CHECK(got.drafted > 0 && got.accepted > 0);
  weft_executor_free(drafting);

  /* An executor params struct from before `draft_model`: none, so the model drafter is refused. */
  drafting = dm_executor(m, &dm, NULL, offsetof(weft_executor_params, draft_model));
  {
    weft_conversation *c = NULL;
    weft_generation *g = NULL;
    weft_generate_params gp;
    CHECK_OK(weft_conversation_create(drafting, &c));
    CHECK_OK(weft_conversation_prompt_text(c, "Once", 4, WEFT_TEXT_ADD_BOS));
    CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
    gp.speculative = &by_model;
    CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "needs ExecutorParams::draft_model");
    weft_conversation_free(c);
  }
  weft_executor_free(drafting);

  check_refusals(m, &dm, &by_model);
  weft_executor_free(plain);
  weft_model_free(m);
}
