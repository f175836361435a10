// weft/embedding.hpp — text embeddings decoded by the executor's steps.
//
// With ExecutorParams::embedder set, an Executor owns a second llama.cpp
// context (embeddings on, pooled) over an embedding model, or over its own
// model when none is given. Executor::embed() queues texts and returns an
// Embedding handle at once; the steps that decode the conversations also
// decode the queued texts, under the same budgets, batched across callers
// (docs/EXECUTOR.md, "Embeddings").
//
// Ownership: an Embedding is a shared handle (copies name the same work);
// the work stays queued while the executor lives, whether or not a handle
// is kept. Thread-safety: every method may be called from any thread; none
// waits for a step (wait_for waits for at most its timeout).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "weft/error.hpp"
#include "weft/export.hpp"
#include "weft/model.hpp"

namespace weft {

// How a text's token states become one vector (llama.cpp's pooling types).
enum class Pooling {
  model,  // what the model's GGUF declares (<arch>.pooling_type); mean when it declares none
  mean,   // the mean over the text's tokens
  cls,    // the first token's state (BERT-style [CLS])
  last,   // the last token's state (decoder models trained for it)
};

// ExecutorParams::embedder.
struct EmbedderParams {
  // The embedding model (an encoder or a decoder with pooling), loaded by
  // the caller and shared read-only. Default none: the executor's own model,
  // its hidden states pooled (useful for retrieval among texts that share
  // words, weaker than a trained embedding model).
  std::optional<Model> model;
  // Default model (see Pooling).
  Pooling pooling = Pooling::model;
  // Most tokens of one text, and of one embedding decode: the second
  // context's cells. Default 512. Must be in [8, the model's n_ctx_train].
  std::uint32_t n_ctx = 512;
  // Most texts in one decode (the second context's sequences). Default 16.
  // Must be in [1, 256].
  std::uint32_t n_seq_max = 16;
  // Scale each vector to unit length (L2), so that a dot product is the
  // cosine similarity. Default true.
  bool normalize = true;
};

namespace detail {
struct EmbedJob;
}

class WEFT_API Embedding {
 public:
  Embedding() = default;  // an empty handle: done(), no vectors

  // True once every input has its vector, or the work failed or was cancelled.
  bool done() const;
  // Waits until done or `timeout` passes; returns done(). Someone must be
  // stepping the executor (a loop or its worker) for progress.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // Why the work ended without all its vectors: Errc::backend (llama.cpp
  // refused the decode), Errc::cancelled, Errc::disposed (the executor went
  // away first). Empty while running and after success.
  std::optional<Error> error() const;
  // Inputs given to Executor::embed, and of them embedded so far.
  std::size_t size() const;
  std::size_t n_done() const;
  // Input i's tokens (with the BOS/EOS/SEP its model adds): what it costs,
  // and OpenAI's usage.prompt_tokens. Throws Errc::out_of_range for
  // i >= size().
  std::size_t n_tokens(std::size_t i) const;
  // The vectors' width (the embedding model's n_embd).
  std::uint32_t n_embd() const;
  // Input i's vector: empty until it is embedded. Throws Errc::out_of_range
  // for i >= size().
  std::vector<float> vector(std::size_t i) const;
  // Every input's vector, in order (a copy; empty entries not yet embedded).
  std::vector<std::vector<float>> vectors() const;
  // Drops the inputs not yet embedded (error() becomes Errc::cancelled unless
  // all were done already).
  void cancel();

  explicit Embedding(std::shared_ptr<detail::EmbedJob> job) : job_(std::move(job)) {}

 private:
  std::shared_ptr<detail::EmbedJob> job_;
};

// The cosine similarity of two vectors of equal width (their dot product
// when both are normalised). Throws Errc::invalid_argument for unequal
// widths or an empty vector. 0 when either has zero length.
WEFT_API float cosine_similarity(std::span<const float> a, std::span<const float> b);

}  // namespace weft
