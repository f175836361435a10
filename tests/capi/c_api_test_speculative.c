/* C ABI tests: speculative decoding. A greedy generation with a lookup
   drafter (per generation, and as the executor's default) gives the same
   tokens as one without and reports drafts; the step results and stats
   count the same drafts; bad values are refused naming field and value. */
#include "c_api_test.h"

#define SPEC_TOKENS 48

/* Greedy over a few tokens far above the rest: the reply repeats itself,
   so lookup has something to copy (the model's logits still choose). */
static const weft_logit_bias kAlphabet[] = {{300, 30.0f}, {301, 30.0f}, {302, 30.0f}, {303, 30.0f}, {304, 30.0f}};

/* Generates SPEC_TOKENS on a fresh conversation with the prompt; steps
   until idle, summing the step results' draft counts into *step_drafted. */
static size_t generate(weft_executor *ex, const weft_speculative_params *spec, weft_token *out, uint32_t *drafted,
                       uint32_t *accepted, uint64_t *step_drafted) {
  weft_conversation *c = NULL;
  weft_generation *g = NULL;
  weft_generate_params gp;
  weft_sampler_params sp;
  weft_step_result r;
  size_t n = 0;
  int guard = 0;
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "Once upon a time there was a time", 33, WEFT_TEXT_ADD_BOS));
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  sp.logit_bias = kAlphabet;
  sp.n_logit_bias = sizeof kAlphabet / sizeof kAlphabet[0];
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  CHECK(gp.speculative == NULL);
  gp.sampler = &sp;
  gp.max_tokens = SPEC_TOKENS;
  gp.ignore_eos = 1;
  gp.speculative = spec;
  CHECK_OK(weft_conversation_generate(c, &gp, &g));
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  *step_drafted = 0;
  do {
    CHECK_OK(weft_executor_step(ex, NULL, &r));
    CHECK(r.drafts_accepted <= r.tokens_drafted);
    CHECK(r.tokens_drafted <= r.tokens_decoded);
    *step_drafted += r.tokens_drafted;
  } while (!r.idle && ++guard < 10000);
  CHECK_OK(weft_generation_tokens(g, out, SPEC_TOKENS, &n));
  CHECK_OK(weft_generation_drafts(g, drafted, accepted));
  CHECK_OK(weft_generation_drafts(g, NULL, NULL));
  weft_generation_free(g);
  weft_conversation_free(c);
  return n;
}

static weft_executor *executor_with(weft_model *m, const weft_speculative_params *spec, size_t struct_size) {
  weft_executor_params p;
  weft_executor *ex = NULL;
  CHECK_OK(weft_executor_params_init(&p, struct_size));
  p.n_ctx = 1024;
  p.n_batch = 64;
  p.n_seq_max = 4;
  p.n_threads = 2;
  if (struct_size == sizeof p) p.speculative = spec;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  return ex;
}

void test_speculative(void) {
  weft_model *m = load_tiny();
  weft_executor *plain, *spec_ex, *bad = NULL;
  weft_speculative_params lookup, none, wrong;
  weft_executor_params ep;
  weft_executor_stats st;
  weft_generate_params gp;
  weft_conversation *c = NULL;
  weft_generation *g = NULL;
  weft_token base[SPEC_TOKENS], got[SPEC_TOKENS];
  uint32_t drafted = 99, accepted = 99;
  uint64_t step_drafted = 0;
  size_t n_base, n;
  if (!m) return;

  CHECK(strcmp(weft_drafter_name(WEFT_DRAFTER_NONE), "none") == 0);
  CHECK(strcmp(weft_drafter_name(WEFT_DRAFTER_LOOKUP), "lookup") == 0);
  CHECK(strcmp(weft_drafter_name(7), "unknown") == 0);
  CHECK_OK(weft_speculative_params_init(&none, sizeof none));
  CHECK(none.drafter == WEFT_DRAFTER_NONE && none.max_draft == 8 && none.ngram_max == 3 && none.ngram_min == 2);
  CHECK(none.adaptive == 1);
  CHECK_ERR(weft_speculative_params_init(&wrong, 3), WEFT_ERR_STRUCT_SIZE, "weft_speculative_params.struct_size = 3");
  lookup = none;
  lookup.drafter = WEFT_DRAFTER_LOOKUP;
  lookup.ngram_min = 1;
  lookup.adaptive = 0; /* every draft the budgets allow: on a CPU the cost model often declines them */

  /* Without drafts: the reference. */
  plain = executor_with(m, NULL, sizeof ep);
  n_base = generate(plain, NULL, base, &drafted, &accepted, &step_drafted);
  CHECK(n_base == SPEC_TOKENS);
  CHECK(drafted == 0 && accepted == 0 && step_drafted == 0);

  /* Per generation: the same tokens, and drafts verified. */
  n = generate(plain, &lookup, got, &drafted, &accepted, &step_drafted);
  CHECK(n == n_base && memcmp(got, base, n * sizeof got[0]) == 0);
  CHECK(drafted > 0);
  CHECK(accepted > 0 && accepted <= drafted);
  CHECK(step_drafted == drafted);
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(plain, &st));
  CHECK(st.tokens_drafted == drafted && st.drafts_accepted == accepted);
  printf("  speculative: %u drafted, %u accepted of %zu tokens; stats %llu, %llu\n", drafted, accepted, n,
         (unsigned long long)st.tokens_drafted, (unsigned long long)st.drafts_accepted);
  /* An older stats struct (before the draft counts) is still filled. */
  memset(&st, 0, sizeof st);
  st.struct_size = offsetof(weft_executor_stats, tokens_drafted);
  CHECK_OK(weft_executor_get_stats(plain, &st));
  CHECK(st.tokens_drafted == 0 && st.steps > 0);

  /* The executor's default: drafts unless a generation opts out. */
  spec_ex = executor_with(m, &lookup, sizeof ep);
  n = generate(spec_ex, NULL, got, &drafted, &accepted, &step_drafted);
  CHECK(n == n_base && memcmp(got, base, n * sizeof got[0]) == 0);
  CHECK(drafted > 0 && step_drafted == drafted);
  n = generate(spec_ex, &none, got, &drafted, &accepted, &step_drafted);
  CHECK(n == n_base && memcmp(got, base, n * sizeof got[0]) == 0);
  CHECK(drafted == 0 && step_drafted == 0);
  weft_executor_free(spec_ex);
  /* An executor params struct from before `speculative`: no drafter. */
  spec_ex = executor_with(m, &lookup, offsetof(weft_executor_params, speculative));
  n = generate(spec_ex, NULL, got, &drafted, &accepted, &step_drafted);
  CHECK(n == n_base && drafted == 0);
  weft_executor_free(spec_ex);

  /* Bad values, refused naming the field, the value and the limit. */
  CHECK_OK(weft_conversation_create(plain, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "Once", 4, WEFT_TEXT_ADD_BOS));
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  gp.speculative = &wrong;
  wrong = lookup;
  wrong.max_draft = 0;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_OUT_OF_RANGE,
            "weft_generate_params.speculative.max_draft = 0 is outside [1, 32]");
  wrong.max_draft = 33;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_OUT_OF_RANGE, "max_draft = 33 is outside [1, 32]");
  wrong = lookup;
  wrong.drafter = 7;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT,
            "weft_generate_params.speculative.drafter = 7 is not a weft_drafter");
  wrong = lookup;
  wrong.ngram_min = 3;
  wrong.ngram_max = 2;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_OUT_OF_RANGE, "ngram_min = 3 and ngram_max = 2");
  wrong = lookup;
  wrong.ngram_max = 9;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_OUT_OF_RANGE, "<= 8");
  wrong = lookup;
  wrong.struct_size = 5;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_STRUCT_SIZE, "speculative.struct_size = 5");
  CHECK(g == NULL);
  /* A generate params struct from before `speculative` still works. */
  CHECK_OK(weft_generate_params_init(&gp, offsetof(weft_generate_params, speculative)));
  gp.max_tokens = 2;
  CHECK_OK(weft_conversation_generate(c, &gp, &g));
  run_until_idle(plain);
  CHECK_OK(weft_generation_drafts(g, &drafted, &accepted));
  CHECK(drafted == 0);
  CHECK_ERR(weft_generation_drafts(NULL, &drafted, &accepted), WEFT_ERR_NULL_ARG, "generation");
  weft_generation_free(g);
  weft_conversation_free(c);

  CHECK_OK(weft_executor_params_init(&ep, sizeof ep));
  wrong = lookup;
  wrong.max_draft = 0;
  ep.speculative = &wrong;
  CHECK_ERR(weft_executor_create(m, &ep, &bad), WEFT_ERR_OUT_OF_RANGE,
            "weft_executor_params.speculative.max_draft = 0 is outside [1, 32]");
  CHECK(bad == NULL);

  weft_executor_free(plain);
  weft_model_free(m);
}
