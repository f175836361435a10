/* C ABI tests: text embeddings' refusals and lifetimes (weft/c/embedding.h).
   Bad input refused by type naming the value, nothing queued; reading
   before, after and past the end; cosine similarity's refusals; freed and
   wrongly typed handles; cancel; an executor freed before its embeddings
   and handles freed after it; the worker; callers built before the
   embedder fields and the embedding counts (old struct sizes). */
#include <stddef.h>

#include "c_api_test.h"

void test_embedding_errors(void) {
  weft_model *m = load_tiny();
  weft_executor_params p;
  weft_executor *ex = NULL;
  weft_embedding *e = (weft_embedding *)&p; /* must be reset to NULL on failure */
  weft_executor_stats st;
  weft_conversation *c = NULL;
  uint32_t width = 7;
  int32_t n_vocab = 0;
  char long_text[256] = "";
  float v[MAX_EMBD], cos = 0;
  size_t n = 0;
  int i;
  if (!m) return;
  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  /* Defaults: the C++ ones, no embedder. */
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  CHECK(p.embedder == 0 && p.embed_pooling == WEFT_POOLING_MODEL && p.embedding_model == NULL);
  CHECK(p.embed_n_ctx == 512 && p.embed_n_seq_max == 16 && p.embed_normalize == 1);
  p.n_ctx = 256;
  p.n_batch = 64;
  p.n_seq_max = 2;
  p.n_threads = 2;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  {
    const char *one = "x";
    CHECK_ERR(weft_executor_embed(ex, &one, 1, &e), WEFT_ERR_INVALID_ARGUMENT, "no embedder");
    CHECK(e == NULL);
  }
  CHECK_OK(weft_executor_embedding_size(ex, &width));
  CHECK(width == 0);
  CHECK_OK(weft_executor_free(ex));

  /* Parameters refused by name. */
  p.embedding_model = m;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "embedding_model is set but embedder is 0");
  CHECK(ex == NULL);
  p.embedding_model = NULL;
  p.embedder = 1;
  p.embed_pooling = 7;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "embed_pooling = 7 is not a weft_pooling");
  p.embed_pooling = WEFT_POOLING_MEAN;
  p.embed_n_ctx = 4;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "n_ctx = 4");
  p.embed_n_ctx = 16;
  p.embed_n_seq_max = 0;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_ARGUMENT, "n_seq_max = 0");
  p.embed_n_seq_max = 4;
  p.embedding_model = (const weft_model *)&p;
  CHECK_ERR(weft_executor_create(m, &p, &ex), WEFT_ERR_INVALID_HANDLE, "weft_model handle");
  p.embedding_model = NULL;
  CHECK_OK(weft_executor_create(m, &p, &ex)); /* 16 tokens a text at most */

  /* Bad input: typed, naming the value; nothing queued. */
  for (i = 0; i < 40; ++i) strcat(long_text, "gold ");
  {
    const char *texts[2] = {"short", NULL};
    const char *bad_utf8[1] = {"ok \xff"};
    CHECK_ERR(weft_executor_embed(ex, NULL, 2, &e), WEFT_ERR_NULL_ARG, "texts");
    CHECK(e == NULL);
    CHECK_ERR(weft_executor_embed(ex, texts, 2, &e), WEFT_ERR_NULL_ARG, "texts[1]");
    CHECK_ERR(weft_executor_embed(ex, texts, 0, &e), WEFT_ERR_INVALID_ARGUMENT, "no texts");
    CHECK_ERR(weft_executor_embed(ex, NULL, 0, &e), WEFT_ERR_INVALID_ARGUMENT, "no texts");
    texts[1] = long_text;
    CHECK_ERR(weft_executor_embed(ex, texts, 2, &e), WEFT_ERR_OUT_OF_RANGE, "text 1 has");
    CHECK(strstr(weft_last_error(), "n_ctx = 16") != NULL);
    CHECK_ERR(weft_executor_embed(ex, bad_utf8, 1, &e), WEFT_ERR_INVALID_ARGUMENT, "`texts[0]` is not valid UTF-8");
    CHECK_ERR(weft_executor_embed(ex, texts, 1, NULL), WEFT_ERR_NULL_ARG, "out");
    CHECK_ERR(weft_executor_embed(NULL, texts, 1, &e), WEFT_ERR_NULL_ARG, "weft_executor handle is NULL");
  }
  {
    const weft_token a[2] = {1, 2};
    weft_token oov[2] = {1, 0};
    const weft_token *inputs[2] = {a, a};
    size_t lens[2] = {2, 0};
    char needle[32];
    CHECK_ERR(weft_executor_embed_tokens(ex, inputs, lens, 2, &e), WEFT_ERR_INVALID_ARGUMENT, "input 1 is empty");
    CHECK(e == NULL);
    CHECK_ERR(weft_executor_embed_tokens(ex, NULL, lens, 2, &e), WEFT_ERR_NULL_ARG, "inputs");
    CHECK_ERR(weft_executor_embed_tokens(ex, inputs, NULL, 2, &e), WEFT_ERR_NULL_ARG, "n_tokens");
    inputs[1] = NULL;
    lens[1] = 3;
    CHECK_ERR(weft_executor_embed_tokens(ex, inputs, lens, 2, &e), WEFT_ERR_NULL_ARG, "inputs[1] is NULL");
    CHECK_ERR(weft_executor_embed_tokens(ex, inputs, lens, 0, &e), WEFT_ERR_INVALID_ARGUMENT, "no inputs");
    oov[1] = n_vocab;
    inputs[1] = oov;
    lens[1] = 2;
    snprintf(needle, sizeof needle, "holds token %d", (int)n_vocab);
    CHECK_ERR(weft_executor_embed_tokens(ex, inputs, lens, 2, &e), WEFT_ERR_OUT_OF_RANGE, needle);
    snprintf(needle, sizeof needle, "vocabulary of %d", (int)n_vocab);
    CHECK(strstr(weft_last_error(), needle) != NULL);
  }
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.embed_pending == 0 && st.texts_embedded == 0);

  /* Reading: before and after, past the end, too small a buffer. */
  {
    const weft_token a[3] = {1, 5, 9};
    const weft_token *inputs[1] = {a};
    const size_t lens[1] = {3};
    CHECK_OK(weft_executor_embed_tokens(ex, inputs, lens, 1, &e));
  }
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.embed_pending == 1);
  n = 99;
  v[0] = 42;
  CHECK_OK(weft_embedding_vector(e, 0, v, MAX_EMBD, &n));
  CHECK(n == 0 && v[0] == 42); /* not embedded yet: nothing copied */
  CHECK_ERR(weft_embedding_vector(e, 1, v, MAX_EMBD, &n), WEFT_ERR_OUT_OF_RANGE, "index 1 is past the embedding's 1 inputs");
  CHECK_OK(weft_embedding_n_tokens(e, 0, &n));
  CHECK(n == 3);
  CHECK_ERR(weft_embedding_n_tokens(e, 1, &n), WEFT_ERR_OUT_OF_RANGE, "has 1 inputs");
  CHECK_ERR(weft_embedding_n_tokens(e, 0, NULL), WEFT_ERR_NULL_ARG, "out");
  run_until_idle(ex);
  CHECK_OK(weft_executor_embedding_size(ex, &width));
  CHECK_ERR(weft_embedding_vector(e, 0, v, 1, &n), WEFT_ERR_BUFFER_TOO_SMALL, "capacity is 1");
  CHECK(n == width);
  CHECK_ERR(weft_embedding_vector(e, 0, NULL, 0, &n), WEFT_ERR_BUFFER_TOO_SMALL, "needs");
  CHECK(n == width);
  CHECK_OK(weft_embedding_vector(e, 0, v, width, &n));
  CHECK(n == width && fabs(norm2(v, n) - 1.0) < 1e-5);
  CHECK_ERR(weft_embedding_vector(e, 0, v, width, NULL), WEFT_ERR_NULL_ARG, "out_n");
  CHECK_ERR(weft_embedding_is_done(e, NULL), WEFT_ERR_NULL_ARG, "out");
  CHECK_ERR(weft_embedding_wait(e, 0, NULL), WEFT_ERR_NULL_ARG, "out_done");

  /* Cosine similarity's refusals. */
  CHECK_ERR(weft_cosine_similarity(v, 3, v, 2, &cos), WEFT_ERR_INVALID_ARGUMENT, "3 and 2");
  CHECK_ERR(weft_cosine_similarity(v, 0, v, 0, &cos), WEFT_ERR_INVALID_ARGUMENT, "0 and 0");
  CHECK_ERR(weft_cosine_similarity(NULL, 3, v, 3, &cos), WEFT_ERR_NULL_ARG, "`a`");
  CHECK_ERR(weft_cosine_similarity(v, 3, v, 3, NULL), WEFT_ERR_NULL_ARG, "out");
  {
    const float zero[3] = {0, 0, 0};
    CHECK_OK(weft_cosine_similarity(v, 3, zero, 3, &cos));
    CHECK(cos == 0);
  }

  /* Handles: freed, or of another type, are refused. */
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_ERR(weft_embedding_free((weft_embedding *)c), WEFT_ERR_INVALID_HANDLE, "not a weft_embedding");
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_embedding_free(e));
  CHECK_ERR(weft_embedding_n_done(e, &n), WEFT_ERR_INVALID_HANDLE, "weft_embedding handle");
  CHECK_ERR(weft_embedding_free(e), WEFT_ERR_INVALID_HANDLE, "not live");
  CHECK_OK(weft_embedding_free(NULL));
  CHECK_ERR(weft_embedding_size(NULL, &n), WEFT_ERR_NULL_ARG, "weft_embedding handle is NULL");
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}

/* Cancel; the executor freed before its embeddings are done, and the
   handles freed after it; the worker; old struct sizes. */
void test_embedding_lifetime(void) {
  weft_model *m = load_tiny();
  weft_executor *ex;
  weft_embedding *a = NULL, *b = NULL, *c = NULL, *w = NULL;
  weft_executor_params p;
  weft_executor_stats st;
  weft_step_result r;
  weft_status code = WEFT_OK;
  weft_bool done = 0;
  char msg[256];
  float v[MAX_EMBD];
  size_t len = 0, n = 0;
  uint32_t width = 0;
  const char *mayor = "the mayor owes gold", *guard = "the guard at the gate";
  const char *both[2] = {"song of the tavern", "the wolf of the north"};
  if (!m) return;
  ex = embed_executor(m, NULL, 64, 512);
  if (ex == NULL) return;

  /* Cancel: done at once, WEFT_ERR_CANCELLED, nothing embedded. */
  CHECK_OK(weft_executor_embed(ex, &mayor, 1, &a));
  CHECK_OK(weft_embedding_error(a, &code, msg, sizeof msg, &len));
  CHECK(code == WEFT_OK && len == 0 && msg[0] == '\0');
  CHECK_OK(weft_embedding_cancel(a));
  CHECK_OK(weft_embedding_is_done(a, &done));
  CHECK(done == 1);
  CHECK_OK(weft_embedding_error(a, &code, msg, sizeof msg, &len));
  CHECK(code == WEFT_ERR_CANCELLED && strstr(msg, "cancelled") != NULL && len == strlen(msg));
  CHECK_ERR(weft_embedding_error(a, &code, msg, 2, &len), WEFT_ERR_BUFFER_TOO_SMALL, "plus a NUL");
  run_until_idle(ex);
  CHECK_OK(weft_embedding_n_done(a, &n));
  CHECK(n == 0);
  CHECK_OK(weft_embedding_vector(a, 0, v, MAX_EMBD, &n));
  CHECK(n == 0);
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.texts_embedded == 0 && st.embed_pending == 0);
  CHECK_OK(weft_embedding_cancel(a)); /* again: nothing changes */

  /* c is embedded; b is still queued when the executor goes. */
  CHECK_OK(weft_executor_embed(ex, both, 2, &c));
  step_until_embedded(ex, c);
  CHECK_OK(weft_embedding_cancel(c)); /* all done already: no error */
  CHECK_OK(weft_embedding_error(c, &code, msg, sizeof msg, &len));
  CHECK(code == WEFT_OK);
  CHECK_OK(weft_executor_embed(ex, &guard, 1, &b));
  CHECK_OK(weft_executor_embedding_size(ex, &width));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_embedding_wait(b, 1000, &done));
  CHECK(done == 1);
  CHECK_OK(weft_embedding_error(b, &code, msg, sizeof msg, &len));
  CHECK(code == WEFT_ERR_DISPOSED && strstr(msg, "executor was destroyed") != NULL);
  CHECK_OK(weft_embedding_vector(b, 0, v, MAX_EMBD, &n));
  CHECK(n == 0);
  /* What was made before stays readable. */
  CHECK_OK(weft_embedding_vector(c, 1, v, MAX_EMBD, &n));
  CHECK(n == width && width > 0);
  CHECK_OK(weft_embedding_free(a));
  CHECK_OK(weft_embedding_free(b));
  CHECK_OK(weft_embedding_free(c));

  /* The worker embeds without anyone stepping. */
  ex = embed_executor(m, NULL, 64, 512);
  CHECK_OK(weft_executor_start(ex, NULL));
  CHECK_OK(weft_executor_embed(ex, both, 2, &w));
  CHECK_OK(weft_embedding_wait(w, 20000, &done));
  CHECK(done == 1);
  CHECK_OK(weft_embedding_n_done(w, &n));
  CHECK(n == 2);
  CHECK_OK(weft_executor_stop(ex));
  /* Stats and a step result at the sizes before the embedding counts: the
     fields after them untouched. */
  memset(&st, 0xAB, sizeof st);
  st.struct_size = offsetof(weft_executor_stats, texts_embedded);
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.struct_size == offsetof(weft_executor_stats, texts_embedded) && st.redecodes == 0);
  CHECK(st.texts_embedded == 0xABABABABABABABABull && st.embed_pending == 0xABABABABu);
  memset(&r, 0xAB, sizeof r);
  r.struct_size = offsetof(weft_step_result, tokens_embedded);
  CHECK_OK(weft_executor_step(ex, NULL, &r));
  CHECK(r.idle == 1 && r.tokens_embedded == 0xABABABABu && r.texts_embedded == 0xABABABABu);
  CHECK_OK(weft_embedding_free(w));
  CHECK_OK(weft_executor_free(ex));

  /* A caller built before the embedder fields: its struct ends before
     them, so whatever follows reads as the defaults (no embedder). */
  CHECK_OK(weft_executor_params_init(&p, offsetof(weft_executor_params, embedder)));
  p.n_ctx = 256;
  p.n_batch = 64;
  p.n_seq_max = 2;
  p.n_threads = 2;
  p.embedder = 1;
  p.embed_pooling = 99; /* past its struct_size: never read */
  CHECK_OK(weft_executor_create(m, &p, &ex));
  CHECK_OK(weft_executor_embedding_size(ex, &width));
  CHECK(width == 0);
  CHECK_ERR(weft_executor_embed(ex, &mayor, 1, &a), WEFT_ERR_INVALID_ARGUMENT, "no embedder");
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
}
