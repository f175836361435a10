// Embedder: the executor's second context for text embeddings
// (ExecutorParams::embedder), its queue of texts, and what a decode of them
// costs. Executor::embed() queues under the embedder's own lock (never the
// state lock, never a step's); the stepping thread decodes (step.cpp), so
// the context is only ever touched by whoever holds the step gate.
#pragma once

#include <llama.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "weft/embedding.hpp"
#include "weft/types.hpp"

namespace weft::detail {

// What an Embedding handle names.
struct EmbedJob {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::vector<std::vector<Token>> inputs;  // read-only once queued
  std::vector<std::vector<float>> out;     // under mu
  std::size_t n_done = 0;                  // under mu
  bool finished = false;                   // under mu
  std::optional<Error> error;              // under mu
  std::uint32_t n_embd = 0;
  // Ends it (under mu; wakes waiters). No-op once finished.
  void finish_locked(std::optional<Error> why);
};

class Embedder {
 public:
  // Makes the second context (embeddings on, pooled). Throws
  // Errc::invalid_argument for params outside their ranges and
  // Errc::backend when llama.cpp cannot make the context.
  Embedder(const Model &model, const EmbedderParams &params, int n_threads, llama_flash_attn_type kernel);
  ~Embedder();
  Embedder(const Embedder &) = delete;
  Embedder &operator=(const Embedder &) = delete;

  // Texts -> the embedding model's tokens (its BOS/EOS/SEP as its vocabulary
  // asks). Throws Errc::invalid_argument (no texts, a text without tokens)
  // and Errc::out_of_range (a text longer than n_ctx), naming the text.
  std::vector<std::vector<Token>> tokenize(const std::vector<std::string> &texts) const;
  // Checks token inputs as tokenize() checks texts, plus every id in the vocabulary.
  void check(const std::vector<std::vector<Token>> &inputs) const;
  // Queues checked inputs. Never waits for a decode.
  std::shared_ptr<EmbedJob> submit(std::vector<std::vector<Token>> inputs);

  // Queued inputs not yet embedded.
  std::size_t pending() const;
  // The previous run() passed over queued work: this step's embeddings go
  // first, the front text whatever the budget (their turn; never two in a row).
  bool due() const { return due_; }

  struct Ran {
    std::uint32_t tokens = 0;  // decoded
    std::uint32_t texts = 0;   // embedded
    std::uint32_t failed = 0;  // texts whose decode llama.cpp refused
    double seconds = 0;
  };
  // Decodes queued texts in order, in as few llama_decode calls as they
  // take: those that fit `tokens` and (with a time budget) are predicted to
  // fit `seconds`; with `turn`, the front text whatever it costs. Passing
  // over queued work makes the next run due(). Stepping thread only.
  Ran run(std::uint32_t tokens, std::optional<double> seconds, bool turn);
  // Ends every queued job with `why` (the executor is going away).
  void fail_all(const Error &why);

  // Totals so far (ExecutorStats), counted before a decode's vectors are
  // handed out: whoever sees a vector sees it counted.
  struct Counters {
    std::uint64_t texts = 0, tokens = 0, decodes = 0;
    double seconds = 0;
  };
  Counters counters() const;

  std::uint32_t n_embd() const { return n_embd_; }
  std::uint32_t n_ctx() const { return n_ctx_; }
  Pooling pooling() const { return pooling_; }
  // Seconds a decode of n tokens is predicted to take (0 before the first).
  double predict(std::uint32_t n) const;

 private:
  struct Pick {
    std::shared_ptr<EmbedJob> job;
    std::size_t index;
  };
  // Takes the next inputs to decode from the queue (under qmu_).
  void take_locked(std::uint32_t tokens, std::optional<double> seconds, bool turn, std::vector<Pick> &out);
  void deliver(const std::vector<Pick> &picks, int rc);

  Model model_;
  llama_context *ctx_ = nullptr;
  llama_batch batch_{};
  EmbedderParams params_;
  Pooling pooling_ = Pooling::mean;
  std::uint32_t n_ctx_ = 0;
  std::uint32_t n_embd_ = 0;

  mutable std::mutex qmu_;  // guards queue_, next_, pending_ and counters_
  Counters counters_;
  std::deque<std::shared_ptr<EmbedJob>> queue_;
  std::size_t next_ = 0;     // the front job's first input not yet taken
  std::size_t pending_ = 0;  // inputs queued, not taken

  bool due_ = false;
  // Seconds per token of the decodes so far (a moving average): predict(n)
  // = per_token_ * n.
  double per_token_ = 0;
  std::vector<Pick> picks_;  // run()'s, reused
};

}  // namespace weft::detail
