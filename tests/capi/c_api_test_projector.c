/* C ABI tests: images (weft/c/projector.h). A projector loaded and its
   refusals; a conversation of text, an image and text decoded beside three
   text conversations has the logits of the same input decoded alone in an
   executor of its own, and again after save/load into that one; its image
   span and positions; with WEFT_IMAGE_ENCODING_CALLER the image waits for
   weft_executor_encode_images and then has the same logits; bad images
   refused while the executor goes on; an executor without a projector
   refuses images.

   The projector is made by the `weft make-mmproj` CLI beside the model
   (the make_capi_mmproj CTest fixture): for <dir>/tiny.gguf,
   <dir>/tiny-mmproj.gguf. */
#include <stddef.h>

#include "c_api_test.h"

#define IMG_W 40
#define IMG_H 28
#define N_TEXT 9

static const char *mmproj_path(void) {
  static char path[1024];
  size_t n = strlen(g_model_path);
  if (n >= 5 && strcmp(g_model_path + n - 5, ".gguf") == 0) n -= 5;
  snprintf(path, sizeof path, "%.*s-mmproj.gguf", (int)n, g_model_path);
  return path;
}

static weft_executor *executor_with(weft_model *m, const weft_projector *p, uint32_t n_seq_max) {
  weft_executor_params ep;
  weft_executor *ex = NULL;
  CHECK_OK(weft_executor_params_init(&ep, sizeof ep));
  CHECK(ep.projector == NULL);
  ep.n_ctx = 512;
  ep.n_batch = 64;
  ep.n_seq_max = n_seq_max;
  ep.n_threads = 2;
  ep.projector = p;
  CHECK_OK(weft_executor_create(m, &ep, &ex));
  return ex;
}

static void prompt_scene(weft_conversation *c, const uint8_t *rgb) {
  weft_token a[N_TEXT], b[N_TEXT];
  int i;
  for (i = 0; i < N_TEXT; ++i) {
    a[i] = (weft_token)(40 + 7 * i);
    b[i] = (weft_token)(90 + 11 * i);
  }
  CHECK_OK(weft_conversation_prompt_tokens(c, a, N_TEXT));
  CHECK_OK(weft_conversation_prompt_image_rgb(c, IMG_W, IMG_H, rgb, (size_t)IMG_W * IMG_H * 3));
  CHECK_OK(weft_conversation_prompt_tokens(c, b, N_TEXT));
}

/* Steps until `c` has logits; the image waits for the encoder thread
   meanwhile (idle steps), so bounded by time. */
static void run_until_logits(weft_executor *ex, weft_conversation *c) {
  weft_step_result r;
  weft_bool has = 0;
  const double until = now_s() + 60;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  while (now_s() < until) {
    CHECK_OK(weft_conversation_has_logits(c, &has));
    if (has) return;
    CHECK_OK(weft_executor_step(ex, NULL, &r));
    if (r.idle) sleep_ms(1);
  }
  failf(__FILE__, __LINE__, "no logits within 60 s");
}

void test_images(void) {
  weft_model *m = load_tiny();
  weft_projector *p = NULL, *junk = NULL;
  weft_projector_params pp;
  weft_executor *busy, *alone, *plain;
  weft_conversation *c = NULL, *ref = NULL, *text[3], *back = NULL, *q = NULL;
  weft_image_span span;
  weft_bool flag = 0;
  weft_bytes *state = NULL;
  const uint8_t *data = NULL;
  size_t n = 0, size = 0, i;
  int32_t n_vocab;
  weft_model_info info;
  static uint8_t rgb[IMG_W * IMG_H * 3];
  static float got[65536], want[65536];
  static weft_token toks[1024];
  uint8_t bad[64];
  if (!m) return;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(weft_model_get_info(m, &info));
  n_vocab = info.n_vocab;
  if (access(mmproj_path(), R_OK) != 0) {
    failf(__FILE__, __LINE__, "projector %s is missing (made by the make_capi_mmproj CTest fixture: weft "
          "make-mmproj --base <model> --out ...)", mmproj_path());
    weft_model_free(m);
    return;
  }
  for (i = 0; i < sizeof rgb; ++i) rgb[i] = (uint8_t)((i * 37u + (i >> 5) * 11u) & 0xFF);

  /* Loading and its refusals. */
  CHECK_OK(weft_projector_params_init(&pp, sizeof pp));
  CHECK(pp.n_threads == 1 && pp.use_gpu == 0 && pp.path == NULL);
  junk = (weft_projector *)&n;
  CHECK_ERR(weft_projector_load(m, &pp, &junk), WEFT_ERR_NULL_ARG, "path");
  CHECK(junk == NULL);
  pp.path = mmproj_path();
  if (weft_projector_load(m, &pp, &junk) == WEFT_ERR_INVALID_ARGUMENT && strstr(weft_last_error(), "without mtmd")) {
    printf("  images: skipped (weft built without mtmd)\n");
    weft_model_free(m);
    return;
  }
  CHECK_OK(weft_projector_free(junk));
  pp.path = "/nonexistent/mmproj.gguf";
  CHECK_ERR(weft_projector_load(m, &pp, &junk), WEFT_ERR_NOT_FOUND, "does not exist");
  pp.path = mmproj_path();
  pp.n_threads = 0;
  CHECK_ERR(weft_projector_load(m, &pp, &junk), WEFT_ERR_INVALID_ARGUMENT, "n_threads");
  pp.n_threads = 2;
  pp.struct_size = 3;
  CHECK_ERR(weft_projector_load(m, &pp, &junk), WEFT_ERR_STRUCT_SIZE, "struct_size");
  pp.struct_size = sizeof pp;
  CHECK_ERR(weft_projector_load(m, NULL, &junk), WEFT_ERR_NULL_ARG, "params");
  CHECK_OK(weft_projector_load(m, &pp, &p));
  CHECK_OK(weft_projector_mrope(p, &flag));
  CHECK(flag == 0);
  CHECK_OK(weft_projector_non_causal(p, &flag));
  CHECK(flag == 1); /* gemma3: attention inside the image is not causal */

  busy = executor_with(m, p, 4);
  alone = executor_with(m, p, 1);
  /* The executors hold their own references. */
  CHECK_OK(weft_projector_free(p));
  CHECK_ERR(weft_projector_mrope(p, &flag), WEFT_ERR_INVALID_HANDLE, "weft_projector");

  for (i = 0; i < 3; ++i) {
    weft_token t[20];
    size_t k;
    for (k = 0; k < 20; ++k) t[k] = rand_token(n_vocab);
    CHECK_OK(weft_conversation_create(busy, &text[i]));
    CHECK_OK(weft_conversation_prompt_tokens(text[i], t, 5 + 5 * i));
  }
  CHECK_OK(weft_conversation_create(busy, &c));
  prompt_scene(c, rgb);
  CHECK_OK(weft_conversation_create(alone, &ref));
  prompt_scene(ref, rgb);
  run_until_logits(busy, c);
  run_until_logits(alone, ref);
  CHECK(get_logits(c, got, 65536) == (size_t)n_vocab);
  CHECK(get_logits(ref, want, 65536) == (size_t)n_vocab);
  CHECK(nmse(got, want, (size_t)n_vocab) < LOGITS_TOLERANCE);

  {
    weft_executor_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_OK(weft_executor_get_stats(busy, &st));
    CHECK(st.images_encoded == 1 && st.image_batches >= 1 && st.image_encode_ms > 0 && st.image_decode_ms > 0);
  }

  /* The image's span and positions. */
  CHECK_OK(weft_conversation_n_images(c, &n));
  CHECK(n == 1);
  memset(&span, 0, sizeof span);
  span.struct_size = sizeof span;
  CHECK_OK(weft_conversation_image(c, 0, &span));
  CHECK(span.encoded == 1 && span.n_tokens == 16 && span.n_pos == 16 && span.begin >= N_TEXT && span.id > 0);
  CHECK(span.audio == 0);
  CHECK_ERR(weft_conversation_image(c, 1, &span), WEFT_ERR_OUT_OF_RANGE, "1 images");
  span.struct_size = 1;
  CHECK_ERR(weft_conversation_image(c, 0, &span), WEFT_ERR_STRUCT_SIZE, "weft_image_span");
  /* The struct as it was before `audio` was appended: that field untouched. */
  span.struct_size = offsetof(weft_image_span, audio);
  span.audio = 7;
  CHECK_OK(weft_conversation_image(c, 0, &span));
  CHECK(span.audio == 7 && span.n_tokens == 16);
  span.struct_size = sizeof span;
  CHECK_OK(weft_conversation_tokens(c, toks, 1024, &n));
  CHECK(n == span.begin + span.n_tokens + N_TEXT + (n - span.begin - span.n_tokens - N_TEXT));
  for (i = span.begin; i < span.begin + span.n_tokens; ++i) CHECK(toks[i] == weft_image_token(span.id));
  CHECK(toks[span.begin - 1] >= 0 && toks[span.begin + span.n_tokens] >= 0);

  /* Save, load beside the reference: the same logits. */
  CHECK_OK(weft_conversation_save(c, &state));
  CHECK_OK(weft_bytes_data(state, &data, &size));
  CHECK_OK(weft_executor_load(busy, data, size, &back));
  CHECK(get_logits(back, got, 65536) == (size_t)n_vocab);
  CHECK(nmse(got, want, (size_t)n_vocab) < LOGITS_TOLERANCE);
  CHECK_OK(weft_conversation_n_images(back, &n));
  CHECK(n == 1);

  /* Prepared (here; any thread would do) and queued: the same logits as the
     image queued directly. A prepared image of another load of the file is
     another projector's: refused by the first executors. */
  {
    weft_prepared_image *img = NULL;
    weft_executor *pex;
    weft_conversation *d = NULL, *e = NULL;
    uint32_t n_img = 0;
    weft_token a[N_TEXT], b[N_TEXT];
    for (i = 0; i < N_TEXT; ++i) {
      a[i] = (weft_token)(40 + 7 * i);
      b[i] = (weft_token)(90 + 11 * i);
    }
    CHECK_ERR(weft_projector_prepare_image(NULL, rgb, 10, &img), WEFT_ERR_NULL_ARG, "weft_projector");
    CHECK(img == NULL);
    CHECK_OK(weft_projector_load(m, &pp, &p));
    CHECK_ERR(weft_projector_prepare_image(p, bad, 0, &img), WEFT_ERR_INVALID_ARGUMENT, "no image bytes");
    CHECK_OK(weft_projector_prepare_image_rgb(p, IMG_W, IMG_H, rgb, sizeof rgb, &img));
    CHECK_OK(weft_prepared_image_n_tokens(img, &n_img));
    CHECK(n_img == 16);
    pex = executor_with(m, p, 2);
    CHECK_OK(weft_projector_free(p));
    CHECK_OK(weft_conversation_create(pex, &d));
    CHECK_OK(weft_conversation_prompt_tokens(d, a, N_TEXT));
    CHECK_OK(weft_conversation_prompt_prepared_image(d, img));
    CHECK_OK(weft_conversation_prompt_tokens(d, b, N_TEXT));
    CHECK_OK(weft_conversation_create(alone, &e));
    CHECK_ERR(weft_conversation_prompt_prepared_image(e, img), WEFT_ERR_INVALID_ARGUMENT, "another projector");
    CHECK_OK(weft_prepared_image_free(img));
    CHECK_ERR(weft_conversation_prompt_prepared_image(d, img), WEFT_ERR_INVALID_HANDLE, "weft_prepared_image");
    run_until_logits(pex, d);
    CHECK(get_logits(d, got, 65536) == (size_t)n_vocab);
    CHECK(nmse(got, want, (size_t)n_vocab) < LOGITS_TOLERANCE);
    CHECK_OK(weft_conversation_free(e));
    CHECK_OK(weft_conversation_free(d));
    CHECK_OK(weft_executor_free(pex));
  }

  /* WEFT_IMAGE_ENCODING_CALLER: steps leave the image queued until
     weft_executor_encode_images runs it (on this thread); then the same
     logits. A bad result size costs no encode; an older params struct
     without the field reads as the encoder thread. */
  {
    weft_executor_params ep;
    weft_executor *cex = NULL;
    weft_conversation *d = NULL;
    weft_encode_result er;
    weft_executor_stats st;
    int k;
    CHECK_OK(weft_projector_load(m, &pp, &p));
    CHECK_OK(weft_executor_params_init(&ep, sizeof ep));
    CHECK(ep.image_encoding == WEFT_IMAGE_ENCODING_THREAD);
    ep.n_ctx = 512;
    ep.n_batch = 64;
    ep.n_seq_max = 2;
    ep.n_threads = 2;
    ep.projector = p;
    ep.image_encoding = 5;
    CHECK_ERR(weft_executor_create(m, &ep, &cex), WEFT_ERR_INVALID_ARGUMENT, "image_encoding = 5");
    ep.struct_size = offsetof(weft_executor_params, image_encoding);
    CHECK_OK(weft_executor_create(m, &ep, &cex)); /* the field unread: the thread */
    CHECK_OK(weft_executor_free(cex));
    ep.struct_size = sizeof ep;
    ep.image_encoding = WEFT_IMAGE_ENCODING_CALLER;
    CHECK_OK(weft_executor_create(m, &ep, &cex));
    CHECK_OK(weft_projector_free(p));
    CHECK_OK(weft_conversation_create(cex, &d));
    prompt_scene(d, rgb);
    /* 100 ms of steps: an encoder thread would have encoded it (5 ms) by then. */
    for (k = 0; k < 50; ++k) {
      CHECK_OK(weft_executor_step(cex, NULL, NULL));
      sleep_ms(2);
    }
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_OK(weft_executor_get_stats(cex, &st));
    CHECK(st.images_pending == 1 && st.images_encoded == 0);
    memset(&span, 0, sizeof span);
    span.struct_size = sizeof span;
    CHECK_OK(weft_conversation_image(d, 0, &span));
    CHECK(span.encoded == 0);
    memset(&er, 0, sizeof er);
    er.struct_size = 2;
    CHECK_ERR(weft_executor_encode_images(cex, 1, &er), WEFT_ERR_STRUCT_SIZE, "weft_encode_result");
    CHECK_OK(weft_executor_get_stats(cex, &st));
    CHECK(st.images_pending == 1 && st.images_encoded == 0);
    er.struct_size = sizeof er;
    CHECK_OK(weft_executor_encode_images(cex, 4, &er));
    CHECK(er.images == 1 && er.failed == 0 && er.pending == 0 && er.seconds > 0);
    CHECK_OK(weft_executor_encode_images(cex, 4, NULL)); /* nothing left */
    CHECK_OK(weft_conversation_image(d, 0, &span));
    CHECK(span.encoded == 1);
    run_until_logits(cex, d);
    CHECK(get_logits(d, got, 65536) == (size_t)n_vocab);
    CHECK(nmse(got, want, (size_t)n_vocab) < LOGITS_TOLERANCE);
    /* A stats struct from before images_pending: that field untouched. */
    st.struct_size = offsetof(weft_executor_stats, images_pending);
    st.images_pending = 77;
    CHECK_OK(weft_executor_get_stats(cex, &st));
    CHECK(st.images_pending == 77 && st.images_encoded == 1);
    CHECK_OK(weft_conversation_free(d));
    CHECK_OK(weft_executor_free(cex));
    CHECK_ERR(weft_executor_encode_images(cex, 1, NULL), WEFT_ERR_INVALID_HANDLE, "weft_executor");
  }

  /* Bad images: typed, and the conversation and executor go on. */
  memset(bad, 7, sizeof bad);
  CHECK_ERR(weft_conversation_prompt_image(c, bad, sizeof bad), WEFT_ERR_INVALID_ARGUMENT, "neither a PNG nor a JPEG");
  CHECK_ERR(weft_conversation_prompt_image(c, NULL, 10), WEFT_ERR_NULL_ARG, "file");
  CHECK_ERR(weft_conversation_prompt_image(c, NULL, 0), WEFT_ERR_INVALID_ARGUMENT, "no image bytes");
  CHECK_ERR(weft_conversation_prompt_image_rgb(c, 5, 5, rgb, 30), WEFT_ERR_INVALID_ARGUMENT, "needs 75 bytes");
  CHECK_ERR(weft_conversation_prompt_image_rgb(c, 9000, 1, rgb, 27000), WEFT_ERR_OUT_OF_RANGE, "9000 x 1");
  CHECK_OK(weft_conversation_n_images(c, &n));
  CHECK(n == 1);
  CHECK_OK(weft_conversation_has_logits(c, &flag));
  CHECK(flag == 1);

  /* Text with media markers: the marker, a mismatch refused, two images queued. */
  {
    weft_prepared_image *imgs[2] = {NULL, NULL};
    weft_conversation *t = NULL;
    weft_executor *tex = NULL;
    char line[128];
    size_t n_t = 0;
    CHECK(strcmp(weft_media_marker(), "<__media__>") == 0);
    CHECK_OK(weft_projector_load(m, &pp, &p));
    CHECK_OK(weft_projector_prepare_image_rgb(p, IMG_W, IMG_H, rgb, sizeof rgb, &imgs[0]));
    CHECK_OK(weft_projector_prepare_image_rgb(p, IMG_W, IMG_H, rgb, sizeof rgb, &imgs[1]));
    tex = executor_with(m, p, 2);
    CHECK_OK(weft_projector_free(p));
    CHECK_OK(weft_conversation_create(tex, &t));
    snprintf(line, sizeof line, "Look: %s and %s.", weft_media_marker(), weft_media_marker());
    CHECK_ERR(weft_conversation_prompt_text_with_images(t, line, strlen(line), (const weft_prepared_image *const *)imgs,
                                                        1, WEFT_TEXT_ADD_BOS),
              WEFT_ERR_INVALID_ARGUMENT, "2 media markers");
    CHECK_ERR(weft_conversation_prompt_text_with_images(t, line, strlen(line), NULL, 2, 0), WEFT_ERR_NULL_ARG,
              "images");
    CHECK_OK(weft_conversation_n_images(t, &n_t));
    CHECK(n_t == 0);
    CHECK_OK(weft_conversation_prompt_text_with_images(t, line, strlen(line), (const weft_prepared_image *const *)imgs,
                                                       2, WEFT_TEXT_ADD_BOS));
    CHECK_OK(weft_conversation_n_images(t, &n_t));
    CHECK(n_t == 2);
    CHECK_OK(weft_prepared_image_free(imgs[0]));
    CHECK_OK(weft_prepared_image_free(imgs[1]));
    CHECK_OK(weft_conversation_free(t));
    CHECK_OK(weft_executor_free(tex));
  }

  /* A vision-only projector: no audio, typed. */
  {
    weft_bool vision = 0, audio = 1;
    int32_t rate = -1;
    static float silence[1600];
    CHECK_OK(weft_projector_load(m, &pp, &p));
    CHECK_OK(weft_projector_vision(p, &vision));
    CHECK_OK(weft_projector_audio(p, &audio, &rate));
    CHECK(vision == 1 && audio == 0 && rate == 0);
    CHECK_OK(weft_projector_audio(p, &audio, NULL));
    CHECK_ERR(weft_projector_audio(p, NULL, &rate), WEFT_ERR_NULL_ARG, "out");
    CHECK_OK(weft_projector_free(p));
    CHECK_ERR(weft_conversation_prompt_audio(c, silence, 1600), WEFT_ERR_INCOMPATIBLE, "no audio encoder");
    CHECK_ERR(weft_conversation_prompt_audio(c, NULL, 1600), WEFT_ERR_NULL_ARG, "samples");
    CHECK_OK(weft_conversation_n_images(c, &n));
    CHECK(n == 1);
  }

  /* No projector: refused, and saying why. */
  plain = make_executor(m, 256, 2);
  CHECK_OK(weft_conversation_create(plain, &q));
  CHECK_ERR(weft_conversation_prompt_image_rgb(q, IMG_W, IMG_H, rgb, sizeof rgb), WEFT_ERR_INVALID_ARGUMENT,
            "needs a projector");
  CHECK_ERR(weft_executor_load(plain, data, size, &back), WEFT_ERR_INCOMPATIBLE, "no projector");

  CHECK_OK(weft_bytes_free(state));
  CHECK_OK(weft_conversation_free(q));
  CHECK_OK(weft_executor_free(plain));
  for (i = 0; i < 3; ++i) CHECK_OK(weft_conversation_free(text[i]));
  CHECK_OK(weft_conversation_free(back));
  CHECK_OK(weft_conversation_free(c));
  CHECK_OK(weft_conversation_free(ref));
  CHECK_OK(weft_executor_free(busy));
  CHECK_OK(weft_executor_free(alone));
  CHECK_OK(weft_model_free(m));
}
