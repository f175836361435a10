/* C ABI tests: text embeddings (weft/c/embedding.h). Texts queued in random
   groups at random steps, beside generating conversations, under random
   token budgets: every vector equals the same text embedded alone (within 8x
   what batching alone does to llama.cpp's pooled output, measured here), is
   unit length, and equals the vector of its tokens (weft_model_tokenize with
   BOS, as many as weft_embedding_n_tokens says) given to
   weft_executor_embed_tokens; the steps' and the stats' counts agree. Both with the executor's own model pooled and with an embedding
   model of its own (embed.gguf, made by the make_embed_test_model fixture:
   WEFT_TEST_EMBED_MODEL names it, else it is looked for beside the model and
   skipped when absent). Refusals, cancel and lifetimes:
   c_api_test_embedding_life.c. */
#include <stddef.h>

#include "c_api_test.h"

#define N_GROUPS 6

static const char *const kWords[] = {"the",   "blacksmith", "sells", "silver", "swords", "to",     "travellers", "at",
                                     "dawn",  "river",      "gate",  "mayor",  "owes",   "three",  "gold",       "coins",
                                     "wolf",  "forest",     "north", "bread",  "baker",  "market", "key",        "hidden",
                                     "under", "anvil",      "song",  "tavern", "night",  "guard"};

static uint32_t g_erng = 777;
static uint32_t erand(uint32_t n) {
  g_erng = g_erng * 1664525u + 1013904223u;
  return (g_erng >> 8) % n;
}

/* A text of min..max random words into buf. */
static void random_text(char *buf, size_t cap, int min_words, int max_words) {
  const int n = min_words + (int)erand((uint32_t)(max_words - min_words + 1));
  size_t len = 0;
  int i;
  buf[0] = '\0';
  for (i = 0; i < n; ++i) {
    const char *w = kWords[erand(sizeof kWords / sizeof kWords[0])];
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i > 0 ? " " : "", w);
  }
}

/* The embedding model: $WEFT_TEST_EMBED_MODEL (required then), else
   embed.gguf beside the model; NULL when there is none. */
static const char *embed_model_path(void) {
  static char path[1024];
  const char *env = getenv("WEFT_TEST_EMBED_MODEL");
  const char *slash;
  FILE *f;
  if (env != NULL && env[0] != '\0') return env;
  slash = strrchr(g_model_path, '/');
  snprintf(path, sizeof path, "%.*sembed.gguf", slash ? (int)(slash - g_model_path + 1) : 0, g_model_path);
  f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fclose(f);
  return path;
}

weft_model *load_embed_model(void) {
  const char *path = embed_model_path();
  weft_model_params mp;
  weft_model *m = NULL;
  if (path == NULL) {
    printf("  (no embed.gguf beside %s: the embedding-model half is skipped)\n", g_model_path);
    return NULL;
  }
  CHECK_OK(weft_model_params_init(&mp, sizeof mp));
  mp.path = path;
  CHECK_OK(weft_model_load(&mp, &m));
  return m;
}

/* An executor over `m` whose embedder pools `em` (NULL: m itself). */
weft_executor *embed_executor(weft_model *m, const weft_model *em, uint32_t n_batch, uint32_t embed_n_ctx) {
  weft_executor_params p;
  weft_executor *ex = NULL;
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.n_ctx = 1024;
  p.n_batch = n_batch;
  p.n_seq_max = 8;
  p.n_threads = 2;
  p.embedder = 1;
  p.embedding_model = em;
  p.embed_n_ctx = embed_n_ctx;
  p.embed_n_seq_max = 8;
  CHECK_OK(weft_executor_create(m, &p, &ex));
  return ex;
}

void step_until_embedded(weft_executor *ex, weft_embedding *e) {
  weft_bool done = 0;
  int guard = 0;
  do {
    CHECK_OK(weft_executor_step(ex, NULL, NULL));
    CHECK_OK(weft_embedding_is_done(e, &done));
  } while (!done && ++guard < 1000);
  CHECK(done);
}

static size_t vector_of(const weft_embedding *e, size_t i, float *buf) {
  size_t n = 0;
  CHECK_OK(weft_embedding_vector(e, i, buf, MAX_EMBD, &n));
  return n;
}

double norm2(const float *v, size_t n) {
  double s = 0;
  size_t i;
  for (i = 0; i < n; ++i) s += (double)v[i] * (double)v[i];
  return s;
}

/* One text embedded alone (its own decode) by `alone`. */
static size_t embed_alone(weft_executor *alone, const char *text, float *out) {
  weft_embedding *e = NULL;
  size_t n = 0;
  CHECK_OK(weft_executor_embed(alone, &text, 1, &e));
  if (e == NULL) return 0;
  step_until_embedded(alone, e);
  n = vector_of(e, 0, out);
  CHECK_OK(weft_embedding_free(e));
  return n;
}

/* What batching alone does here: the largest nmse of 8 texts embedded in
   one decode against each embedded alone. */
static double noise_floor(weft_executor *alone, weft_executor *batch) {
  static char texts[8][256];
  const char *ptrs[8];
  static float together[MAX_EMBD], single[MAX_EMBD];
  weft_embedding *e = NULL;
  weft_step_result r;
  double worst = 0;
  size_t i, n;
  for (i = 0; i < 8; ++i) {
    random_text(texts[i], sizeof texts[i], 1, 24);
    ptrs[i] = texts[i];
  }
  CHECK_OK(weft_executor_embed(batch, ptrs, 8, &e));
  if (e == NULL) return 1;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  CHECK_OK(weft_executor_step(batch, NULL, &r));
  CHECK(r.texts_embedded == 8); /* one decode: the floor is measured as meant */
  for (i = 0; i < 8; ++i) {
    n = vector_of(e, i, together);
    CHECK(n > 0 && embed_alone(alone, texts[i], single) == n);
    if (n > 0) {
      const double d = nmse(together, single, n);
      if (d > worst) worst = d;
    }
  }
  CHECK_OK(weft_embedding_free(e));
  return worst;
}

/* The scenario of the file's comment, on `m` with embedder model `em`. */
static void check_embeddings(weft_model *m, weft_model *em) {
  static char texts[N_GROUPS][4][256];
  static float got[MAX_EMBD], want[MAX_EMBD], by_tokens[MAX_EMBD];
  const weft_model *vocab_model = em != NULL ? em : m;
  weft_executor *ex = embed_executor(m, em, 64, 512);
  weft_executor *alone = embed_executor(m, em, 512, 512);
  weft_embedding *groups[N_GROUPS] = {NULL};
  size_t group_n[N_GROUPS] = {0};
  weft_conversation *convs[3] = {NULL};
  weft_generation *gens[3] = {NULL};
  weft_model_info info;
  weft_generate_params gp;
  weft_step_budget b;
  weft_step_result r;
  weft_executor_stats st;
  uint64_t step_tokens = 0, step_texts = 0, n_texts = 0;
  uint32_t width = 0;
  double tol, worst = 0;
  int n_groups = 0, step, i, j;
  int32_t n_vocab = 0;
  if (ex == NULL || alone == NULL) return;
  info.struct_size = sizeof info;
  CHECK_OK(weft_model_get_info(vocab_model, &info));
  CHECK_OK(weft_executor_embedding_size(ex, &width));
  CHECK(width == (uint32_t)info.n_embd && width <= MAX_EMBD);
  tol = 8 * noise_floor(alone, alone);
  if (tol < 1e-10) tol = 1e-10;

  CHECK_OK(weft_model_n_vocab(m, &n_vocab));
  CHECK_OK(weft_generate_params_init(&gp, sizeof gp));
  gp.max_tokens = 12;
  gp.ignore_eos = 1;
  for (i = 0; i < 3; ++i) {
    weft_token prompt[20];
    for (j = 0; j < 20; ++j) prompt[j] = (weft_token)(3 + erand((uint32_t)n_vocab - 3));
    CHECK_OK(weft_conversation_create(ex, &convs[i]));
    CHECK_OK(weft_conversation_prompt_tokens(convs[i], prompt, 20));
    CHECK_OK(weft_conversation_generate(convs[i], &gp, &gens[i]));
  }
  CHECK_OK(weft_step_budget_init(&b, sizeof b));
  memset(&r, 0, sizeof r);
  for (step = 0; step < 400; ++step) {
    if (n_groups < N_GROUPS && erand(3) == 0) {
      const char *ptrs[4];
      group_n[n_groups] = 1 + erand(4);
      for (j = 0; j < (int)group_n[n_groups]; ++j) {
        random_text(texts[n_groups][j], sizeof texts[n_groups][j], 1, 30);
        ptrs[j] = texts[n_groups][j];
      }
      CHECK_OK(weft_executor_embed(ex, ptrs, group_n[n_groups], &groups[n_groups]));
      n_texts += group_n[n_groups];
      ++n_groups;
    }
    b.max_tokens = 1 + erand(64);
    r.struct_size = sizeof r;
    CHECK_OK(weft_executor_step(ex, &b, &r));
    step_tokens += r.tokens_embedded;
    step_texts += r.texts_embedded;
    if (r.idle && n_groups == N_GROUPS) break;
  }
  for (i = 0; i < n_groups; ++i) {
    weft_bool done = 0;
    weft_status code = WEFT_ERR_INTERNAL;
    size_t n_done = 0, size = 0, len = 0;
    char msg[8];
    uint32_t n_embd = 0;
    if (groups[i] == NULL) continue;
    CHECK_OK(weft_embedding_is_done(groups[i], &done));
    CHECK_OK(weft_embedding_error(groups[i], &code, msg, sizeof msg, &len));
    CHECK_OK(weft_embedding_size(groups[i], &size));
    CHECK_OK(weft_embedding_n_done(groups[i], &n_done));
    CHECK_OK(weft_embedding_n_embd(groups[i], &n_embd));
    CHECK(done && code == WEFT_OK && len == 0 && size == group_n[i] && n_done == size && n_embd == width);
    for (j = 0; j < (int)group_n[i]; ++j) {
      const char *text = texts[i][j];
      weft_token toks[256];
      const weft_token *tp = toks;
      weft_embedding *t = NULL;
      size_t n = vector_of(groups[i], (size_t)j, got), n_tok = 0;
      CHECK(n == width && embed_alone(alone, text, want) == width);
      if (n != width) continue;
      {
        const double d = nmse(got, want, n);
        if (d > worst) worst = d;
        if (d > tol) failf(__FILE__, __LINE__, "'%s': nmse %.3g > %.3g", text, d, tol);
      }
      CHECK(fabs(norm2(got, n) - 1.0) < 1e-5);
      /* Its tokens, given as tokens: the same vector. */
      CHECK_OK(weft_model_tokenize(vocab_model, text, strlen(text), WEFT_TEXT_ADD_BOS, toks, 256, &n_tok));
      {
        size_t counted = 0;
        CHECK_OK(weft_embedding_n_tokens(groups[i], (size_t)j, &counted));
        CHECK(counted == n_tok); /* its BOS, and no EOS in these models */
      }
      CHECK_OK(weft_executor_embed_tokens(alone, &tp, &n_tok, 1, &t));
      if (t == NULL) continue;
      step_until_embedded(alone, t);
      CHECK(vector_of(t, 0, by_tokens) == width && nmse(by_tokens, want, width) <= tol);
      CHECK_OK(weft_embedding_free(t));
    }
  }
  printf("  embeddings (%s): %d texts, worst nmse %.3g, tolerance %.3g\n", em ? "embed.gguf" : "own model",
         (int)n_texts, worst, tol);
  CHECK(n_groups >= 2);
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(weft_executor_get_stats(ex, &st));
  CHECK(st.texts_embedded == n_texts && st.texts_embedded == step_texts && st.embed_tokens == step_tokens);
  CHECK(st.embed_tokens > n_texts && st.embed_decodes >= 1 && st.embed_ms > 0 && st.embed_pending == 0);

  /* Cosine similarity: 1 with itself, the dot product of unit vectors. */
  {
    float c = 0, dot = 0;
    size_t k;
    CHECK(vector_of(groups[0], 0, got) == width);
    embed_alone(alone, "the wolf of the north forest", want);
    for (k = 0; k < width; ++k) dot += got[k] * want[k];
    CHECK_OK(weft_cosine_similarity(got, width, got, width, &c));
    CHECK(fabs(c - 1.0f) < 1e-5);
    CHECK_OK(weft_cosine_similarity(got, width, want, width, &c));
    CHECK(fabs(c - dot) < 1e-5 && c < 1.0f);
  }
  for (i = 0; i < n_groups; ++i) CHECK_OK(weft_embedding_free(groups[i]));
  for (i = 0; i < 3; ++i) {
    CHECK_OK(weft_generation_free(gens[i]));
    CHECK_OK(weft_conversation_free(convs[i]));
  }
  CHECK_OK(weft_executor_free(alone));
  CHECK_OK(weft_executor_free(ex));
}

void test_embeddings(void) {
  weft_model *m = load_tiny();
  weft_model *em;
  if (!m) return;
  check_embeddings(m, NULL);
  em = load_embed_model();
  if (getenv("WEFT_TEST_EMBED_MODEL") != NULL) CHECK(em != NULL);
  if (em != NULL) {
    check_embeddings(m, em);
    CHECK_OK(weft_model_free(em));
  }
  CHECK_OK(weft_model_free(m));
}
