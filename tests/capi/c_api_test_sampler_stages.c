/* C ABI tests: typical_p, XTC, DRY and mirostat in weft_sampler_params —
   their defaults, that they reach the sampler (other draws for the same
   seed), a state saved with them (version 10) sampling as the original,
   the refusals, and a struct_size from before them reading the defaults. */
#include "c_api_test.h"

static void draws(weft_conversation *c, weft_token *out, int n) {
  int i;
  for (i = 0; i < n; ++i) CHECK_OK(weft_conversation_sample(c, &out[i]));
}

void test_sampler_stages(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL, *d = NULL, *back = NULL;
  weft_sampler_params sp, old;
  weft_bytes *b = NULL;
  const uint8_t *data = NULL;
  size_t size = 0;
  weft_token plain[16], staged[16], t = -1, u = -1;
  const char *breakers[2];
  int i, differ = 0;
  if (!m) return;
  ex = make_executor(m, 512, 4);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "The smith said the smith said the", 33, WEFT_TEXT_ADD_BOS));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_fork(c, &d));
  run_until_idle(ex);

  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  CHECK(sp.typical_p == 1.0f && sp.xtc_probability == 0.0f && fabsf(sp.xtc_threshold - 0.1f) < 1e-7f);
  CHECK(sp.dry_multiplier == 0.0f && sp.dry_base == 1.75f && sp.dry_allowed_length == 2 && sp.dry_penalty_last_n == -1);
  CHECK(sp.dry_sequence_breakers == NULL && sp.n_dry_sequence_breakers == 0);
  CHECK(sp.mirostat == 0 && sp.mirostat_tau == 5.0f && fabsf(sp.mirostat_eta - 0.1f) < 1e-7f);

  /* The same seed with and without the stages: other draws. */
  sp.temperature = 1.0f;
  sp.seed = 21;
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  draws(c, plain, 16);
  sp.typical_p = 0.9f;
  sp.xtc_probability = 0.5f;
  sp.xtc_threshold = 0.001f;
  sp.dry_multiplier = 0.8f;
  breakers[0] = ".";
  breakers[1] = "\n";
  sp.dry_sequence_breakers = breakers;
  sp.n_dry_sequence_breakers = 2;
  sp.mirostat = 2;
  sp.mirostat_tau = 4.0f;
  sp.mirostat_eta = 0.2f;
  CHECK_OK(weft_conversation_set_sampler(d, &sp));
  draws(d, staged, 16);
  for (i = 0; i < 16; ++i) differ += plain[i] != staged[i];
  CHECK(differ > 0);

  /* Saved (version 10) and loaded: the same draws as the original. */
  CHECK_OK(weft_conversation_save(d, &b));
  CHECK_OK(weft_bytes_data(b, &data, &size));
  CHECK(size > 12 && data[8] == 10);
  CHECK_OK(weft_executor_load(ex, data, size, &back));
  CHECK_OK(weft_bytes_free(b));
  for (i = 0; i < 12; ++i) {
    CHECK_OK(weft_conversation_sample(d, &t));
    CHECK_OK(weft_conversation_sample(back, &u));
    CHECK(t == u);
  }

  /* Refusals, each naming its field. */
  sp.mirostat = 1;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "SamplerParams.mirostat = 1");
  sp.mirostat = 2;
  sp.dry_sequence_breakers = NULL;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_NULL_ARG, "weft_sampler_params.dry_sequence_breakers");
  sp.dry_sequence_breakers = breakers;
  sp.n_dry_sequence_breakers = 65;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "n_dry_sequence_breakers = 65");
  breakers[1] = "";
  sp.n_dry_sequence_breakers = 2;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "dry_sequence_breakers[1] is 0 bytes");
  sp.n_dry_sequence_breakers = 0; /* non-NULL, none: no breakers at all */
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  sp.typical_p = 0.0f;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "SamplerParams.typical_p = 0");

  /* A caller from before the stages: what follows its struct_size is not read. */
  old = sp;
  old.struct_size = offsetof(weft_sampler_params, typical_p);
  old.mirostat = 7;
  old.dry_sequence_breakers = NULL;
  old.n_dry_sequence_breakers = 99;
  CHECK_OK(weft_conversation_set_sampler(c, &old));

  CHECK_OK(weft_conversation_free(back));
  CHECK_OK(weft_conversation_free(d));
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}
