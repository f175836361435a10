// weft/c/embedding.h — text embeddings decoded by the executor's steps:
// queue texts (or token arrays) on an executor made with an embedder
// (weft_executor_params.embedder), then poll, wait for or cancel the
// weft_embedding handle and copy its vectors out (weft/embedding.hpp).
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_EMBEDDING_H
#define WEFT_C_EMBEDDING_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

// weft::Pooling: how a text's token states become one vector
// (weft_executor_params.embed_pooling).
typedef enum weft_pooling {
  WEFT_POOLING_MODEL = 0,  // what the model's GGUF declares (<arch>.pooling_type); mean when it declares none
  WEFT_POOLING_MEAN = 1,   // the mean over the text's tokens
  WEFT_POOLING_CLS = 2,    // the first token's state (BERT-style [CLS])
  WEFT_POOLING_LAST = 3,   // the last token's state (decoder models trained for it)
} weft_pooling;

// Queues `n_texts` NUL-terminated UTF-8 texts for embedding and returns at
// once with *out, the caller's (weft_embedding_free); the steps decode them
// (each text whole, batched with other callers' under the steps' budgets),
// so someone must step the executor (a loop or its worker). Tokenized with
// the embedding model's vocabulary, its BOS/EOS as it declares; the texts
// are copied. WEFT_ERR_INVALID_ARGUMENT for an executor made without an
// embedder, n_texts = 0, a text with no tokens or invalid UTF-8 (naming its
// index); WEFT_ERR_NULL_ARG for `texts` or one of them NULL;
// WEFT_ERR_OUT_OF_RANGE for a text longer than embed_n_ctx tokens (naming its
// index and token count); WEFT_ERR_DISPOSED. Nothing is queued when it fails.
// Never waits for a step.
WEFT_C_API weft_status weft_executor_embed(weft_executor *executor, const char *const *texts, size_t n_texts,
                                           weft_embedding **out);
// The same for token inputs of the embedding model: inputs[i] holds
// n_tokens[i] ids, copied (the model's BOS/EOS are not added). Each id is
// checked: WEFT_ERR_OUT_OF_RANGE naming it and the vocabulary size; an empty
// input is WEFT_ERR_INVALID_ARGUMENT naming its index; NULL `inputs` or
// `n_tokens` with n_inputs > 0, or inputs[i] NULL with a length, is
// WEFT_ERR_NULL_ARG.
WEFT_C_API weft_status weft_executor_embed_tokens(weft_executor *executor, const weft_token *const *inputs,
                                                  const size_t *n_tokens, size_t n_inputs, weft_embedding **out);
// The vectors' width (the embedding model's output width); 0 for an
// executor made without an embedder.
WEFT_C_API weft_status weft_executor_embedding_size(const weft_executor *executor, uint32_t *out);

// The handle is independent of its executor: freeing either first is safe
// (an executor freed before the work is done ends it with WEFT_ERR_DISPOSED;
// the vectors made by then stay readable). The work stays queued while the
// executor lives, whether or not the handle is kept: free it early to stop
// caring, weft_embedding_cancel to drop the work.
WEFT_C_API weft_status weft_embedding_free(weft_embedding *embedding);
// *out = 1 once every input has its vector, or the work failed or was
// cancelled (see weft_embedding_error).
WEFT_C_API weft_status weft_embedding_is_done(const weft_embedding *embedding, weft_bool *out);
// Waits until done or `timeout_ms` passes; *out_done says which. Someone
// must be stepping the executor meanwhile.
WEFT_C_API weft_status weft_embedding_wait(const weft_embedding *embedding, uint32_t timeout_ms, weft_bool *out_done);
// Why the work ended without all its vectors: *out_code WEFT_ERR_BACKEND
// (llama.cpp refused the decode), WEFT_ERR_CANCELLED or WEFT_ERR_DISPOSED (the
// executor was freed first), and its message in buf (as
// weft_conversation_error); *out_code = WEFT_OK while running and after
// success.
WEFT_C_API weft_status weft_embedding_error(const weft_embedding *embedding, weft_status *out_code, char *buf,
                                            size_t capacity, size_t *out_len);
// The inputs given to weft_executor_embed(_tokens), and of them embedded so far.
WEFT_C_API weft_status weft_embedding_size(const weft_embedding *embedding, size_t *out);
WEFT_C_API weft_status weft_embedding_n_done(const weft_embedding *embedding, size_t *out);
// Input `index`'s tokens (with the BOS/EOS/SEP its model adds to a text):
// what it costs to embed. WEFT_ERR_OUT_OF_RANGE for index >=
// weft_embedding_size.
WEFT_C_API weft_status weft_embedding_n_tokens(const weft_embedding *embedding, size_t index, size_t *out);
// The vectors' width (as weft_executor_embedding_size).
WEFT_C_API weft_status weft_embedding_n_embd(const weft_embedding *embedding, uint32_t *out);
// Copies input `index`'s vector (n_embd floats; unit length unless
// embed_normalize was 0) into `buf`, *out_n its length. While the input is
// not embedded yet (or never will be: cancelled, failed) *out_n = 0, WEFT_OK
// and `buf` is untouched; so the vector is there when *out_n > 0. A
// `capacity` below n_embd for an embedded input is WEFT_ERR_BUFFER_TOO_SMALL
// with *out_n = n_embd (capacity 0 asks). WEFT_ERR_OUT_OF_RANGE for
// index >= weft_embedding_size.
WEFT_C_API weft_status weft_embedding_vector(const weft_embedding *embedding, size_t index, float *buf,
                                             size_t capacity, size_t *out_n);
// Drops the inputs not yet embedded: the handle is done at once, its error
// WEFT_ERR_CANCELLED unless every input was embedded already. Vectors made
// before stay readable. Never waits for a step.
WEFT_C_API weft_status weft_embedding_cancel(weft_embedding *embedding);

// The cosine similarity of two vectors of equal width (n_a = n_b > 0; their
// dot product when both are unit length), in [-1, 1]; 0 when either has
// zero length. WEFT_ERR_INVALID_ARGUMENT for unequal or zero widths (naming
// both), WEFT_ERR_NULL_ARG for a NULL vector.
WEFT_C_API weft_status weft_cosine_similarity(const float *a, size_t n_a, const float *b, size_t n_b, float *out);

WEFT_END_DECL

#endif  // WEFT_C_EMBEDDING_H
