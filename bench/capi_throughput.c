/* Prompt and generation throughput through the C ABI alone: the same
   program built for Linux (against libweft.so, native or portable) and for
   Windows (weft.dll, run under wine64), so the builds can be compared on
   one machine (bench/platforms.sh; docs/BENCHMARKS.md).

   Usage: capi_throughput <model.gguf> [conversations=4] [pp=128] [tg=32]
                          [threads=2] [repetitions=3]
   Each repetition: `conversations` conversations get `pp` random tokens
   each, stepped until idle (prompt tokens/s), then `tg` greedy tokens
   each, one step per token for all of them (generated tokens/s). Prints
   one line per repetition and the medians:
     median pp_tok_s=<x> tg_tok_s=<y> variant=<cpu variant>
   Flash attention off, the kernel every cross-build comparison uses. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c99 */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/weft.h"

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
static double now_s(void) {
  LARGE_INTEGER f, c;
  QueryPerformanceFrequency(&f);
  QueryPerformanceCounter(&c);
  return (double)c.QuadPart / (double)f.QuadPart;
}
#else
#include <time.h>
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif

enum { MAX_CONV = 256, NV_MAX = 262144 };

static float g_logits[NV_MAX];

static int ok(weft_status s, const char *what) {
  if (s != WEFT_OK) {
    fprintf(stderr, "capi_throughput: %s: %s: %s\n", what, weft_status_name(s), weft_last_error());
    exit(1);
  }
  return 1;
}

static void run(weft_executor *ex) {
  weft_step_result r;
  int guard = 0;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  do {
    ok(weft_executor_step(ex, NULL, &r), "step");
  } while (!r.idle && ++guard < 1000000);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  weft_model_params mp;
  weft_executor_params ep;
  weft_model *m = NULL;
  int n_conv = argc > 2 ? atoi(argv[2]) : 4, pp = argc > 3 ? atoi(argv[3]) : 128, tg = argc > 4 ? atoi(argv[4]) : 32;
  int threads = argc > 5 ? atoi(argv[5]) : 2, reps = argc > 6 ? atoi(argv[6]) : 3;
  double pp_rate[64], tg_rate[64];
  const char *variant = "?";
  int32_t nv = 0;
  unsigned rng = 12345;
  int r, i, k;
  if (argc < 2 || n_conv < 1 || n_conv > MAX_CONV || pp < 1 || tg < 1 || threads < 0 || reps < 1 || reps > 64) {
    fprintf(stderr, "usage: capi_throughput <model.gguf> [conversations<=%d] [pp] [tg] [threads] [repetitions<=64]\n",
            MAX_CONV);
    return 2;
  }
  ok(weft_cpu_variant(&variant, NULL), "cpu variant");
  ok(weft_model_params_init(&mp, sizeof mp), "model params");
  mp.path = argv[1];
  ok(weft_model_load(&mp, &m), "model load");
  ok(weft_model_n_vocab(m, &nv), "n_vocab");
  if (nv > NV_MAX) return 2;
  for (r = 0; r < reps; ++r) {
    weft_executor *ex = NULL;
    weft_conversation *conv[MAX_CONV];
    double t0, t1;
    ok(weft_executor_params_init(&ep, sizeof ep), "executor params");
    ep.n_ctx = (uint32_t)(n_conv * (pp + tg) + 64);
    ep.n_batch = ep.n_ctx < 512 ? ep.n_ctx : 512;
    ep.n_seq_max = (uint32_t)n_conv;
    ep.n_threads = threads;
    ep.flash_attn = WEFT_FLASH_ATTN_DISABLED;
    ep.prefix_cache_cells = 0;
    ok(weft_executor_create(m, &ep, &ex), "executor create");
    for (k = 0; k < n_conv; ++k) {
      weft_token *prompt = (weft_token *)malloc(sizeof(weft_token) * (size_t)pp);
      prompt[0] = 1;
      for (i = 1; i < pp; ++i) {
        rng = rng * 1664525u + 1013904223u;
        prompt[i] = (weft_token)(3 + (rng >> 8) % (unsigned)(nv - 3));
      }
      ok(weft_conversation_create(ex, &conv[k]), "conversation create");
      ok(weft_conversation_prompt_tokens(conv[k], prompt, (size_t)pp), "prompt");
      free(prompt);
    }
    t0 = now_s();
    run(ex);
    t1 = now_s();
    pp_rate[r] = (double)n_conv * pp / (t1 - t0);
    t0 = now_s();
    for (i = 0; i < tg; ++i) {
      for (k = 0; k < n_conv; ++k) {
        size_t n = 0, j, best = 0;
        weft_token t;
        ok(weft_conversation_logits(conv[k], g_logits, NV_MAX, &n), "logits");
        for (j = 1; j < n; ++j)
          if (g_logits[j] > g_logits[best]) best = j;
        t = (weft_token)best;
        ok(weft_conversation_prompt_tokens(conv[k], &t, 1), "token");
      }
      run(ex);
    }
    t1 = now_s();
    tg_rate[r] = (double)n_conv * tg / (t1 - t0);
    printf("rep %d pp_tok_s=%.1f tg_tok_s=%.1f\n", r + 1, pp_rate[r], tg_rate[r]);
    fflush(stdout);
    for (k = 0; k < n_conv; ++k) ok(weft_conversation_free(conv[k]), "conversation free");
    ok(weft_executor_free(ex), "executor free");
  }
  printf("median pp_tok_s=%.1f tg_tok_s=%.1f variant=%s conversations=%d pp=%d tg=%d threads=%d\n",
         median(pp_rate, reps), median(tg_rate, reps), variant, n_conv, pp, tg, threads);
  ok(weft_model_free(m), "model free");
  return 0;
}
