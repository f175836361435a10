// weft/c/projector.h — images and audio in conversations: a projector
// (mmproj) loaded for a model, handed to an executor, and images and audio
// clips queued like text.
//
// Part of weft.h (include that one; the rules it states apply here). The
// C++ side is weft/projector.hpp and Conversation::prompt_image
// (docs/IMAGES.md): the vision encoder runs on the executor's
// own encoder thread (or in weft_executor_encode_images, where the caller
// places it), never inside a step, and a step decodes each image whole once
// its embeddings are ready.
#ifndef WEFT_C_PROJECTOR_H
#define WEFT_C_PROJECTOR_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

// weft_projector (common.h): a loaded projector, immutable, shared by any
// number of executors and threads (each executor encodes one image at a
// time; executors sharing one take turns on its encoder). Released with
// weft_projector_free; it keeps its model's weights alive, and an executor
// keeps it alive, so either handle may be freed first.

typedef struct weft_projector_params {
  size_t struct_size;
  const char *path;   // NUL-terminated path of the projector GGUF (mmproj). Required
  int32_t n_threads;  // CPU threads of its image encoder. Default 1; >= 1
  weft_bool use_gpu;  // run the encoder on a GPU backend when weft has one. Default 0
} weft_projector_params;

WEFT_C_API weft_status weft_projector_params_init(weft_projector_params *params, size_t struct_size);

// Loads params->path for `model` (the text model the projector was made
// for). WEFT_ERR_INVALID_ARGUMENT (no path, n_threads < 1, weft built
// without mtmd), WEFT_ERR_NOT_FOUND (no such file), WEFT_ERR_INCOMPATIBLE
// (not a projector, made for another model's width, no vision encoder).
// Never waits for a step.
WEFT_C_API weft_status weft_projector_load(const weft_model *model, const weft_projector_params *params,
                                           weft_projector **out);
WEFT_C_API weft_status weft_projector_free(weft_projector *projector);
// Whether images decode with M-RoPE positions (Qwen2-VL style: a grid's
// cells share one position and advance by max(width, height)), and with
// non-causal attention inside the image (Gemma 3 style).
WEFT_C_API weft_status weft_projector_mrope(const weft_projector *projector, weft_bool *out);
WEFT_C_API weft_status weft_projector_non_causal(const weft_projector *projector, weft_bool *out);
// Whether it takes images, and audio (then *sample_rate, if not NULL, gets
// the rate its samples are in: 16000 for Whisper-style encoders; 0 without).
WEFT_C_API weft_status weft_projector_vision(const weft_projector *projector, weft_bool *out);
WEFT_C_API weft_status weft_projector_audio(const weft_projector *projector, weft_bool *out, int32_t *sample_rate);

// Queues a clip of audio: n mono float samples in [-1, 1] at the projector's
// sample rate (copied; the mel spectrogram is computed on the calling
// thread), encoded and decoded as an image is (one span,
// weft_conversation_image with audio set). WEFT_ERR_INCOMPATIBLE (the
// projector takes no audio), WEFT_ERR_INVALID_ARGUMENT (no samples, one not
// finite, NULL with n > 0, a generation running), WEFT_ERR_OUT_OF_RANGE
// (over 2^24 samples, or past n_ctx). Never waits for a step.
WEFT_C_API weft_status weft_conversation_prompt_audio(weft_conversation *conversation, const float *samples,
                                                      size_t n);

// Queues an image (the executor needs weft_executor_params.projector): a
// PNG or JPEG file's bytes, or raw RGB (width x height x 3 bytes, rows top
// to bottom). It becomes the text the projector wraps an image in and one
// span of positions (weft_conversation_image), queued like text; until its
// embeddings are ready the conversation's later input waits while others
// go on. The file is decoded and resized on the calling thread; the call
// never waits for a step. WEFT_ERR_INVALID_ARGUMENT (no projector, empty or
// not PNG/JPEG, a zero side, RGB of the wrong size, a generation running),
// WEFT_ERR_OUT_OF_RANGE (a side over 8192, more than 2^25 pixels, or past
// n_ctx as weft_conversation_prompt_tokens), WEFT_ERR_CORRUPT (bytes that do
// not decode), WEFT_ERR_INCOMPATIBLE (an M-RoPE grid other than
// Qwen2-VL's). An encoder
// failure later is the conversation's error (weft_conversation_error).
WEFT_C_API weft_status weft_conversation_prompt_image(weft_conversation *conversation, const uint8_t *file,
                                                      size_t len);
WEFT_C_API weft_status weft_conversation_prompt_image_rgb(weft_conversation *conversation, uint32_t width,
                                                          uint32_t height, const uint8_t *rgb, size_t len);

// The costly part of the two calls above — the file's decode, the resize —
// on the calling thread, so a game can run it on a worker thread of its own:
// *out (the caller's, freed with weft_prepared_image_free) is an immutable
// image any thread may queue, any number of times, with
// weft_conversation_prompt_prepared_image, which then costs microseconds.
// The same checks and errors as the prompt calls; never waits for a step.
WEFT_C_API weft_status weft_projector_prepare_image(const weft_projector *projector, const uint8_t *file, size_t len,
                                                    weft_prepared_image **out);
WEFT_C_API weft_status weft_projector_prepare_image_rgb(const weft_projector *projector, uint32_t width,
                                                        uint32_t height, const uint8_t *rgb, size_t len,
                                                        weft_prepared_image **out);
WEFT_C_API weft_status weft_prepared_image_free(weft_prepared_image *image);
// Positions the image itself takes (without the text around it).
WEFT_C_API weft_status weft_prepared_image_n_tokens(const weft_prepared_image *image, uint32_t *out);
// Queues a prepared image. WEFT_ERR_INVALID_ARGUMENT when it was prepared
// with another projector than the executor's; else as
// weft_conversation_prompt_image. The conversation keeps what it needs: the
// handle may be freed at once.
WEFT_C_API weft_status weft_conversation_prompt_prepared_image(weft_conversation *conversation,
                                                               const weft_prepared_image *image);

// An image of a conversation. Each of its positions in
// weft_conversation_tokens holds the same negative value, weft_image_token(id).
typedef struct weft_image_span {
  size_t struct_size;
  uint64_t id;        // executor-unique, never reused
  uint32_t begin;     // its first position
  uint32_t n_tokens;  // positions (and KV cells) it takes
  uint32_t n_pos;     // positions RoPE advances by (n_tokens unless M-RoPE)
  weft_bool encoded;  // its embeddings are ready
  weft_bool audio;    // a clip of audio, not an image (appended: an older struct_size leaves it out)
} weft_image_span;

// Its images (queued and decoded), by position: how many, and the one at
// `index` (< that count, else WEFT_ERR_OUT_OF_RANGE) into *out, whose
// struct_size the caller sets. Never waits for a step.
WEFT_C_API weft_status weft_conversation_n_images(const weft_conversation *conversation, size_t *out);
WEFT_C_API weft_status weft_conversation_image(const weft_conversation *conversation, size_t index,
                                               weft_image_span *out);
// The value an image's positions hold (as C++ weft::image_token).
WEFT_C_API weft_token weft_image_token(uint64_t id);

// The marker that stands for an image in text ("<__media__>", mtmd's); a
// static string, never freed.
WEFT_C_API const char *weft_media_marker(void);
// Text with media markers, each replaced in order by the next of `images`
// (borrowed for the call), as mtmd_tokenize does: every piece of text
// tokenized alone (WEFT_TEXT_ADD_BOS puts BOS before the first). All of it
// is queued or none. WEFT_ERR_INVALID_ARGUMENT when markers and images
// differ in number, else as weft_conversation_prompt_text and
// weft_conversation_prompt_prepared_image. Never waits for a step.
WEFT_C_API weft_status weft_conversation_prompt_text_with_images(weft_conversation *conversation, const char *text,
                                                                 size_t len, const weft_prepared_image *const *images,
                                                                 size_t n_images, uint32_t flags);

// What one weft_executor_encode_images call did.
typedef struct weft_encode_result {
  size_t struct_size;
  uint32_t images;   // images (and clips) it encoded, failed ones included
  uint32_t failed;   // of which failed: each its conversation's error
  uint32_t pending;  // queued or being encoded (by others) when it returned
  double seconds;    // its time in the encoder
} weft_encode_result;

// Runs the encoder on up to `max_images` queued images, oldest first, on
// the calling thread, now (milliseconds to seconds of CPU each). With
// WEFT_IMAGE_ENCODING_CALLER nothing else encodes them; with ..._THREAD it
// takes images the encoder thread has not started. Never waits for a step,
// and no step waits for it: a step running meanwhile shares the cores with
// it, so place it between steps or where the frame has idle cores. Any
// number of threads may call it at once, each taking its own images; a
// projector encodes one image at a time, so a call may wait for the encode
// another caller (or the encoder thread) is running. An encoder failure is that
// conversation's error, not this call's. Returns at once (images 0) when
// nothing is queued or the executor has no projector. `out` may be NULL
// (else set out->struct_size). WEFT_ERR_DISPOSED after the executor is freed.
WEFT_C_API weft_status weft_executor_encode_images(weft_executor *executor, uint32_t max_images,
                                                   weft_encode_result *out);

WEFT_END_DECL

#endif  // WEFT_C_PROJECTOR_H
