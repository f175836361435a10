// Executor::embed and the Embedding handle (weft/embedding.hpp).
#include <fmt/format.h>

#include <cmath>

#include "core/internal.hpp"
#include "exec/executor_core.hpp"

namespace weft {
namespace {

detail::Embedder &embedder_of(detail::ExecutorCore &c) {
  if (!c.embedder) {
    detail::fail(Errc::invalid_argument, "Executor::embed: this executor has no embedder (ExecutorParams::embedder)");
  }
  return *c.embedder;
}

Embedding queue(detail::ExecutorCore &c, std::vector<std::vector<Token>> inputs) {
  std::shared_ptr<detail::EmbedJob> job;
  {
    // The state lock only to see the executor is alive; the queue has its own.
    std::lock_guard lock(c.mu);
    if (c.closed) detail::fail(Errc::disposed, "the executor was destroyed");
    job = c.embedder->submit(std::move(inputs));
  }
  c.notify_work();
  return Embedding(std::move(job));
}

}  // namespace

Embedding Executor::embed(const std::vector<std::string> &texts) {
  auto &c = detail::live_core(core_);
  return queue(c, embedder_of(c).tokenize(texts));
}

Embedding Executor::embed_tokens(std::vector<std::vector<Token>> inputs) {
  auto &c = detail::live_core(core_);
  embedder_of(c).check(inputs);
  return queue(c, std::move(inputs));
}

std::uint32_t Executor::embedding_size() const {
  const auto &c = detail::live_core(core_);
  return c.embedder ? c.embedder->n_embd() : 0;
}

bool Embedding::done() const {
  if (!job_) return true;
  std::lock_guard lock(job_->mu);
  return job_->finished;
}

bool Embedding::wait_for(std::chrono::milliseconds timeout) const {
  if (!job_) return true;
  std::unique_lock lock(job_->mu);
  return job_->cv.wait_for(lock, timeout, [&] { return job_->finished; });
}

std::optional<Error> Embedding::error() const {
  if (!job_) return std::nullopt;
  std::lock_guard lock(job_->mu);
  return job_->error;
}

std::size_t Embedding::size() const { return job_ ? job_->inputs.size() : 0; }

std::size_t Embedding::n_done() const {
  if (!job_) return 0;
  std::lock_guard lock(job_->mu);
  return job_->n_done;
}

std::uint32_t Embedding::n_embd() const { return job_ ? job_->n_embd : 0; }

std::size_t Embedding::n_tokens(std::size_t i) const {
  if (i >= size()) {
    detail::fail(Errc::out_of_range, fmt::format("Embedding::n_tokens({}): the embedding has {} inputs", i, size()));
  }
  return job_->inputs[i].size();  // read-only once queued
}

std::vector<float> Embedding::vector(std::size_t i) const {
  if (i >= size()) {
    detail::fail(Errc::out_of_range, fmt::format("Embedding::vector({}): the embedding has {} inputs", i, size()));
  }
  std::lock_guard lock(job_->mu);
  return job_->out[i];
}

std::vector<std::vector<float>> Embedding::vectors() const {
  if (!job_) return {};
  std::lock_guard lock(job_->mu);
  return job_->out;
}

void Embedding::cancel() {
  if (!job_) return;
  std::lock_guard lock(job_->mu);
  job_->finish_locked(Error(Errc::cancelled, "the embedding was cancelled"));
}

float cosine_similarity(std::span<const float> a, std::span<const float> b) {
  if (a.empty() || a.size() != b.size()) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("cosine_similarity: vectors of {} and {} floats (equal, non-zero widths needed)", a.size(),
                             b.size()));
  }
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  if (aa <= 0 || bb <= 0) return 0;
  return static_cast<float>(ab / std::sqrt(aa * bb));
}

}  // namespace weft
