/* C ABI tests: adapter lifetimes (the model's handle freed before its
   adapters) and save/load carrying a conversation's setting by fingerprint.
   Helpers: c_api_test_adapter.c. */
#include "c_api_test.h"

/* The model's handle freed before its adapters' (and before the executor
   and conversation that use them): everything keeps working. */
void test_adapter_lifetime(void) {
  weft_model *m = load_tiny();
  weft_adapter *lora, *cvec;
  weft_executor *ex;
  weft_conversation *c = NULL;
  weft_adapter_use u[2];
  weft_adapter_use got;
  float *expected, *actual;
  int32_t n_vocab = 0, kind = -1;
  uint64_t f = 0;
  size_t n = 0;
  char name[256];
  size_t len = 0;
  if (!m) return;
  lora = load_adapter(m, lora_path());
  cvec = load_adapter(m, cvec_path());
  if (!lora || !cvec) return;
  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  expected = (float *)malloc(sizeof(float) * (size_t)n_vocab);
  actual = (float *)malloc(sizeof(float) * (size_t)n_vocab);
  u[0] = use_of(lora, 1.0f);
  u[1] = use_of(cvec, 0.5f);
  logits_alone(m, u, 2, expected, (size_t)n_vocab);

  ex = make_executor(m, 256, 2);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_set_adapters(c, u, 2));
  /* Model handle first, then the adapter handles: the conversation holds
     its adapters, the adapters and the executor hold the model. */
  CHECK_OK(weft_model_free(m));
  CHECK_OK(weft_adapter_free(lora));
  prompt_fixed(c);
  run_until_idle(ex);
  get_logits(c, actual, (size_t)n_vocab);
  CHECK(nmse(actual, expected, (size_t)n_vocab) < LOGITS_TOLERANCE);
  got.struct_size = sizeof got;
  CHECK_ERR(weft_conversation_adapters(c, &got, 1, &n), WEFT_ERR_BUFFER_TOO_SMALL, "needs 2");
  {
    weft_adapter_use two[2];
    two[0].struct_size = sizeof two[0];
    CHECK_OK(weft_conversation_adapters(c, two, 2, &n));
    CHECK(n == 2);
    CHECK_OK(weft_adapter_get_kind(two[0].adapter, &kind));
    CHECK(kind == WEFT_ADAPTER_LORA);
    CHECK_OK(weft_adapter_free(two[0].adapter));
    CHECK_OK(weft_adapter_free(two[1].adapter));
  }
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_executor_free(ex));
  /* Nothing but the control vector's handle is left: it still answers. */
  CHECK_OK(weft_adapter_get_kind(cvec, &kind));
  CHECK(kind == WEFT_ADAPTER_CONTROL_VECTOR);
  CHECK_OK(weft_adapter_fingerprint(cvec, &f));
  CHECK(f != 0);
  CHECK_OK(weft_adapter_name(cvec, name, sizeof name, &len));
  CHECK_OK(weft_adapter_free(cvec));
  free(expected);
  free(actual);
}

/* Save/load carries the setting by fingerprint: a state saved under a LoRA
   loads into another executor of the model (same logits, same setting) while
   an adapter of that file is loaded, and is refused (WEFT_ERR_NOT_FOUND,
   nothing added) once none is. */
void test_adapter_state(void) {
  weft_model *m = load_tiny();
  weft_adapter *lora, *again = NULL;
  weft_executor *ex, *ex2;
  weft_conversation *c = NULL, *back = NULL;
  weft_adapter_use u;
  weft_bytes *saved = NULL;
  const uint8_t *data = NULL;
  size_t size = 0;
  float *want, *got;
  int32_t n_vocab = 0;
  weft_executor_stats st;
  if (!m) return;
  lora = load_adapter(m, lora_path());
  if (!lora) return;
  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  want = (float *)malloc(sizeof(float) * (size_t)n_vocab);
  got = (float *)malloc(sizeof(float) * (size_t)n_vocab);
  ex = make_executor(m, 256, 2);
  ex2 = make_executor(m, 256, 2);
  CHECK_OK(weft_conversation_create(ex, &c));
  u = use_of(lora, 1.0f);
  CHECK_OK(weft_conversation_set_adapters(c, &u, 1));
  prompt_fixed(c);
  run_until_idle(ex);
  get_logits(c, want, (size_t)n_vocab);
  CHECK_OK(weft_conversation_save(c, &saved));
  CHECK_OK(weft_bytes_data(saved, &data, &size));

  CHECK_OK(weft_executor_load(ex2, data, size, &back));
  CHECK(adapter_count(back) == 1);
  get_logits(back, got, (size_t)n_vocab);
  CHECK(nmse(got, want, (size_t)n_vocab) < LOGITS_TOLERANCE);
  CHECK_OK(weft_conversation_free(back));

  /* No adapter of that file alive for the model (no handle, no
     conversation, no executor whose cache holds KV decoded under it):
     refused, nothing added. */
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_adapter_free(lora));
  CHECK_ERR(weft_executor_load(ex2, data, size, &back), WEFT_ERR_NOT_FOUND, "not loaded");
  CHECK(back == NULL);
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex2, &st));
  CHECK(st.conversations == 0);
  /* Loaded again (a new load of the same file): accepted. */
  CHECK_OK(weft_model_load_adapter(m, lora_path(), &again));
  CHECK_OK(weft_executor_load(ex2, data, size, &back));
  get_logits(back, got, (size_t)n_vocab);
  CHECK(nmse(got, want, (size_t)n_vocab) < LOGITS_TOLERANCE);
  CHECK_OK(weft_conversation_free(back));

  CHECK_OK(weft_bytes_free(saved));
  CHECK_OK(weft_executor_free(ex2));
  CHECK_OK(weft_adapter_free(again));
  CHECK_OK(weft_model_free(m));
  free(want);
  free(got);
}
