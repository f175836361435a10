/* C ABI tests: save and load (bytes, files, snapshots, corrupt state),
   residency and parking. save_async: c_api_test_save_async.c. */
#include "c_api_test.h"

/* Invariant 5 through the C ABI: save, load (same or another executor),
   continue: same logits and sampler draws as never saved. Bad state is
   refused with a code, the executor unchanged. */
static weft_bytes *save(weft_conversation *c, const uint8_t **data, size_t *size) {
  weft_bytes *b = NULL;
  CHECK_OK(weft_conversation_save(c, &b));
  CHECK_OK(weft_bytes_data(b, data, size));
  return b;
}

void test_state(void) {
  enum { NV = 32000, H = 30, X = 6 };
  static float l1[NV], l2[NV];
  static uint8_t corrupt[1 << 20];
  weft_model *m = load_tiny();
  weft_executor *ex, *other;
  weft_conversation *c = NULL, *back = NULL, *far = NULL, *ff = NULL, *none = (weft_conversation *)&l1;
  weft_conversation *convs[3];
  weft_conversation_list *list = NULL;
  weft_sampler_params sp;
  weft_bytes *b, *all;
  const uint8_t *data = NULL;
  size_t size = 0, n = 0, i;
  weft_token h[H], x[X], got[H + X + 1], t1, t2, t3;
  uint64_t ids[3];
  char path[256];
  if (!m) return;
  ex = make_executor(m, 512, 4);
  other = make_executor(m, 1024, 8); /* other n_ctx and slots: allowed */
  h[0] = 1;
  for (i = 1; i < H; ++i) h[i] = rand_token(NV);
  for (i = 0; i < X; ++i) x[i] = rand_token(NV);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_tokens(c, h, H));
  CHECK_OK(weft_sampler_params_init(&sp, sizeof sp));
  sp.temperature = 0.8f;
  sp.seed = 99;
  CHECK_OK(weft_conversation_set_sampler(c, &sp));
  run_until_idle(ex);

  b = save(c, &data, &size);
  CHECK(size > 0 && data != NULL);
  CHECK_OK(weft_executor_load(ex, data, size, &back));
  CHECK_OK(weft_executor_load(other, data, size, &far));
  CHECK_OK(weft_conversation_tokens(back, got, H + X + 1, &n));
  CHECK(n == H && memcmp(got, h, sizeof h) == 0);
  /* Logits and sampler state travel: the same draw at once. */
  CHECK(get_logits(c, l1, NV) == NV && get_logits(far, l2, NV) == NV);
  CHECK(nmse(l1, l2, NV) < LOGITS_TOLERANCE);
  CHECK_OK(weft_conversation_sample(c, &t1));
  CHECK_OK(weft_conversation_sample(back, &t2));
  CHECK_OK(weft_conversation_sample(far, &t3));
  CHECK(t1 == t2 && t1 == t3);
  /* And they continue alike. */
  CHECK_OK(weft_conversation_prompt_tokens(c, x, X));
  CHECK_OK(weft_conversation_prompt_tokens(back, x, X));
  CHECK_OK(weft_conversation_prompt_tokens(far, x, X));
  run_until_idle(ex);
  run_until_idle(other);
  CHECK(get_logits(c, l1, NV) == NV);
  CHECK(get_logits(back, l2, NV) == NV && nmse(l1, l2, NV) < LOGITS_TOLERANCE);
  CHECK(get_logits(far, l2, NV) == NV && nmse(l1, l2, NV) < LOGITS_TOLERANCE);

  /* A file, written atomically. */
  sprintf(path, "/tmp/weft-c-api-%ld.state", (long)getpid());
  CHECK_OK(weft_conversation_save_file(c, path));
  CHECK_OK(weft_executor_load_file(other, path, &ff));
  CHECK_OK(weft_conversation_n_tokens(ff, (uint32_t *)&t1));
  CHECK(t1 == H + X);
  remove(path);
  CHECK_ERR(weft_executor_load_file(other, path, &none), WEFT_ERR_NOT_FOUND, "");
  CHECK(none == NULL);
  CHECK_ERR(weft_conversation_save_file(c, "/nonexistent-dir/x.state"), WEFT_ERR_IO, "");
  CHECK_ERR(weft_conversation_save_file(c, NULL), WEFT_ERR_NULL_ARG, "path");

  /* Bad bytes: refused, nothing added. */
  if (size <= sizeof corrupt) {
    memcpy(corrupt, data, size);
    for (i = 0; i < size; i += 97) corrupt[i] ^= 0x5a;
    CHECK_ERR(weft_executor_load(ex, corrupt, size, &none), WEFT_ERR_CORRUPT, "");
    CHECK_ERR(weft_executor_load(ex, data, size / 2, &none), WEFT_ERR_CORRUPT, "");
  }
  CHECK_ERR(weft_executor_load(ex, NULL, 0, &none), WEFT_ERR_CORRUPT, "");
  CHECK_ERR(weft_executor_load(ex, NULL, 10, &none), WEFT_ERR_NULL_ARG, "data");
  {
    weft_executor_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_OK(weft_executor_get_stats(ex, &st));
    CHECK(st.conversations == 2);
  }
  CHECK_OK(weft_bytes_free(b));
  CHECK_ERR(weft_bytes_data(b, &data, &size), WEFT_ERR_INVALID_HANDLE, "weft_bytes");

  /* Every conversation at once, into another executor. */
  CHECK_OK(weft_executor_save_all(ex, &all));
  CHECK_OK(weft_bytes_data(all, &data, &size));
  CHECK_OK(weft_executor_load_all(other, data, size, &list));
  CHECK_OK(weft_conversation_list_count(list, &n));
  CHECK(n == 2);
  for (i = 0; i < n && i < 3; ++i) {
    uint32_t count = 0;
    CHECK_OK(weft_conversation_list_get(list, i, &ids[i], &convs[i]));
    CHECK_OK(weft_conversation_n_tokens(convs[i], &count));
    CHECK(count == H + X);
  }
  CHECK(n < 2 || ids[0] != ids[1]);
  CHECK_ERR(weft_conversation_list_get(list, n, &ids[0], &none), WEFT_ERR_OUT_OF_RANGE, "past the list");
  CHECK_OK(weft_conversation_list_free(list)); /* the handles taken stay valid */
  for (i = 0; i < n && i < 3; ++i) {
    weft_bool ready = 0;
    CHECK_OK(weft_conversation_has_logits(convs[i], &ready));
    CHECK(ready == 1);
    CHECK_OK(weft_conversation_free(convs[i]));
  }
  CHECK_ERR(weft_executor_load_all(other, data, size / 3, &list), WEFT_ERR_CORRUPT, "");
  CHECK(list == NULL);
  CHECK_OK(weft_bytes_free(all));

  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(back));
  CHECK_OK(weft_conversation_free(far));
  CHECK_OK(weft_conversation_free(ff));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_executor_free(other));
  CHECK_OK(weft_model_free(m));
}

/* Parking: a hint moves a conversation to RAM; its next input brings it
   back, with the same logits as if it had stayed. */
void test_residency(void) {
  enum { NV = 32000, H = 25 };
  static float l1[NV], l2[NV];
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_conversation *c = NULL, *ref = NULL, *empty = NULL;
  weft_executor_stats st;
  weft_token h[H + 1];
  weft_bool parked = 0;
  int32_t where = -1;
  size_t i;
  if (!m) return;
  ex = make_executor(m, 512, 4);
  h[0] = 1;
  for (i = 1; i <= H; ++i) h[i] = rand_token(NV);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_create(ex, &empty));
  CHECK_OK(weft_conversation_prompt_tokens(c, h, H));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_residency(c, &where));
  CHECK(where == WEFT_RESIDENCY_RESIDENT);
  CHECK(strcmp(weft_residency_name(WEFT_RESIDENCY_RAM), "ram") == 0 && strcmp(weft_residency_name(9), "unknown") == 0);
  CHECK_OK(weft_conversation_park(empty, &parked)); /* nothing decoded: holds no cells already */
  CHECK(parked == 1);
  CHECK_OK(weft_conversation_residency(empty, &where));
  CHECK(where == WEFT_RESIDENCY_RESIDENT);
  CHECK_OK(weft_conversation_park(c, &parked));
  CHECK(parked == 1);
  CHECK_OK(weft_conversation_residency(c, &where));
  CHECK(where == WEFT_RESIDENCY_RAM);
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.parked_ram == 1 && st.parks == 1 && st.ram_bytes > 0 && st.cells_used == 0);
  CHECK_OK(weft_conversation_prompt_tokens(c, h + H, 1));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_residency(c, &where));
  CHECK(where == WEFT_RESIDENCY_RESIDENT);
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.restores == 1 && st.parked_ram == 0);
  CHECK_OK(weft_conversation_create(ex, &ref));
  CHECK_OK(weft_conversation_prompt_tokens(ref, h, H + 1));
  run_until_idle(ex);
  CHECK(get_logits(c, l1, NV) == NV && get_logits(ref, l2, NV) == NV);
  CHECK(nmse(l1, l2, NV) < LOGITS_TOLERANCE);
  CHECK_OK(weft_conversation_park(c, &parked));
  CHECK_OK(weft_conversation_prefetch(c));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_residency(c, &where));
  CHECK(where == WEFT_RESIDENCY_RESIDENT);
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(ref));
  CHECK_OK(weft_conversation_free(empty));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}
