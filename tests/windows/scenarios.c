/* Seeded scenarios through the C ABI, built twice from this one file: as a
   Windows program against weft.dll (run under wine64) and as a Linux
   program against libweft.so. Each run checks its own invariants and writes
   a transcript; the Windows run then compares it with the Linux one
   (tests/windows/CMakeLists.txt).

   Usage: scenarios <tiny.gguf> <dir> <transcript.txt> [reference.txt]
   <dir> is a writable directory whose name may hold non-ASCII characters
   (the test gives one); the state and spill files go there. With a
   reference (the other platform's transcript, or the native build's for a
   portable build's CPU variant: tests/dist), greedy tokens must be
   identical and sampled logits within CROSS_BUILD_TOLERANCE. Exit 0 = all
   invariants held (and the transcripts agree). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/weft.h"

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <shellapi.h>

/* A narrow argv on Windows is in the ANSI code page and loses characters
   outside it: take the wide command line and hand weft UTF-8, as a game's
   engine does with its paths. */
static char **utf8_argv(int *argc) {
  int i, n = 0;
  wchar_t **w = CommandLineToArgvW(GetCommandLineW(), &n);
  char **out = (char **)calloc((size_t)n + 1, sizeof(char *));
  for (i = 0; w && out && i < n; ++i) {
    const int len = WideCharToMultiByte(CP_UTF8, 0, w[i], -1, NULL, 0, NULL, NULL);
    out[i] = (char *)malloc((size_t)len);
    if (out[i]) WideCharToMultiByte(CP_UTF8, 0, w[i], -1, out[i], len, NULL, NULL);
  }
  *argc = n;
  return out;
}
#endif

enum { NV_MAX = 65536, PROMPT = 40, GREEDY = 12 };

static int g_failures = 0;
static FILE *g_out = NULL;
static int32_t g_nv = 0;
static float g_a[NV_MAX], g_b[NV_MAX];

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);     \
      ++g_failures;                                                          \
    }                                                                        \
  } while (0)
#define CHECK_OK(call)                                                                             \
  do {                                                                                             \
    weft_status s_ = (call);                                                                       \
    if (s_ != WEFT_OK) {                                                                           \
      fprintf(stderr, "%s:%d: FAILED: %s -> %s: %s\n", __FILE__, __LINE__, #call,                  \
              weft_status_name(s_), weft_last_error());                                            \
      ++g_failures;                                                                                \
    }                                                                                              \
  } while (0)
#define CHECK_ERR(call, expected, needle)                                                           \
  do {                                                                                              \
    weft_status s_ = (call);                                                                        \
    if (s_ != (expected) || strstr(weft_last_error(), (needle)) == NULL) {                          \
      fprintf(stderr, "%s:%d: FAILED: %s -> %s '%s', expected %s naming '%s'\n", __FILE__, __LINE__, \
              #call, weft_status_name(s_), weft_last_error(), weft_status_name(expected), (needle)); \
      ++g_failures;                                                                                 \
    }                                                                                               \
  } while (0)

/* Same-machine tolerance, as tests/capi (8x llama.cpp's batch noise). */
#define SAME_RUN_TOLERANCE (8 * 2e-8)
/* Between builds (Linux native ISA, Windows AVX2): other SIMD paths sum in
   another order; still far below what any real difference gives (~1e-1). */
#define CROSS_BUILD_TOLERANCE 1e-6

static double nmse(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  size_t i;
  for (i = 0; i < n; ++i) {
    const double d = (double)a[i] - (double)b[i];
    num += d * d;
    den += (double)b[i] * (double)b[i];
  }
  return den > 0 ? num / den : num;
}

static size_t argmax(const float *v, size_t n) {
  size_t best = 0, i;
  for (i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

static uint32_t g_rng = 777;
static weft_token rand_token(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return (weft_token)(3 + (g_rng >> 8) % (uint32_t)(g_nv - 3));
}

static weft_executor *make_executor(weft_model *m, const char *spill_dir) {
  weft_executor_params p;
  weft_executor *ex = NULL;
  CHECK_OK(weft_executor_params_init(&p, sizeof p));
  p.n_ctx = 512;
  p.n_batch = 64;
  p.n_seq_max = 4;
  p.n_threads = 2;
  p.flash_attn = WEFT_FLASH_ATTN_DISABLED; /* no timing-based choice: the same kernel on both */
  p.prefix_cache_cells = 0;
  if (spill_dir) {
    p.spill_disk_dir = spill_dir;
    p.spill_ram_bytes = 0; /* straight to disk */
  }
  CHECK_OK(weft_executor_create(m, &p, &ex));
  return ex;
}

static void run(weft_executor *ex) {
  weft_step_result r;
  int guard = 0;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  do {
    CHECK_OK(weft_executor_step(ex, NULL, &r));
  } while (!r.idle && ++guard < 10000);
}

static void logits(weft_conversation *c, float *buf) {
  size_t n = 0;
  CHECK_OK(weft_conversation_logits(c, buf, NV_MAX, &n));
  CHECK(n == (size_t)g_nv);
}

/* The transcript: every 97th logit (the comparison's sample) and the argmax. */
static void record_logits(const char *name, const float *v) {
  int32_t i;
  fprintf(g_out, "logits %s argmax=%u", name, (unsigned)argmax(v, (size_t)g_nv));
  for (i = 0; i < g_nv; i += 97) fprintf(g_out, " %.9g", (double)v[i]);
  fprintf(g_out, "\n");
}

/* Greedy continuation, recorded: the tokens must be identical on both. */
static void greedy(const char *name, weft_executor *ex, weft_conversation *c, int n) {
  int i;
  fprintf(g_out, "tokens %s", name);
  for (i = 0; i < n; ++i) {
    weft_token t;
    logits(c, g_a);
    t = (weft_token)argmax(g_a, (size_t)g_nv);
    fprintf(g_out, " %d", (int)t);
    CHECK_OK(weft_conversation_prompt_tokens(c, &t, 1));
    run(ex);
  }
  fprintf(g_out, "\n");
}

/* Line by line: "tokens" lines identical, "logits" lines with the same
   name and argmax and values within CROSS_BUILD_TOLERANCE. */
static int compare(const char *mine_path, const char *ref_path) {
  static char a[1 << 16], b[1 << 16];
  FILE *fa = fopen(mine_path, "r"), *fb = fopen(ref_path, "r");
  int bad = 0, lines = 0;
  double worst = 0; /* the largest logits nmse seen, reported */
  if (!fa || !fb) {
    fprintf(stderr, "cannot open %s or %s\n", mine_path, ref_path);
    return 1;
  }
  for (;;) {
    char *ra = fgets(a, sizeof a, fa), *rb = fgets(b, sizeof b, fb);
    if (!ra || !rb) {
      if (ra || rb) bad = fprintf(stderr, "transcripts differ in length\n");
      break;
    }
    ++lines;
    if (strncmp(a, "logits ", 7) == 0 && strncmp(b, "logits ", 7) == 0) {
      char *pa = strstr(a, " argmax="), *pb = strstr(b, " argmax=");
      double num = 0, den = 0;
      if (!pa || !pb || (pa - a) != (pb - b) || strncmp(a, b, (size_t)(pa - a)) != 0 || strtol(pa + 8, &pa, 10) != strtol(pb + 8, &pb, 10)) {
        bad = fprintf(stderr, "logits differ:\n  %.120s\n  %.120s\n", a, b);
        continue;
      }
      for (;;) {
        char *ea, *eb;
        const double x = strtod(pa, &ea), y = strtod(pb, &eb);
        if (ea == pa || eb == pb) break;
        num += (x - y) * (x - y);
        den += y * y;
        pa = ea;
        pb = eb;
      }
      if (den > 0 && num / den > worst) worst = num / den;
      if (den <= 0 || num / den > CROSS_BUILD_TOLERANCE) {
        bad = fprintf(stderr, "logits differ (nmse %g):\n  %.120s\n  %.120s\n", den > 0 ? num / den : num, a, b);
      }
    } else if (strcmp(a, b) != 0) {
      bad = fprintf(stderr, "transcripts differ:\n  %s  %s", a, b);
    }
  }
  fclose(fa);
  fclose(fb);
  if (lines == 0) bad = fprintf(stderr, "empty transcript\n");
  fprintf(stderr, "scenarios: %d transcript lines compared with %s: %s (largest logits nmse %.3g, tolerance %g)\n",
          lines, ref_path, bad ? "DIFFERENT" : "same", worst, CROSS_BUILD_TOLERANCE);
  return bad != 0;
}

int main(int argc, char **argv) {
  weft_model_params mp;
  weft_model *m = NULL, *bad = NULL;
  weft_executor *ex, *spill;
  weft_conversation *c = NULL, *split = NULL, *fork = NULL, *fresh = NULL, *back = NULL, *moved = NULL;
  weft_token prompt[PROMPT], extra[5];
  char path[1024], spill_dir[1024];
  weft_bool parked = 0;
  int32_t residency = -1;
  uint32_t n = 0;
  int i;
#ifdef _WIN32
  argv = utf8_argv(&argc);
#endif
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: scenarios <tiny.gguf> <dir> <transcript.txt> [reference.txt]\n");
    return 2;
  }
  g_out = fopen(argv[3], "w");
  if (!g_out) return 2;
  {
    /* The CPU code under test; WEFT_EXPECT_CPU_VARIANT (tests/dist) names
       the variant a portable build must have loaded. */
    const char *variant = NULL, *expect = getenv("WEFT_EXPECT_CPU_VARIANT");
    weft_bool dispatch = 0;
    CHECK_OK(weft_cpu_variant(&variant, &dispatch));
    fprintf(stderr, "scenarios: cpu variant %s (runtime dispatch %d)\n", variant ? variant : "?", (int)dispatch);
    if (expect && *expect) CHECK(variant && strcmp(variant, expect) == 0 && dispatch);
  }
  CHECK_OK(weft_model_params_init(&mp, sizeof mp));
  mp.path = argv[1];
  CHECK_OK(weft_model_load(&mp, &m));
  if (!m) return 1;
  CHECK_OK(weft_model_n_vocab(m, &g_nv));
  if (g_nv <= 3 || g_nv > NV_MAX) return 1;
  ex = make_executor(m, NULL);
  prompt[0] = 1;
  for (i = 1; i < PROMPT; ++i) prompt[i] = rand_token();
  for (i = 0; i < 5; ++i) extra[i] = rand_token();

  /* A prompt in one call and in three: the same logits. */
  CHECK_OK(weft_conversation_create(ex, &c));
  CHECK_OK(weft_conversation_prompt_tokens(c, prompt, PROMPT));
  CHECK_OK(weft_conversation_create(ex, &split));
  CHECK_OK(weft_conversation_prompt_tokens(split, prompt, 7));
  run(ex);
  CHECK_OK(weft_conversation_prompt_tokens(split, prompt + 7, 20));
  CHECK_OK(weft_conversation_prompt_tokens(split, prompt + 27, PROMPT - 27));
  run(ex);
  logits(c, g_a);
  logits(split, g_b);
  CHECK(nmse(g_b, g_a, (size_t)g_nv) < SAME_RUN_TOLERANCE);
  record_logits("prompt", g_a);

  /* A fork continues as a fresh conversation with the same tokens. */
  CHECK_OK(weft_conversation_fork(c, &fork));
  CHECK_OK(weft_conversation_prompt_tokens(fork, extra, 5));
  CHECK_OK(weft_conversation_create(ex, &fresh));
  CHECK_OK(weft_conversation_prompt_tokens(fresh, prompt, PROMPT));
  CHECK_OK(weft_conversation_prompt_tokens(fresh, extra, 5));
  run(ex);
  logits(fork, g_a);
  logits(fresh, g_b);
  CHECK(nmse(g_a, g_b, (size_t)g_nv) < SAME_RUN_TOLERANCE);
  record_logits("fork", g_a);
  greedy("fork", ex, fork, GREEDY);

  /* Rewind to the prompt: the prompt's logits again. */
  CHECK_OK(weft_conversation_n_tokens(fork, &n));
  CHECK(n == PROMPT + 5 + GREEDY);
  CHECK_OK(weft_conversation_rewind(fork, 5 + GREEDY));
  CHECK_OK(weft_conversation_rewind(fork, 1));
  CHECK_OK(weft_conversation_prompt_tokens(fork, prompt + PROMPT - 1, 1));
  run(ex);
  logits(fork, g_a);
  logits(c, g_b);
  CHECK(nmse(g_a, g_b, (size_t)g_nv) < SAME_RUN_TOLERANCE);
  CHECK_ERR(weft_conversation_rewind(fork, 100000), WEFT_ERR_OUT_OF_RANGE, "");

  /* Shift: drop 10 tokens after the first, keep going greedily. */
  CHECK_OK(weft_conversation_free(fresh));
  CHECK_OK(weft_conversation_shift_left(fork, 1, 10));
  run(ex);
  greedy("shift", ex, fork, GREEDY);

  /* Save to a file twice (the second replaces the first: a rename onto an
     existing file fails on Windows), load, continue alike. */
  snprintf(path, sizeof path, "%s/state.weft", argv[2]);
  CHECK_OK(weft_conversation_save_file(split, path));
  CHECK_OK(weft_conversation_prompt_tokens(split, extra, 3));
  run(ex);
  CHECK_OK(weft_conversation_save_file(split, path));
  CHECK_OK(weft_executor_load_file(ex, path, &back));
  CHECK_OK(weft_conversation_n_tokens(back, &n));
  CHECK(n == PROMPT + 3);
  logits(split, g_a);
  logits(back, g_b);
  CHECK(nmse(g_a, g_b, (size_t)g_nv) < SAME_RUN_TOLERANCE);
  record_logits("loaded", g_b);
  greedy("loaded", ex, back, GREEDY);

  /* Spill to disk (a directory with non-ASCII characters), restore on use. */
  snprintf(spill_dir, sizeof spill_dir, "%s/spill", argv[2]);
  spill = make_executor(m, spill_dir);
  CHECK_OK(weft_executor_load_file(spill, path, &moved));
  run(spill);
  CHECK_OK(weft_conversation_park(moved, &parked));
  CHECK(parked == 1);
  CHECK_OK(weft_conversation_residency(moved, &residency));
  CHECK(residency == WEFT_RESIDENCY_DISK);
  greedy("spilled", spill, moved, GREEDY);

  /* Bad input: typed errors, nothing loaded. */
  snprintf(path, sizeof path, "%s/no-such-model.gguf", argv[2]);
  mp.path = path;
  CHECK_ERR(weft_model_load(&mp, &bad), WEFT_ERR_NOT_FOUND, "does not exist");
  mp.path = argv[2];
  CHECK_ERR(weft_model_load(&mp, &bad), WEFT_ERR_INVALID_ARGUMENT, "is a directory");
  CHECK_ERR(weft_executor_load_file(ex, argv[1], &moved), WEFT_ERR_CORRUPT, "");
  CHECK(bad == NULL);
#ifdef _WIN32
  {
    /* RPC is compiled out on Windows: the same validation, a clear refusal. */
    mp.path = argv[1];
    mp.rpc = "127.0.0.1:50052";
    CHECK_ERR(weft_model_load(&mp, &bad), WEFT_ERR_INVALID_ARGUMENT, "built without RPC");
    mp.rpc = NULL;
    /* Paths are UTF-8 at the API: other bytes have no wide form. */
    mp.path = "\xff\xfe.gguf";
    CHECK_ERR(weft_model_load(&mp, &bad), WEFT_ERR_INVALID_ARGUMENT, "not valid UTF-8");
  }
#endif

  CHECK_OK(weft_executor_free(spill));
  CHECK_OK(weft_executor_free(ex));
  CHECK_OK(weft_model_free(m));
  fclose(g_out);
  fprintf(stderr, "scenarios: %d failure(s)\n", g_failures);
  if (argc == 5 && compare(argv[3], argv[4]) != 0) ++g_failures;
  return g_failures == 0 ? 0 : 1;
}
