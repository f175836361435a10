#include "exec/embedder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/internal.hpp"
#include "core/model_impl.hpp"

namespace weft::detail {
namespace {

enum llama_pooling_type to_llama_pooling(Pooling p) {
  switch (p) {
    case Pooling::mean: return LLAMA_POOLING_TYPE_MEAN;
    case Pooling::cls: return LLAMA_POOLING_TYPE_CLS;
    case Pooling::last: return LLAMA_POOLING_TYPE_LAST;
    case Pooling::model: break;
  }
  return LLAMA_POOLING_TYPE_MEAN;
}

// Pooling::model: the GGUF's <arch>.pooling_type (llama.cpp's numbering),
// mean when absent or none (a generative model) or rank (a reranker, whose
// pooled output is a score, not a vector).
Pooling declared_pooling(const Model &m) {
  const std::string v = m.meta(m.meta("general.architecture") + ".pooling_type");
  if (v == "2") return Pooling::cls;
  if (v == "3") return Pooling::last;
  return Pooling::mean;
}

const char *embed_pooling_name(Pooling p) {
  switch (p) {
    case Pooling::model: return "model";
    case Pooling::mean: return "mean";
    case Pooling::cls: return "cls";
    case Pooling::last: return "last";
  }
  return "?";
}

void normalise_l2(std::vector<float> &v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  if (s <= 0) return;
  const float k = static_cast<float>(1.0 / std::sqrt(s));
  for (float &x : v) x *= k;
}

}  // namespace

void EmbedJob::finish_locked(std::optional<Error> why) {
  if (finished) return;
  finished = true;
  error = std::move(why);
  cv.notify_all();
}

Embedder::Embedder(const Model &model, const EmbedderParams &params, int n_threads, llama_flash_attn_type kernel)
    : model_(params.model.value_or(model)), params_(params) {
  const auto train = static_cast<std::uint32_t>(std::max(0, model_.n_ctx_train()));
  if (params.n_ctx < 8 || params.n_ctx > train) {
    fail(Errc::invalid_argument,
         fmt::format("EmbedderParams.n_ctx = {} is outside [8, the embedding model's n_ctx_train = {}]", params.n_ctx,
                     train));
  }
  const auto seq_limit = static_cast<std::uint32_t>(std::min<std::size_t>(256, llama_max_parallel_sequences()));
  if (params.n_seq_max < 1 || params.n_seq_max > seq_limit) {
    fail(Errc::invalid_argument,
         fmt::format("EmbedderParams.n_seq_max = {} is outside [1, {}]", params.n_seq_max, seq_limit));
  }
  pooling_ = params.pooling == Pooling::model ? declared_pooling(model_) : params.pooling;
  auto cp = llama_context_default_params();
  cp.n_ctx = params.n_ctx;
  cp.n_batch = params.n_ctx;
  cp.n_ubatch = params.n_ctx;  // a non-causal text is decoded in one micro-batch
  cp.n_seq_max = params.n_seq_max;
  cp.kv_unified = true;  // one text may take every cell
  cp.embeddings = true;
  cp.pooling_type = to_llama_pooling(pooling_);
  cp.n_threads = n_threads;
  cp.n_threads_batch = n_threads;
  cp.flash_attn_type = kernel;
  cp.no_perf = true;
  take_llama_error();
  ctx_ = llama_init_from_model(model_.impl()->model, cp);
  if (ctx_ == nullptr) {
    fail(Errc::backend, fmt::format("llama.cpp could not create the embeddings context (n_ctx {}, n_seq_max {}, "
                                    "pooling {}): {}",
                                    params.n_ctx, params.n_seq_max, embed_pooling_name(pooling_), take_llama_error()));
  }
  n_ctx_ = params.n_ctx;
  n_embd_ = static_cast<std::uint32_t>(llama_model_n_embd_out(model_.impl()->model));
  batch_ = llama_batch_init(static_cast<std::int32_t>(n_ctx_), 0, 1);
}

Embedder::~Embedder() {
  fail_all(Error(Errc::disposed, "the executor was destroyed before this text was embedded"));
  llama_batch_free(batch_);
  if (ctx_ != nullptr) llama_free(ctx_);
}

std::vector<std::vector<Token>> Embedder::tokenize(const std::vector<std::string> &texts) const {
  if (texts.empty()) fail(Errc::invalid_argument, "Executor::embed: no texts given");
  const llama_vocab *vocab = model_.impl()->vocab;
  std::vector<std::vector<Token>> out(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string &t = texts[i];
    // Within n_ctx, a text has at most n_ctx tokens: ask for one more to see it is longer.
    std::vector<Token> tok(std::min<std::size_t>(t.size() + 8, std::size_t(n_ctx_) + 1));
    int n = llama_tokenize(vocab, t.data(), static_cast<std::int32_t>(t.size()), tok.data(),
                           static_cast<std::int32_t>(tok.size()), /*add_special=*/true, /*parse_special=*/false);
    if (n < 0 && static_cast<std::uint32_t>(-n) <= n_ctx_) {
      // More tokens than bytes + 8 (a vocabulary of its own): within the limit, tokenize again.
      tok.resize(static_cast<std::size_t>(-n));
      n = llama_tokenize(vocab, t.data(), static_cast<std::int32_t>(t.size()), tok.data(),
                         static_cast<std::int32_t>(tok.size()), true, false);
    }
    if (n < 0) n = -n;  // too many: its count, negated
    if (n == 0) fail(Errc::invalid_argument, fmt::format("Executor::embed: text {} has no tokens", i));
    if (static_cast<std::uint32_t>(n) > n_ctx_) {
      fail(Errc::out_of_range, fmt::format("Executor::embed: text {} has {} tokens; the embedder takes at most "
                                           "EmbedderParams.n_ctx = {}",
                                           i, n, n_ctx_));
    }
    tok.resize(static_cast<std::size_t>(n));
    out[i] = std::move(tok);
  }
  return out;
}

void Embedder::check(const std::vector<std::vector<Token>> &inputs) const {
  if (inputs.empty()) fail(Errc::invalid_argument, "Executor::embed_tokens: no inputs given");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) fail(Errc::invalid_argument, fmt::format("Executor::embed_tokens: input {} is empty", i));
    if (inputs[i].size() > n_ctx_) {
      fail(Errc::out_of_range, fmt::format("Executor::embed_tokens: input {} has {} tokens; the embedder takes at "
                                           "most EmbedderParams.n_ctx = {}",
                                           i, inputs[i].size(), n_ctx_));
    }
    for (Token t : inputs[i]) {
      if (t < 0 || t >= model_.n_vocab()) {
        fail(Errc::out_of_range, fmt::format("Executor::embed_tokens: input {} holds token {}, outside the embedding "
                                             "model's vocabulary of {}",
                                             i, t, model_.n_vocab()));
      }
    }
  }
}

std::shared_ptr<EmbedJob> Embedder::submit(std::vector<std::vector<Token>> inputs) {
  auto job = std::make_shared<EmbedJob>();
  job->n_embd = n_embd_;
  job->out.resize(inputs.size());
  const std::size_t n = inputs.size();
  job->inputs = std::move(inputs);
  std::lock_guard lock(qmu_);
  queue_.push_back(job);
  pending_ += n;
  return job;
}

std::size_t Embedder::pending() const {
  std::lock_guard lock(qmu_);
  return pending_;
}

double Embedder::predict(std::uint32_t n) const { return per_token_ * n; }

Embedder::Counters Embedder::counters() const {
  std::lock_guard lock(qmu_);
  return counters_;
}

void Embedder::take_locked(std::uint32_t tokens, std::optional<double> seconds, bool turn, std::vector<Pick> &out) {
  out.clear();
  const bool measured = per_token_ > 0;
  std::uint32_t total = 0;
  while (!queue_.empty()) {
    const auto &job = queue_.front();
    bool drop = false;
    {
      std::lock_guard jl(job->mu);
      drop = job->finished;  // cancelled (or the executor closing)
    }
    if (drop || next_ >= job->inputs.size()) {
      pending_ -= job->inputs.size() - std::min(next_, job->inputs.size());
      queue_.pop_front();
      next_ = 0;
      continue;
    }
    const auto n = static_cast<std::uint32_t>(job->inputs[next_].size());
    const bool first = out.empty();
    bool fits = total + n <= std::min(tokens, n_ctx_) && out.size() < params_.n_seq_max;
    // Without a measurement a time budget takes one text: its decode is the measurement.
    if (fits && seconds) fits = measured ? predict(total + n) * 1.25 <= *seconds : first && *seconds > 0;
    if (!fits && !(turn && first)) break;
    out.push_back({job, next_});
    total += n;
    ++next_;
    --pending_;
  }
}

Embedder::Ran Embedder::run(std::uint32_t tokens, std::optional<double> seconds, bool turn) {
  Ran ran;
  {
    std::lock_guard lock(qmu_);
    take_locked(tokens, seconds, turn, picks_);
    due_ = picks_.empty() && pending_ > 0;
  }
  if (picks_.empty()) return ran;
  const auto t0 = std::chrono::steady_clock::now();
  batch_.n_tokens = 0;
  for (std::size_t j = 0; j < picks_.size(); ++j) {
    const auto &in = picks_[j].job->inputs[picks_[j].index];
    for (std::size_t i = 0; i < in.size(); ++i) {
      const auto k = batch_.n_tokens++;
      batch_.token[k] = in[i];
      batch_.pos[k] = static_cast<llama_pos>(i);
      batch_.n_seq_id[k] = 1;
      batch_.seq_id[k][0] = static_cast<llama_seq_id>(j);
      batch_.logits[k] = 1;  // pooled embeddings need every token's output
    }
  }
  ran.tokens = static_cast<std::uint32_t>(batch_.n_tokens);
  const int rc = llama_decode(ctx_, batch_);
  ran.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (rc == 0 ? ran.texts : ran.failed) = static_cast<std::uint32_t>(picks_.size());
  {
    std::lock_guard lock(qmu_);
    counters_.texts += ran.texts;
    counters_.tokens += ran.tokens;
    counters_.decodes += 1;
    counters_.seconds += ran.seconds;
  }
  deliver(picks_, rc);
  if (llama_memory_t mem = llama_get_memory(ctx_)) llama_memory_clear(mem, true);
  if (rc == 0) {
    const double s = ran.seconds / ran.tokens;
    per_token_ = per_token_ > 0 ? 0.7 * per_token_ + 0.3 * s : s;
  }
  picks_.clear();
  return ran;
}

void Embedder::deliver(const std::vector<Pick> &picks, int rc) {
  for (std::size_t j = 0; j < picks.size(); ++j) {
    EmbedJob &job = *picks[j].job;
    std::vector<float> v;
    const float *e = rc == 0 ? llama_get_embeddings_seq(ctx_, static_cast<llama_seq_id>(j)) : nullptr;
    if (e != nullptr) {
      v.assign(e, e + n_embd_);
      if (params_.normalize) normalise_l2(v);
    }
    std::lock_guard lock(job.mu);
    if (job.finished) continue;  // cancelled meanwhile
    if (e == nullptr) {
      job.finish_locked(Error(Errc::backend, fmt::format("llama.cpp refused an embeddings batch of {} texts "
                                                         "(llama_decode returned {})",
                                                         picks.size(), rc)));
      continue;
    }
    job.out[picks[j].index] = std::move(v);
    if (++job.n_done == job.inputs.size()) job.finish_locked(std::nullopt);
  }
}

void Embedder::fail_all(const Error &why) {
  std::lock_guard lock(qmu_);
  for (auto &job : queue_) {
    std::lock_guard jl(job->mu);
    job->finish_locked(why);
  }
  queue_.clear();
  next_ = 0;
  pending_ = 0;
}

}  // namespace weft::detail
