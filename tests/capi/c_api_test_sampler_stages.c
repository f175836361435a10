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

/* Tools through the C ABI: weft_tools_prompt describes them; a required
   call comes back through weft_generation_tool_call with a tool's name and
   arguments its schema allows; a reply without a call says so; the
   refusals. */
void test_tools(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL;
  weft_generation *g = NULL;
  weft_generate_params gp;
  weft_sampler_params sp;
  weft_tool tools[2];
  char *prompt, name[80], args[512];
  size_t len = 0, name_len = 0, args_len = 0;
  weft_bool done = 0, has = 0;
  int seed;
  if (!m) return;
  ex = make_executor(m, 2048, 4);
  tools[0].name = "give_item";
  tools[0].description = "Give the player an item.";
  tools[0].parameters = "{\"type\": \"object\", \"properties\": {\"item\": {\"enum\": [\"sword\", \"shield\"]}}, "
                        "\"required\": [\"item\"], \"additionalProperties\": false}";
  tools[1].name = "open_gate";
  tools[1].description = NULL;
  tools[1].parameters = "{\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false}";
  CHECK_ERR(weft_tools_prompt(tools, 2, NULL, 0, &len), WEFT_ERR_BUFFER_TOO_SMALL, "");
  prompt = (char *)malloc(len + 1);
  CHECK_OK(weft_tools_prompt(tools, 2, prompt, len + 1, &len));
  CHECK(strstr(prompt, "give_item: Give the player an item.") != NULL && strstr(prompt, "<tool_call>") != NULL);

  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  sp.temperature = 1.0f;
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  CHECK(gp.tools == NULL && gp.n_tools == 0 && gp.tool_choice == WEFT_TOOL_CHOICE_AUTO &&
        gp.tool_format == WEFT_TOOL_FORMAT_AUTO);
  gp.max_tokens = 200;
  gp.sampler = &sp;
  gp.tools = tools;
  gp.n_tools = 2;
  gp.tool_choice = WEFT_TOOL_CHOICE_REQUIRED;
  for (seed = 1; seed <= 4; ++seed) {
    sp.seed = (uint32_t)seed;
    CHECK_OK(weft_conversation_create(ex, &c));
    CHECK_OK(weft_conversation_prompt_text(c, prompt, len, WEFT_TEXT_ADD_BOS));
    CHECK_OK(weft_conversation_generate(c, &gp, &g));
    run_until_idle(ex);
    CHECK_OK(weft_generation_wait(g, 60000, &done));
    CHECK(done == 1);
    CHECK_ERR(weft_generation_tool_call(g, &has, name, 2, &name_len, args, sizeof args, &args_len),
              WEFT_ERR_BUFFER_TOO_SMALL, "");
    CHECK(name_len >= 9 && args_len >= 2);
    CHECK_OK(weft_generation_tool_call(g, &has, name, sizeof name, &name_len, args, sizeof args, &args_len));
    CHECK(has == 1);
    CHECK((strcmp(name, "give_item") == 0 &&
           (strcmp(args, "{\"item\":\"sword\"}") == 0 || strcmp(args, "{\"item\":\"shield\"}") == 0)) ||
          (strcmp(name, "open_gate") == 0 && strcmp(args, "{}") == 0));
    CHECK_OK(weft_generation_free(g));
    CHECK_OK(weft_conversation_free(c));
  }
  /* In Llama 3's format: the call is its JSON, parsed the same way. */
  gp.tool_format = WEFT_TOOL_FORMAT_LLAMA3;
  sp.seed = 5;
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, prompt, len, WEFT_TEXT_ADD_BOS));
  CHECK_OK(weft_conversation_generate(c, &gp, &g));
  run_until_idle(ex);
  CHECK_OK(weft_generation_tool_call(g, &has, name, sizeof name, &name_len, args, sizeof args, &args_len));
  CHECK(has == 1 && (strcmp(name, "give_item") == 0 || strcmp(name, "open_gate") == 0));
  CHECK_OK(weft_generation_free(g));
  CHECK_OK(weft_conversation_free(c));
  gp.tool_format = 9;
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "Hello", 5, WEFT_TEXT_ADD_BOS));
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "tool_format = 9");
  CHECK_OK(weft_conversation_free(c));
  gp.tool_format = WEFT_TOOL_FORMAT_AUTO;
  {
    char text[128];
    size_t n = 0;
    CHECK_OK(weft_tool_result_prompt("say \"hi\"", WEFT_TOOL_FORMAT_MISTRAL, text, sizeof text, &n));
    CHECK(strcmp(text, "[TOOL_RESULTS]{\"content\": \"say \\\"hi\\\"\"}[/TOOL_RESULTS]") == 0 && n == strlen(text));
    CHECK_OK(weft_tool_result_prompt("ok", WEFT_TOOL_FORMAT_AUTO, text, sizeof text, &n));
    CHECK(strcmp(text, "<tool_response>\nok\n</tool_response>") == 0);
    CHECK_ERR(weft_tool_result_prompt("ok", 4, text, sizeof text, &n), WEFT_ERR_INVALID_ARGUMENT, "format = 4");
    CHECK_OK(weft_tool_call_text("open_gate", "{}", WEFT_TOOL_FORMAT_MISTRAL, text, sizeof text, &n));
    CHECK(strcmp(text, "[TOOL_CALLS][{\"name\":\"open_gate\",\"arguments\":{}}]") == 0);
    CHECK_ERR(weft_tool_call_text("open_gate", "nope", WEFT_TOOL_FORMAT_HERMES, text, sizeof text, &n),
              WEFT_ERR_INVALID_ARGUMENT, "not a JSON object");
    CHECK_ERR(weft_tool_result_prompt(NULL, WEFT_TOOL_FORMAT_HERMES, text, sizeof text, &n), WEFT_ERR_NULL_ARG, "result");
    CHECK_ERR(weft_tools_prompt_format(tools, 2, WEFT_TOOL_FORMAT_MISTRAL, NULL, 0, &n), WEFT_ERR_BUFFER_TOO_SMALL, "");
    CHECK(n > 17);
    CHECK_ERR(weft_tools_prompt_format(tools, 2, -1, NULL, 0, &n), WEFT_ERR_INVALID_ARGUMENT, "format = -1");
  }
  /* No tools: no call. */
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "Hello", 5, WEFT_TEXT_ADD_BOS));
  gp.tools = NULL;
  gp.n_tools = 0;
  gp.max_tokens = 4;
  CHECK_OK(weft_conversation_generate(c, &gp, &g));
  run_until_idle(ex);
  CHECK_OK(weft_generation_tool_call(g, &has, name, sizeof name, &name_len, args, sizeof args, &args_len));
  CHECK(has == 0);
  CHECK_OK(weft_generation_free(g));
  /* Refusals. */
  gp.n_tools = 1;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_NULL_ARG, "weft_generate_params.tools");
  gp.tools = tools;
  gp.tool_choice = 7;
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "tool_choice = 7");
  gp.tool_choice = WEFT_TOOL_CHOICE_AUTO;
  tools[0].name = "give item";
  CHECK_ERR(weft_conversation_generate(c, &gp, &g), WEFT_ERR_INVALID_ARGUMENT, "name 'give item'");
  CHECK_OK(weft_conversation_free(c));
  free(prompt);
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* Banned strings through the C ABI: a greedy reply with two bytes of the
   unbanned reply banned holds neither and differs; a conversation sampler
   with them is saved as version 12; the refusals; a struct_size from before
   them reads none. */
void test_banned_strings(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL;
  weft_generation *g = NULL;
  weft_generate_params gp;
  weft_sampler_params sp, old;
  weft_bytes *b = NULL;
  const uint8_t *data = NULL;
  size_t size = 0, len = 0;
  char plain[512], banned[512], ban[3];
  const char *bans[2];
  int pass;
  if (!m) return;
  ex = make_executor(m, 512, 4);
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  CHECK(sp.banned_strings == NULL && sp.n_banned_strings == 0);
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  gp.max_tokens = 16;
  gp.ignore_eos = 1;
  gp.sampler = &sp;
  for (pass = 0; pass < 2; ++pass) {
    CHECK_OK(weft_conversation_create(ex, &c));
    CHECK_OK(weft_conversation_prompt_text(c, "The smith said", 14, WEFT_TEXT_ADD_BOS));
    CHECK_OK(weft_conversation_generate(c, &gp, &g));
    run_until_idle(ex);
    CHECK_OK(weft_generation_text(g, pass == 0 ? plain : banned, sizeof plain, &len));
    CHECK_OK(weft_generation_free(g));
    CHECK_OK(weft_conversation_free(c));
    if (pass == 0) {
      CHECK(len >= 4);
      if (len < 4) break;
      /* Two bytes from the middle of the plain reply (not a NUL). */
      ban[0] = plain[len / 2];
      ban[1] = plain[len / 2 + 1];
      ban[2] = '\0';
      bans[0] = ban;
      sp.banned_strings = bans;
      sp.n_banned_strings = 1;
    }
  }
  if (len > 0) {
    CHECK(strstr(banned, ban) == NULL);
    CHECK(strcmp(banned, plain) != 0);
  }

  /* A conversation's sampler with them: state version 12. */
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "The smith said", 14, WEFT_TEXT_ADD_BOS));
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_save(c, &b));
  CHECK_OK(weft_bytes_data(b, &data, &size));
  CHECK(size > 12 && data[8] == 12);
  CHECK_OK(weft_bytes_free(b));

  /* Refusals. */
  sp.banned_strings = NULL;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_NULL_ARG, "weft_sampler_params.banned_strings");
  sp.banned_strings = bans;
  sp.n_banned_strings = 257;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "n_banned_strings = 257");
  bans[1] = "";
  sp.n_banned_strings = 2;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_INVALID_ARGUMENT, "banned_strings[1] is 0 bytes");
  bans[1] = NULL;
  CHECK_ERR(weft_conversation_set_sampler(c, &sp), WEFT_ERR_NULL_ARG, "weft_sampler_params.banned_strings[1]");

  /* A caller from before them: what follows its struct_size is not read. */
  old = sp;
  old.struct_size = offsetof(weft_sampler_params, banned_strings);
  old.banned_strings = NULL;
  old.n_banned_strings = 99;
  CHECK_OK(weft_conversation_set_sampler(c, &old));

  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}
