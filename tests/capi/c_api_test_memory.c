/* C ABI tests: memory (weft/c/memory.h). Search over random vectors equals a
   brute force (cosine, best first, ties to the older entry); texts added
   through an executor's embedder (embed.gguf when WEFT_TEST_EMBED_MODEL or
   the model's folder has it, else the model itself) are found by searching
   for them; save/load keeps every entry and damaged bytes are
   WEFT_ERR_CORRUPT; a conversation carries its memory through save/load;
   compaction leaves first + summary + last tokens. */
#include <stddef.h>

#include "c_api_test.h"

#define DIM 16
#define N_ENTRIES 300
#define K 10

static uint32_t g_mrng = 4242;
static float mrand(void) {
  g_mrng = g_mrng * 1664525u + 1013904223u;
  return (float)((g_mrng >> 8) % 20001) / 10000.0f - 1.0f;
}

static double cosine(const float *a, const float *b, size_t n) {
  double d = 0, na = 0, nb = 0;
  size_t i;
  for (i = 0; i < n; ++i) {
    d += (double)a[i] * b[i];
    na += (double)a[i] * a[i];
    nb += (double)b[i] * b[i];
  }
  return na == 0 || nb == 0 ? 0 : d / sqrt(na * nb);
}

static float g_vecs[N_ENTRIES][DIM];
static uint64_t g_ids[N_ENTRIES];

/* The brute force's best k indices into g_vecs, best first (older first on ties). */
static void brute_force(const float *q, size_t k, size_t *best) {
  double score[N_ENTRIES];
  int taken[N_ENTRIES];
  size_t i, j;
  for (i = 0; i < N_ENTRIES; ++i) {
    score[i] = cosine(q, g_vecs[i], DIM);
    taken[i] = 0;
  }
  for (j = 0; j < k; ++j) {
    size_t b = N_ENTRIES;
    for (i = 0; i < N_ENTRIES; ++i) {
      if (!taken[i] && (b == N_ENTRIES || score[i] > score[b])) b = i;
    }
    taken[b] = 1;
    best[j] = b;
  }
}

static void check_search(weft_memory *mem, const char *what) {
  int q;
  for (q = 0; q < 20; ++q) {
    float query[DIM];
    size_t best[K], n = 0, j;
    weft_memory_hits *hits = NULL;
    for (j = 0; j < DIM; ++j) query[j] = mrand();
    brute_force(query, K, best);
    CHECK_OK(weft_memory_search_vector(mem, query, DIM, K, &hits));
    if (hits == NULL) return;
    CHECK_OK(weft_memory_hits_count(hits, &n));
    CHECK(n == K);
    for (j = 0; j < n && j < K; ++j) {
      uint64_t id = 0;
      float score = 0;
      char text[64], expect[64];
      size_t len = 0;
      CHECK_OK(weft_memory_hits_id(hits, j, &id));
      CHECK_OK(weft_memory_hits_score(hits, j, &score));
      CHECK_OK(weft_memory_hits_text(hits, j, text, sizeof text, &len));
      snprintf(expect, sizeof expect, "entry %u", (unsigned)best[j]);
      if (id != g_ids[best[j]] || fabs(score - cosine(query, g_vecs[best[j]], DIM)) > 1e-5 ||
          strcmp(text, expect) != 0) {
        failf(__FILE__, __LINE__, "%s: query %d hit %u: id %llu '%s' score %g, brute force id %llu '%s' score %g", what,
              q, (unsigned)j, (unsigned long long)id, text, (double)score, (unsigned long long)g_ids[best[j]], expect,
              cosine(query, g_vecs[best[j]], DIM));
        break;
      }
    }
    {
      uint64_t past = 0;
      CHECK_ERR(weft_memory_hits_id(hits, K, &past), WEFT_ERR_OUT_OF_RANGE, "index 10");
      CHECK_ERR(weft_memory_size((const weft_memory *)hits, &j), WEFT_ERR_INVALID_HANDLE, "weft_memory_hits");
    }
    CHECK_OK(weft_memory_hits_free(hits));
  }
}

void test_memory_search(void) {
  weft_memory *mem = NULL, *back = NULL;
  weft_memory_hits *hits = NULL;
  weft_bytes *bytes = NULL;
  const uint8_t *data = NULL;
  size_t size = 0, n = 0, i, len = 0;
  uint32_t dims = 0;
  weft_bool removed = 0;
  uint64_t id = 0;
  float v[DIM + 1];
  char buf[64];
  CHECK_OK(weft_memory_new(&mem));
  CHECK_OK(weft_memory_dimensions(mem, &dims));
  CHECK(dims == 0);
  for (i = 0; i < N_ENTRIES; ++i) {
    size_t j;
    for (j = 0; j < DIM; ++j) g_vecs[i][j] = mrand();
    snprintf(buf, sizeof buf, "entry %u", (unsigned)i);
    CHECK_OK(weft_memory_add_vector(mem, buf, i % 2 ? "odd" : NULL, g_vecs[i], DIM, &g_ids[i]));
    CHECK(g_ids[i] == i + 1);
  }
  CHECK_OK(weft_memory_size(mem, &n));
  CHECK(n == N_ENTRIES);
  CHECK_OK(weft_memory_dimensions(mem, &dims));
  CHECK(dims == DIM);
  CHECK_OK(weft_memory_pending(mem, &n));
  CHECK(n == 0);
  CHECK_OK(weft_memory_missing(mem, &n));
  CHECK(n == 0);
  check_search(mem, "fresh");

  /* An entry's copies; the buffer conventions. */
  CHECK_OK(weft_memory_get_text(mem, g_ids[7], buf, sizeof buf, &len));
  CHECK(strcmp(buf, "entry 7") == 0 && len == 7);
  CHECK_ERR(weft_memory_get_text(mem, g_ids[7], buf, 3, &len), WEFT_ERR_BUFFER_TOO_SMALL, "needs 7 bytes");
  CHECK(len == 7);
  CHECK_OK(weft_memory_get_metadata(mem, g_ids[7], buf, sizeof buf, &len));
  CHECK(strcmp(buf, "odd") == 0);
  CHECK_OK(weft_memory_get_metadata(mem, g_ids[8], buf, sizeof buf, &len));
  CHECK(len == 0 && buf[0] == '\0');
  CHECK_ERR(weft_memory_get_vector(mem, g_ids[7], v, 0, &n), WEFT_ERR_BUFFER_TOO_SMALL, "16");
  CHECK(n == DIM);
  CHECK_OK(weft_memory_get_vector(mem, g_ids[7], v, DIM, &n));
  CHECK(n == DIM && memcmp(v, g_vecs[7], sizeof g_vecs[7]) == 0);
  CHECK_ERR(weft_memory_get_text(mem, 99999, buf, sizeof buf, &len), WEFT_ERR_NOT_FOUND, "99999");

  /* Refusals: another width, no vector, NULLs, wrong handles. */
  CHECK_ERR(weft_memory_add_vector(mem, "x", NULL, v, DIM + 1, &id), WEFT_ERR_INVALID_ARGUMENT, "17");
  CHECK_ERR(weft_memory_add_vector(mem, "x", NULL, NULL, 0, &id), WEFT_ERR_INVALID_ARGUMENT, "");
  CHECK_ERR(weft_memory_add_vector(mem, "x", NULL, NULL, DIM, &id), WEFT_ERR_NULL_ARG, "vector");
  CHECK_ERR(weft_memory_add_vector(mem, NULL, NULL, v, DIM, &id), WEFT_ERR_NULL_ARG, "text");
  CHECK_ERR(weft_memory_add_vector(mem, "x", NULL, v, DIM, NULL), WEFT_ERR_NULL_ARG, "out_id");
  CHECK_ERR(weft_memory_search_vector(mem, v, DIM - 1, K, &hits), WEFT_ERR_INVALID_ARGUMENT, "15");
  CHECK(hits == NULL);
  CHECK_ERR(weft_memory_search_vector(mem, v, DIM, K, NULL), WEFT_ERR_NULL_ARG, "out");
  CHECK_ERR(weft_memory_size(NULL, &n), WEFT_ERR_NULL_ARG, "weft_memory");
  CHECK_ERR(weft_memory_new(NULL), WEFT_ERR_NULL_ARG, "out");
  CHECK_ERR(weft_memory_load(NULL, 4, &back), WEFT_ERR_NULL_ARG, "data");

  /* Save and load: the same entries, the same searches. */
  CHECK_OK(weft_memory_save(mem, &bytes));
  CHECK_OK(weft_bytes_data(bytes, &data, &size));
  CHECK_OK(weft_memory_load(data, size, &back));
  CHECK_OK(weft_memory_size(back, &n));
  CHECK(n == N_ENTRIES);
  check_search(back, "loaded");
  {
    uint8_t *bad = (uint8_t *)malloc(size);
    size_t at;
    int refused = 0, tried = 0;
    weft_memory *m2 = NULL;
    for (at = 8; at < size; at += size / 13 + 1) {
      memcpy(bad, data, size);
      bad[at] ^= 0x5a;
      ++tried;
      if (weft_memory_load(bad, size, &m2) == WEFT_ERR_CORRUPT && m2 == NULL) ++refused;
      if (m2 != NULL) weft_memory_free(m2);
      m2 = NULL;
    }
    CHECK(refused == tried);
    CHECK_ERR(weft_memory_load(data, size - 9, &m2), WEFT_ERR_CORRUPT, "");
    CHECK(m2 == NULL);
    free(bad);
  }
  CHECK_OK(weft_bytes_free(bytes));

  /* Remove and clear: the loaded copy is its own store. */
  CHECK_OK(weft_memory_remove(back, g_ids[3], &removed));
  CHECK(removed == 1);
  CHECK_OK(weft_memory_remove(back, g_ids[3], &removed));
  CHECK(removed == 0);
  CHECK_OK(weft_memory_size(back, &n));
  CHECK(n == N_ENTRIES - 1);
  CHECK_OK(weft_memory_clear(back));
  CHECK_OK(weft_memory_size(back, &n));
  CHECK(n == 0);
  CHECK_OK(weft_memory_size(mem, &n));
  CHECK(n == N_ENTRIES);
  CHECK_OK(weft_memory_free(back));
  CHECK_OK(weft_memory_free(mem));
  CHECK_ERR(weft_memory_size(mem, &n), WEFT_ERR_INVALID_HANDLE, "weft_memory");
  CHECK_OK(weft_memory_free(NULL));
}

static void step_until_no_pending(weft_executor *ex, weft_memory *mem) {
  size_t pending = 1;
  int guard = 0;
  do {
    CHECK_OK(weft_executor_step(ex, NULL, NULL));
    CHECK_OK(weft_memory_pending(mem, &pending));
  } while (pending > 0 && ++guard < 1000);
  CHECK(pending == 0);
}

static const char *const kFacts[] = {
    "the blacksmith sells silver swords to travellers at dawn",
    "the mayor owes three gold coins to the baker",
    "a wolf was seen in the forest north of the river gate",
    "the key is hidden under the anvil",
    "the guard sings a song in the tavern every night",
};

void test_memory_embed(void) {
  weft_model *m = load_tiny();
  weft_model *em = load_embed_model();
  weft_executor *ex = m ? embed_executor(m, em, 64, 256) : NULL;
  weft_memory *mem = NULL;
  weft_memory_search_handle *s = NULL;
  weft_memory_hits *hits = NULL;
  uint64_t ids[5], id = 0;
  size_t i, n = 0;
  weft_bool ready = 0;
  weft_status code = WEFT_OK;
  uint32_t dims = 0, width = 0;
  if (ex == NULL) return;
  CHECK_OK(weft_memory_new(&mem));
  for (i = 0; i < 5; ++i) CHECK_OK(weft_memory_add(mem, ex, kFacts[i], "fact", &ids[i]));
  CHECK_OK(weft_memory_pending(mem, &n));
  CHECK(n == 5);
  step_until_no_pending(ex, mem);
  CHECK_OK(weft_memory_dimensions(mem, &dims));
  CHECK_OK(weft_executor_embedding_size(ex, &width));
  CHECK(dims == width && dims > 0);
  for (i = 0; i < 5; ++i) {
    char text[128];
    size_t len = 0;
    CHECK_OK(weft_memory_search(mem, ex, kFacts[i], 2, &s));
    if (s == NULL) continue;
    CHECK_OK(weft_memory_search_is_ready(s, &ready));
    while (!ready) {
      CHECK_OK(weft_executor_step(ex, NULL, NULL));
      CHECK_OK(weft_memory_search_wait(s, 0, &ready));
    }
    CHECK_OK(weft_memory_search_error(s, &code, NULL, 0, &len));
    CHECK(code == WEFT_OK);
    CHECK_OK(weft_memory_search_hits(s, &hits));
    CHECK_OK(weft_memory_hits_count(hits, &n));
    CHECK(n == 2);
    CHECK_OK(weft_memory_hits_id(hits, 0, &id));
    CHECK(id == ids[i]);
    CHECK_OK(weft_memory_hits_text(hits, 0, text, sizeof text, &len));
    CHECK(strcmp(text, kFacts[i]) == 0);
    CHECK_OK(weft_memory_hits_metadata(hits, 0, text, sizeof text, &len));
    CHECK(strcmp(text, "fact") == 0);
    {
      float score = 0;
      CHECK_OK(weft_memory_hits_score(hits, 0, &score));
      CHECK(score > 0.999f);
    }
    CHECK_OK(weft_memory_hits_free(hits));
    CHECK_OK(weft_memory_search_free(s));
  }
  /* Refusals through the executor: NULLs. */
  CHECK_ERR(weft_memory_add(mem, ex, NULL, NULL, &id), WEFT_ERR_NULL_ARG, "text");
  CHECK_ERR(weft_memory_add(mem, NULL, "x", NULL, &id), WEFT_ERR_NULL_ARG, "weft_executor");
  CHECK_ERR(weft_memory_search(mem, ex, NULL, 2, &s), WEFT_ERR_NULL_ARG, "query");
  CHECK_OK(weft_memory_free(mem));
  weft_executor_free(ex);
  if (em) weft_model_free(em);
  weft_model_free(m);
}

void test_memory_conversation(void) {
  weft_model *m = load_tiny();
  weft_executor *ex = m ? make_executor(m, 512, 4) : NULL;
  weft_conversation *c = NULL, *back = NULL;
  weft_memory *mem = NULL, *got = NULL;
  weft_bytes *b = NULL;
  const uint8_t *data = NULL;
  size_t size = 0, n = 0, len = 0;
  uint64_t id = 0;
  float v[4] = {1, 0, 0, 0};
  char buf[64];
  if (ex == NULL) return;
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_text(c, "Hello there", 11, WEFT_TEXT_ADD_BOS));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_memory(c, &got));
  CHECK(got == NULL);
  CHECK_OK(weft_memory_new(&mem));
  CHECK_ERR(weft_memory_add(mem, ex, "no embedder here", NULL, &id), WEFT_ERR_INVALID_ARGUMENT, "");
  CHECK_OK(weft_memory_add_vector(mem, "the key is under the anvil", "day 1", v, 4, &id));
  CHECK_OK(weft_conversation_set_memory(c, mem));
  /* The same store: what the game adds through its handle is the conversation's. */
  v[1] = 1;
  CHECK_OK(weft_memory_add_vector(mem, "the mayor owes gold", "day 2", v, 4, &id));
  CHECK_OK(weft_conversation_memory(c, &got));
  CHECK(got != NULL);
  CHECK_OK(weft_memory_size(got, &n));
  CHECK(n == 2);
  CHECK_OK(weft_memory_free(got));
  got = NULL;

  CHECK_OK(weft_conversation_save(c, &b));
  CHECK_OK(weft_bytes_data(b, &data, &size));
  CHECK_OK(weft_executor_load(ex, data, size, &back));
  CHECK_OK(weft_bytes_free(b));
  CHECK_OK(weft_conversation_memory(back, &got));
  CHECK(got != NULL);
  if (got != NULL) {
    CHECK_OK(weft_memory_size(got, &n));
    CHECK(n == 2);
    CHECK_OK(weft_memory_get_metadata(got, id, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "day 2") == 0);
    CHECK_OK(weft_memory_get_text(got, 1, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "the key is under the anvil") == 0);
    CHECK_OK(weft_memory_free(got));
    got = NULL;
  }
  CHECK_OK(weft_conversation_set_memory(c, NULL));
  CHECK_OK(weft_conversation_memory(c, &got));
  CHECK(got == NULL);
  CHECK_ERR(weft_conversation_memory(c, NULL), WEFT_ERR_NULL_ARG, "out");
  CHECK_ERR(weft_conversation_set_memory(NULL, mem), WEFT_ERR_NULL_ARG, "weft_conversation");
  CHECK_ERR(weft_conversation_set_memory(c, (const weft_memory *)c), WEFT_ERR_INVALID_HANDLE, "weft_memory");
  CHECK_OK(weft_memory_free(mem));
  weft_conversation_free(back);
  weft_conversation_free(c);
  weft_executor_free(ex);
  weft_model_free(m);
}

void test_compact(void) {
  weft_model *m = load_tiny();
  weft_executor *ex = m ? make_executor(m, 512, 4) : NULL;
  weft_conversation *c = NULL;
  weft_compact_params p;
  weft_token before[64], after[128], summary[64];
  size_t n_before = 0, n_after = 0, n_summary = 0, i;
  const char *text = " the mayor owes three gold coins";
  uint32_t n_queued = 0;
  int32_t n_vocab = 0;
  if (ex == NULL) return;
  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  for (i = 0; i < 40; ++i) before[i] = rand_token(n_vocab);
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_tokens(c, before, 40));
  run_until_idle(ex);
  CHECK_OK(weft_conversation_tokens(c, before, 64, &n_before));
  CHECK(n_before == 40);
  CHECK_OK(weft_model_tokenize(m, text, strlen(text), 0, summary, 64, &n_summary));

  CHECK_ERR(weft_compact_params_init(&p, 3), WEFT_ERR_STRUCT_SIZE, "weft_compact_params");
  CHECK_OK(weft_compact_params_init(&p, sizeof p));
  CHECK(p.keep_first == 0 && p.keep_last == 0 && p.summary == NULL);
  p.keep_first = 30;
  p.keep_last = 20;
  CHECK_ERR(weft_conversation_compact(c, &p), WEFT_ERR_OUT_OF_RANGE, "keep_first 30 + keep_last 20 exceed its 40");
  CHECK_ERR(weft_conversation_compact(c, NULL), WEFT_ERR_NULL_ARG, "params");
  CHECK_ERR(weft_conversation_compact(NULL, &p), WEFT_ERR_NULL_ARG, "weft_conversation");
  p.keep_first = 5;
  p.keep_last = 10;
  p.summary = text;
  CHECK_OK(weft_conversation_compact(c, &p));
  CHECK_OK(weft_conversation_tokens(c, after, 128, &n_after));
  CHECK(n_after == 5 + n_summary + 10);
  if (n_after == 5 + n_summary + 10) {
    CHECK(memcmp(after, before, 5 * sizeof(weft_token)) == 0);
    CHECK(memcmp(after + 5, summary, n_summary * sizeof(weft_token)) == 0);
    CHECK(memcmp(after + 5 + n_summary, before + 30, 10 * sizeof(weft_token)) == 0);
  }
  run_until_idle(ex);
  CHECK_OK(weft_conversation_n_queued(c, &n_queued));
  CHECK(n_queued == 0);
  {
    weft_compact_params bad = p;
    bad.struct_size = sizeof bad + 8;
    CHECK_ERR(weft_conversation_compact(c, &bad), WEFT_ERR_STRUCT_SIZE, "weft_compact_params");
  }
  weft_conversation_free(c);
  weft_executor_free(ex);
  weft_model_free(m);
}
