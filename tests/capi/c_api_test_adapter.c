/* C ABI tests: LoRA adapters and control vectors (weft/c/adapter.h).
   Loading and its refusals, the accessors, a conversation's setting (set,
   read back, cleared, inherited by a fork), logits under each setting
   against the same setting decoded alone in an executor of its own (and
   against the base model), every refusal of set_adapters leaving the
   setting unchanged, the stats' adapter fields (and the older stats size).
   Lifetimes and save/load:
   c_api_test_adapter_life.c.

   The adapter files are made by the `weft make-adapter` CLI beside the
   model (the make_capi_adapters_* fixtures in c_api_tests.cmake): for
   <dir>/tiny.gguf, <dir>/tiny-lora.gguf and <dir>/tiny-cvec.gguf. */
#include "c_api_test.h"

/* --- Helpers (declared in c_api_test.h; c_api_test_adapter_life.c uses them) --- */

/* <model path without .gguf><suffix>, in a static buffer per slot. */
const char *beside_model(int slot, const char *suffix) {
  static char paths[3][1024];
  size_t n = strlen(g_model_path);
  if (n >= 5 && strcmp(g_model_path + n - 5, ".gguf") == 0) n -= 5;
  snprintf(paths[slot], sizeof paths[slot], "%.*s%s", (int)n, g_model_path, suffix);
  return paths[slot];
}
const char *lora_path(void) { return beside_model(0, "-lora.gguf"); }
const char *cvec_path(void) { return beside_model(1, "-cvec.gguf"); }

weft_adapter *load_adapter(weft_model *m, const char *path) {
  weft_adapter *a = NULL;
  if (access(path, R_OK) != 0) {
    failf(__FILE__, __LINE__, "adapter file %s is missing (made by the make_capi_adapters_* CTest fixtures: "
          "weft make-adapter --base <model> --kind lora|cvec --out ...)", path);
    return NULL;
  }
  CHECK_OK(weft_model_load_adapter(m, path, &a));
  return a;
}

weft_adapter_use use_of(weft_adapter *a, float scale) {
  weft_adapter_use u;
  CHECK_OK(weft_adapter_use_init(&u, sizeof u));
  u.adapter = a;
  u.scale = scale;
  return u;
}

void prompt_fixed(weft_conversation *c) {
  weft_token toks[N_PROMPT];
  int i;
  for (i = 0; i < N_PROMPT; ++i) toks[i] = (weft_token)(100 + 13 * i);
  CHECK_OK(weft_conversation_prompt_tokens(c, toks, N_PROMPT));
}

/* The logits of the fixed prompt decoded alone, in an executor of its own,
   under `uses` (n of them). */
void logits_alone(weft_model *m, const weft_adapter_use *uses, size_t n, float *out, size_t cap) {
  weft_executor *ex = make_executor(m, 256, 2);
  weft_conversation *c = NULL;
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_set_adapters(c, uses, n));
  prompt_fixed(c);
  run_until_idle(ex);
  get_logits(c, out, cap);
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_executor_free(ex));
}

/* The size query: WEFT_OK for an empty setting, else BUFFER_TOO_SMALL. */
size_t adapter_count(weft_conversation *c) {
  size_t n = 999;
  const weft_status s = weft_conversation_adapters(c, NULL, 0, &n);
  if (s != (n == 0 ? WEFT_OK : WEFT_ERR_BUFFER_TOO_SMALL))
    failf(__FILE__, __LINE__, "size query -> %s (n = %zu): %s", weft_status_name(s), n, weft_last_error());
  return n;
}

/* --- Tests ------------------------------------------------------------------- */

void test_adapter_load(void) {
  weft_model *m = load_tiny();
  weft_adapter *lora, *cvec, *again = NULL, *a = NULL;
  weft_model_info info;
  int32_t kind = -1, layers = -1;
  uint64_t f_lora = 0, f_cvec = 0, f_again = 0;
  char buf[1024];
  size_t len = 0;
  FILE *f;
  char junk[1024];
  if (!m) return;
  lora = load_adapter(m, lora_path());
  cvec = load_adapter(m, cvec_path());
  if (!lora || !cvec) {
    weft_model_free(m);
    return;
  }
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(weft_model_get_info(m, &info));

  CHECK_OK(weft_adapter_get_kind(lora, &kind));
  CHECK(kind == WEFT_ADAPTER_LORA);
  CHECK_OK(weft_adapter_get_kind(cvec, &kind));
  CHECK(kind == WEFT_ADAPTER_CONTROL_VECTOR);
  CHECK(strcmp(weft_adapter_kind_name(WEFT_ADAPTER_LORA), "lora") == 0);
  CHECK(strcmp(weft_adapter_kind_name(WEFT_ADAPTER_CONTROL_VECTOR), "control_vector") == 0);
  CHECK(strcmp(weft_adapter_kind_name(2), "unknown") == 0 && strcmp(weft_adapter_kind_name(-1), "unknown") == 0);

  CHECK_OK(weft_adapter_n_layers(lora, &layers));
  CHECK(layers == 0);
  CHECK_OK(weft_adapter_n_layers(cvec, &layers));
  CHECK(layers >= 1 && layers <= info.n_layer - 1);

  CHECK_OK(weft_adapter_path(lora, buf, sizeof buf, &len));
  CHECK(strcmp(buf, lora_path()) == 0 && len == strlen(lora_path()));
  CHECK_ERR(weft_adapter_path(lora, buf, len, &len), WEFT_ERR_BUFFER_TOO_SMALL, "plus a NUL");
  CHECK_ERR(weft_adapter_name(cvec, NULL, 0, &len), WEFT_ERR_BUFFER_TOO_SMALL, "plus a NUL");
  CHECK(len > 0);
  CHECK_OK(weft_adapter_name(cvec, buf, sizeof buf, &len));
  CHECK(strlen(buf) == len);

  /* Fingerprints: of the contents; a second load of the same file agrees. */
  CHECK_OK(weft_adapter_fingerprint(lora, &f_lora));
  CHECK_OK(weft_adapter_fingerprint(cvec, &f_cvec));
  CHECK(f_lora != 0 && f_cvec != 0 && f_lora != f_cvec);
  CHECK_OK(weft_model_load_adapter(m, lora_path(), &again));
  CHECK_OK(weft_adapter_fingerprint(again, &f_again));
  CHECK(f_again == f_lora && again != lora);
  CHECK_OK(weft_adapter_free(again));

  /* Refusals; the out pointer is NULL after each. */
  a = (weft_adapter *)&junk;
  CHECK_ERR(weft_model_load_adapter(m, "/nonexistent/x.gguf", &a), WEFT_ERR_NOT_FOUND, "does not exist");
  CHECK(a == NULL);
  CHECK_ERR(weft_model_load_adapter(m, "/tmp", &a), WEFT_ERR_INVALID_ARGUMENT, "directory");
  CHECK_ERR(weft_model_load_adapter(m, "", &a), WEFT_ERR_INVALID_ARGUMENT, "empty");
  CHECK_ERR(weft_model_load_adapter(m, NULL, &a), WEFT_ERR_NULL_ARG, "`path`");
  CHECK_ERR(weft_model_load_adapter(m, lora_path(), NULL), WEFT_ERR_NULL_ARG, "`out`");
  CHECK_ERR(weft_model_load_adapter(NULL, lora_path(), &a), WEFT_ERR_NULL_ARG, "weft_model handle is NULL");
  /* The base model is a GGUF but neither kind of adapter. */
  CHECK_ERR(weft_model_load_adapter(m, g_model_path, &a), WEFT_ERR_INVALID_ARGUMENT, "neither");
  snprintf(junk, sizeof junk, "/tmp/weft_c_api_adapter_%ld.gguf", (long)getpid());
  f = fopen(junk, "wb");
  CHECK(f != NULL);
  if (f) {
    fputs("not a gguf file at all", f);
    fclose(f);
    CHECK_ERR(weft_model_load_adapter(m, junk, &a), WEFT_ERR_CORRUPT, "not a GGUF");
    remove(junk);
  }
  CHECK(a == NULL);

  /* Handle checks: wrong type, NULL outputs, freed. */
  CHECK_ERR(weft_adapter_get_kind((const weft_adapter *)m, &kind), WEFT_ERR_INVALID_HANDLE,
            "is a weft_model, not a weft_adapter");
  CHECK_ERR(weft_adapter_fingerprint(lora, NULL), WEFT_ERR_NULL_ARG, "`out`");
  CHECK_ERR(weft_adapter_n_layers(NULL, &layers), WEFT_ERR_NULL_ARG, "weft_adapter handle is NULL");
  CHECK_OK(weft_adapter_free(NULL));
  CHECK_OK(weft_adapter_free(lora));
  CHECK_ERR(weft_adapter_get_kind(lora, &kind), WEFT_ERR_INVALID_HANDLE, "not live");
  CHECK_ERR(weft_adapter_free(lora), WEFT_ERR_INVALID_HANDLE, "not live");
  CHECK_OK(weft_adapter_free(cvec));
  CHECK_OK(weft_model_free(m));
}

void test_adapter_logits(void) {
  weft_model *m = load_tiny();
  weft_adapter *lora, *cvec;
  weft_executor *ex;
  weft_conversation *c[4] = {NULL, NULL, NULL, NULL}, *fork = NULL;
  weft_adapter_use setting[4][2];
  size_t n_setting[4] = {0, 1, 1, 2};
  weft_adapter_use got[3];
  weft_executor_stats st;
  float *batched, *alone, *again;
  int32_t n_vocab = 0;
  size_t n = 0, i;
  uint64_t f = 0, f_lora = 0;
  if (!m) return;
  lora = load_adapter(m, lora_path());
  cvec = load_adapter(m, cvec_path());
  if (!lora || !cvec) {
    weft_model_free(m);
    return;
  }
  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  batched = (float *)malloc(sizeof(float) * (size_t)n_vocab * 4);
  alone = (float *)malloc(sizeof(float) * (size_t)n_vocab);
  again = (float *)malloc(sizeof(float) * (size_t)n_vocab);

  /* Four conversations in one executor, one step: base, LoRA, control
     vector, both (the LoRA at half strength). */
  setting[1][0] = use_of(lora, 1.0f);
  setting[2][0] = use_of(cvec, 1.0f);
  setting[3][0] = use_of(lora, 0.5f);
  setting[3][1] = use_of(cvec, 1.0f);
  ex = make_executor(m, 512, 4);
  for (i = 0; i < 4; ++i) {
    CHECK_OK(weft_conversation_create(ex, &c[i]));
    CHECK_OK(weft_conversation_set_adapters(c[i], n_setting[i] ? setting[i] : NULL, n_setting[i]));
    prompt_fixed(c[i]);
  }
  run_until_idle(ex);
  for (i = 0; i < 4; ++i) get_logits(c[i], batched + i * (size_t)n_vocab, (size_t)n_vocab);

  /* Each equals its setting decoded alone in an executor of its own, and
     differs from the base model's by far more than batch noise. */
  for (i = 0; i < 4; ++i) {
    const float *mine = batched + i * (size_t)n_vocab;
    double err;
    logits_alone(m, setting[i], n_setting[i], alone, (size_t)n_vocab);
    err = nmse(mine, alone, (size_t)n_vocab);
    if (!(err < LOGITS_TOLERANCE)) failf(__FILE__, __LINE__, "setting %zu: nmse %g vs alone", i, err);
    if (i > 0) {
      err = nmse(mine, batched, (size_t)n_vocab);
      if (!(err > 1e-4)) failf(__FILE__, __LINE__, "setting %zu: nmse %g vs the base model: no effect", i, err);
    }
  }
  /* Decoded alone twice, in the same batch shapes: bitwise equal. */
  logits_alone(m, setting[3], 2, alone, (size_t)n_vocab);
  logits_alone(m, setting[3], 2, again, (size_t)n_vocab);
  CHECK(memcmp(alone, again, sizeof(float) * (size_t)n_vocab) == 0);
  /* The LoRA and the control vector differ from each other too. */
  CHECK(nmse(batched + (size_t)n_vocab, batched + 2 * (size_t)n_vocab, (size_t)n_vocab) > 1e-4);

  /* The stats: a step of four settings switched at least three times; the
     size before the adapter fields is still accepted, and not written past. */
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.adapter_switches >= 3);
  CHECK(st.adapter_switch_ms >= 0.0);
  memset(&st, 0xab, sizeof st);
  st.struct_size = offsetof(weft_executor_stats, adapter_switches);
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.tokens_decoded >= 4 * N_PROMPT && st.struct_size == offsetof(weft_executor_stats, adapter_switches));
  CHECK(st.adapter_switches == 0xababababababababull);

  /* Reading the setting back: count query, too small, then filled. */
  CHECK(adapter_count(c[0]) == 0);
  CHECK_ERR(weft_conversation_adapters(c[3], got, 1, &n), WEFT_ERR_BUFFER_TOO_SMALL, "needs 2 elements");
  CHECK(n == 2);
  got[0].struct_size = sizeof got[0];
  CHECK_OK(weft_conversation_adapters(c[3], got, 3, &n));
  CHECK(n == 2);
  CHECK_OK(weft_adapter_fingerprint(lora, &f_lora));
  CHECK_OK(weft_adapter_fingerprint(got[0].adapter, &f));
  CHECK(f == f_lora && got[0].adapter != lora && got[0].scale == 0.5f);
  CHECK(got[0].layer_start == -1 && got[0].layer_end == -1); /* a LoRA's stay -1 */
  CHECK(got[1].struct_size == sizeof got[1] && got[1].scale == 1.0f);
  CHECK(got[1].layer_start == 1 && got[1].layer_end >= 1); /* resolved */
  /* A handle from the getter is a full adapter: it sets another conversation. */
  CHECK_OK(weft_conversation_set_adapters(c[0], got, 2));
  CHECK(adapter_count(c[0]) == 2);
  CHECK_OK(weft_adapter_free(got[0].adapter));
  CHECK_OK(weft_adapter_free(got[1].adapter));
  /* Cleared: back to the base model. */
  CHECK_OK(weft_conversation_set_adapters(c[0], NULL, 0));
  CHECK(adapter_count(c[0]) == 0);

  /* A fork inherits the setting; its logits are its parent's. */
  CHECK_OK(weft_conversation_fork(c[1], &fork));
  CHECK(adapter_count(fork) == 1);
  get_logits(fork, alone, (size_t)n_vocab);
  CHECK(nmse(alone, batched + (size_t)n_vocab, (size_t)n_vocab) < LOGITS_TOLERANCE);
  CHECK_OK(weft_conversation_free(fork));

  for (i = 0; i < 4; ++i) CHECK_OK(weft_conversation_free(c[i]));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_adapter_free(lora));
  CHECK_OK(weft_adapter_free(cvec));
  CHECK_OK(weft_model_free(m));
  free(batched);
  free(alone);
  free(again);
}

void test_adapter_errors(void) {
  weft_model *m = load_tiny(), *other = load_tiny();
  weft_adapter *lora, *cvec, *foreign = NULL, *gone = NULL;
  weft_executor *ex;
  weft_conversation *c = NULL, *d = NULL;
  weft_adapter_use u[2], one;
  int32_t layers = 0;
  size_t n = 0;
  if (!m || !other) return;
  lora = load_adapter(m, lora_path());
  cvec = load_adapter(m, cvec_path());
  if (!lora || !cvec) return;
  CHECK_OK(weft_adapter_n_layers(cvec, &layers));
  /* The same file, loaded for another load of the same model file. */
  CHECK_OK(weft_model_load_adapter(other, lora_path(), &foreign));
  ex = make_executor(m, 256, 2);
  CHECK_OK(weft_conversation_create(ex, &c));

  /* weft_adapter_use_init. */
  memset(&one, 0, sizeof one);
  CHECK_OK(weft_adapter_use_init(&one, sizeof one));
  CHECK(one.struct_size == sizeof one && one.adapter == NULL && one.scale == 1.0f && one.layer_start == -1 &&
        one.layer_end == -1);
  CHECK_ERR(weft_adapter_use_init(&one, sizeof one + 8), WEFT_ERR_STRUCT_SIZE, "weft_adapter_use.struct_size");
  CHECK_ERR(weft_adapter_use_init(NULL, sizeof one), WEFT_ERR_NULL_ARG, "NULL");

  /* A valid setting first: every refusal below must leave it as it is. */
  u[0] = use_of(lora, 0.75f);
  CHECK_OK(weft_conversation_set_adapters(c, u, 1));

  CHECK_ERR(weft_conversation_set_adapters(NULL, u, 1), WEFT_ERR_NULL_ARG, "weft_conversation handle is NULL");
  CHECK_ERR(weft_conversation_set_adapters(c, NULL, 1), WEFT_ERR_NULL_ARG, "`uses`");
  u[0] = use_of(NULL, 1.0f);
  CHECK_ERR(weft_conversation_set_adapters(c, u, 1), WEFT_ERR_NULL_ARG, "uses[0].adapter is NULL");
  u[0] = use_of(lora, (float)NAN);
  CHECK_ERR(weft_conversation_set_adapters(c, u, 1), WEFT_ERR_INVALID_ARGUMENT, "not finite");
  u[0] = use_of(cvec, (float)INFINITY);
  CHECK_ERR(weft_conversation_set_adapters(c, u, 1), WEFT_ERR_INVALID_ARGUMENT, "not finite");
  u[0] = use_of(lora, 1.0f);
  u[0].layer_start = 1;
  u[0].layer_end = 1;
  CHECK_ERR(weft_conversation_set_adapters(c, u, 1), WEFT_ERR_INVALID_ARGUMENT, "is a LoRA");
  u[0] = use_of(cvec, 1.0f);
  u[0].layer_start = 0;
  CHECK_ERR(weft_conversation_set_adapters(c, u, 1), WEFT_ERR_INVALID_ARGUMENT, "outside");
  u[0].layer_start = 1;
  u[0].layer_end = 99;
  CHECK_ERR(weft_conversation_set_adapters(c, u, 1), WEFT_ERR_INVALID_ARGUMENT, "outside");
  u[0] = use_of(lora, 1.0f);
  u[1] = use_of(lora, 0.5f);
  CHECK_ERR(weft_conversation_set_adapters(c, u, 2), WEFT_ERR_INVALID_ARGUMENT, "listed twice");
  u[0] = use_of(foreign, 1.0f);
  CHECK_ERR(weft_conversation_set_adapters(c, u, 1), WEFT_ERR_INVALID_ARGUMENT, "another model");
  u[0] = use_of(lora, 1.0f);
  u[0].adapter = (weft_adapter *)ex; /* a handle of another type */
  CHECK_ERR(weft_conversation_set_adapters(c, u, 1), WEFT_ERR_INVALID_HANDLE, "uses[0].adapter: handle");
  /* struct sizes: unknown, and differing within the array. */
  u[0] = use_of(lora, 1.0f);
  u[0].struct_size = sizeof u[0] + 8;
  CHECK_ERR(weft_conversation_set_adapters(c, u, 1), WEFT_ERR_STRUCT_SIZE, "weft_adapter_use.struct_size");
  u[0] = use_of(lora, 1.0f);
  u[1] = use_of(cvec, 1.0f);
  u[1].struct_size = 8;
  CHECK_ERR(weft_conversation_set_adapters(c, u, 2), WEFT_ERR_STRUCT_SIZE, "uses[1].struct_size = 8");
  /* A freed adapter handle. */
  CHECK_OK(weft_model_load_adapter(m, cvec_path(), &gone));
  CHECK_OK(weft_adapter_free(gone));
  u[0] = use_of(lora, 1.0f);
  u[1] = use_of(gone, 1.0f);
  CHECK_ERR(weft_conversation_set_adapters(c, u, 2), WEFT_ERR_INVALID_HANDLE, "uses[1].adapter");

  /* Still the setting from before all that. */
  CHECK(adapter_count(c) == 1);
  one.struct_size = sizeof one;
  CHECK_OK(weft_conversation_adapters(c, &one, 1, &n));
  CHECK(n == 1 && one.scale == 0.75f);
  CHECK_OK(weft_adapter_free(one.adapter));

  /* The getter's own refusals. */
  CHECK_ERR(weft_conversation_adapters(c, &one, 1, NULL), WEFT_ERR_NULL_ARG, "`out_n`");
  CHECK_ERR(weft_conversation_adapters(c, NULL, 1, &n), WEFT_ERR_NULL_ARG, "`uses`");
  one.struct_size = 3;
  CHECK_ERR(weft_conversation_adapters(c, &one, 1, &n), WEFT_ERR_STRUCT_SIZE, "weft_adapter_use.struct_size = 3");
  CHECK(n == 1);
  CHECK_ERR(weft_conversation_adapters(NULL, &one, 1, &n), WEFT_ERR_NULL_ARG, "weft_conversation handle is NULL");

  /* A disposed conversation. */
  CHECK_OK(weft_conversation_create(ex, &d));
  CHECK_OK(weft_conversation_dispose(d));
  u[0] = use_of(lora, 1.0f);
  CHECK_ERR(weft_conversation_set_adapters(d, u, 1), WEFT_ERR_DISPOSED, "");
  CHECK_OK(weft_conversation_free(d));

  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_adapter_free(foreign));
  CHECK_OK(weft_adapter_free(lora));
  CHECK_OK(weft_adapter_free(cvec));
  CHECK_OK(weft_model_free(other));
  CHECK_OK(weft_model_free(m));
}
