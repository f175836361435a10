// The update stage: commit what a decode produced, sample generations whose
// logits are ready (outside the lock), finish them, post events and run the
// on_token callbacks.
#include <fmt/format.h>

#include <chrono>
#include <span>

#include "core/internal.hpp"
#include "core/logprobs.hpp"
#include "exec/executor_core.hpp"

namespace weft::detail {
namespace {

// Whether `g` has sampled nothing yet, read under its own lock as game
// threads read it (an uncontended lock per sampled token).
bool first_token(GenState &g) {
  std::lock_guard lock(g.mu);
  return g.result.tokens.empty();
}

}  // namespace

void ExecutorCore::commit_part(Segment &s, const Part &part, StepResult &result) {
  if (s.draft > 0) {
    commit_spec_part(s, part, result);
    return;
  }
  Conv &c = *s.conv;
  const std::uint32_t n = part.n;
  const bool stale = c.disposed || c.epoch != s.epoch;
  // In the cache either way; only what the history keeps may be shared.
  if (stale) {
    kv->commit_stale(c.kv, n);
  } else {
    kv->commit(c.kv, c.queue.view().first(n), adapter_key(s.adapters.get()));
  }
  s.done += n;
  result.tokens_decoded += n;
  if (!s.counted) {
    s.counted = true;
    ++result.conversations;
  }
  if (stale) {
    // Changed while it decoded: its history no longer continues with these
    // tokens, and reconcile takes them out of the cache again.
    convs.mark_dirty(c);
    return;
  }
  const auto input = c.queue.view().first(n);
  c.spans.record(c.n_decoded(), n, s.adapters);
  c.history.insert(c.history.end(), input.begin(), input.end());
  c.queue.pop_front(n);
  // A prompt's end (not a sampled token's): where a recurrent model's
  // rewinds of the reply, and forks of the prompt, go on from.
  if (part.checkpoint.state) kv->checkpoint(c.kv, part.checkpoint);
  c.has_logits = part.output && part.job < 0;
  if (c.has_logits) c.logits.swap(scratch.run.staging[part.staged]);  // copied with the lock released (run.cpp)
  c.gen_token_queued = false;
  c.turns.last_served = stats.steps;
  // Sampled from llama.cpp's logits as they came out: its token joins now,
  // with the commit, so no one sees it decoded without logits or a token.
  if (part.output && part.job >= 0) finish_early_locked(scratch.run.early[static_cast<std::size_t>(part.job)], result);
}

std::int32_t ExecutorCore::claim_early_sample_locked(Conv &c, std::uint32_t n) {
  // As sample_phase would choose it once this part commits (its queue then
  // empty); one whose context fills is left to sample_phase to finish.
  if (!c.gen || c.error || c.share.sampling || c.share.pending || c.n_decoded() + n >= n_ctx) return -1;
  auto sampler = c.gen->own_sampler ? c.gen->own_sampler : sampler_of(c);
  c.share.sampling = true;
  scratch.run.early.push_back({&c, c.gen, std::move(sampler), c.epoch, first_token(*c.gen)});
  return static_cast<std::int32_t>(scratch.run.early.size() - 1);
}

void ExecutorCore::sample_job(SampleJob &job, const float *logits) {
  try {
    const auto s0 = std::chrono::steady_clock::now();
    decoder->before_sample();
    if (job.new_text) job.sampler->start_text();
    job.token = job.sampler->sample(std::span(logits, static_cast<std::size_t>(n_vocab)), job.gen->params.ignore_eos);
    job.sampler->accept(job.token);
    if (const GenerateParams &p = job.gen->params; p.logprobs) {
      job.logprob = token_logprob(std::span(logits, static_cast<std::size_t>(n_vocab)), job.token, p.top_logprobs);
    }
    job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
  } catch (const Error &e) {
    job.error = e;
  }
}

void ExecutorCore::finish_early_locked(SampleJob &job, StepResult &result) {
  job.done = true;
  if (!job.error) cost.observe_sample(job.seconds);
  finish_sample_locked(job, result);
  // Its token was not taken (the generation ended or failed meanwhile): the
  // logits it held come back by decoding its last token again.
  if (!job.conv->disposed) ensure_logits_locked(*job.conv);
}

void ExecutorCore::release_early_locked() {
  for (auto &job : scratch.run.early) {
    if (!job.done) release_sampler_locked(*job.conv);  // its part never committed: nothing was taken
  }
  scratch.run.early.clear();
}

void ExecutorCore::post_error_locked(Conv &c, Error e) {
  c.error = std::move(e);
  events.post({.kind = EventKind::error, .conversation = c.id, .error = c.error});
  finish_generation_locked(c, FinishReason::error, c.error);
}

std::string ExecutorCore::finish_generation_locked(Conv &c, FinishReason reason, std::optional<Error> error,
                                                   bool publish) {
  if (!c.gen) return {};
  auto gen = std::move(c.gen);
  c.gen.reset();
  std::string rest;
  if (gen->stream && reason != FinishReason::stop_string && reason != FinishReason::error) rest = gen->stream->flush();
  std::optional<ToolCall> call;
  {
    std::lock_guard lock(gen->mu);
    gen->result.text += rest;
    gen->result.error = error;
    if (ToolCall parsed; gen->tools && parse_tool_call(gen->result.text, parsed, gen->tool_format)) {
      gen->result.tool_call = call = parsed;
    }
    if (publish) {
      gen->result.reason = reason;
    } else {
      gen->pending_reason = reason;  // done() turns true after the last callback
    }
  }
  if (publish) gen->cv.notify_all();
  if (gen->params.on_finish) outbox.finished.push_back(gen);
  if (call && events.enabled()) {
    events.post({.kind = EventKind::tool_call, .conversation = c.id, .generation = Generation(gen), .tool_call = call});
  }
  events.post({.kind = EventKind::finished,
               .conversation = c.id,
               .generation = Generation(gen),
               .reason = reason,
               .error = std::move(error)});
  return rest;
}

void ExecutorCore::sample_phase(StepResult &result, std::unique_lock<std::mutex> &lock) {
  scratch.sample_jobs.clear();
  for (auto &[id, cp] : convs.all) {
    Conv &c = *cp;
    if (c.disposed || !c.gen || !c.has_logits || c.n_queued() > 0 || c.error) continue;
    if (c.n_decoded() >= n_ctx) {
      finish_generation_locked(c, FinishReason::context_full);
      continue;
    }
    auto sampler = c.gen->own_sampler ? c.gen->own_sampler : sampler_of(c);
    c.share.sampling = true;
    scratch.sample_jobs.push_back({&c, c.gen, std::move(sampler), c.epoch, first_token(*c.gen)});
  }
  if (scratch.sample_jobs.empty()) return;
  // Sampling (~0.5 ms a conversation at a temperature over a 32,000-token
  // vocabulary) runs with the lock released: game threads go on meanwhile.
  // Nobody else touches a sampler marked `sampling`, and logits are written
  // only by this thread.
  lock.unlock();
  for (auto &job : scratch.sample_jobs) sample_job(job, job.conv->logits.data());
  lock.lock();
  for (auto &job : scratch.sample_jobs) {
    if (!job.error) cost.observe_sample(job.seconds);  // a time budget keeps room for it
    finish_sample_locked(job, result);
  }
  scratch.sample_jobs.clear();
}

void ExecutorCore::release_sampler_locked(Conv &c) {
  c.share.sampling = false;
  // Forks taken while it sampled get their copy of its sampler now.
  for (std::uint64_t child_id : c.share.clone_to) {
    if (Conv *child = convs.find(child_id); child != nullptr && child->share.pending) {
      child->sampler = c.sampler ? std::make_shared<Sampler>(c.sampler->clone()) : nullptr;
      child->share.pending = false;
    }
  }
  c.share.clone_to.clear();
}

void ExecutorCore::finish_sample_locked(SampleJob &job, StepResult &result) {
  Conv &c = *job.conv;
  release_sampler_locked(c);
  // Cancelled, rewound or disposed meanwhile: the token is not theirs.
  if (c.disposed || c.gen != job.gen || c.epoch != job.epoch || c.n_queued() > 0 || closed) return;
  if (job.error) {
    finish_generation_locked(c, FinishReason::error, *job.error);
    return;
  }
  emit_token_locked(c, c.gen, job.token, std::move(job.logprob), true, result);
}

FinishReason ExecutorCore::emit_token_locked(Conv &c, std::shared_ptr<GenState> gen, Token token,
                                             std::optional<TokenLogprob> logprob, bool queue_it,
                                             StepResult &result) {
  GenState &g = *gen;
  ++result.tokens_sampled;
  ++stats.tokens_sampled;
  std::string text = g.stream->push(model.token_piece(token));
  if (queue_it) follow_shadow(g, token);  // a token sampled one a step: the shadow proposal's test
  // Every sampled token joins the conversation; it is decoded next step.
  if (queue_it) {
    c.queue.push_back(token);
    c.gen_token_queued = true;
  }
  std::size_t n_tokens = 0;
  {
    std::lock_guard lock(g.mu);
    g.result.tokens.push_back(token);
    if (logprob) g.result.logprobs.push_back(*logprob);
    g.result.text += text;
    n_tokens = g.result.tokens.size();
  }
  FinishReason reason = FinishReason::running;
  if (model.is_eog(token)) {
    reason = FinishReason::end_of_generation;
  } else if (g.stream->stopped()) {
    reason = FinishReason::stop_string;
  } else if (n_tokens >= g.params.max_tokens) {
    reason = FinishReason::max_tokens;
  }
  if (reason != FinishReason::running && reason != FinishReason::stop_string) {
    // Release what the stream held back with this last token.
    const std::string rest = g.stream->flush();
    text += rest;
    std::lock_guard lock(g.mu);
    g.result.text += rest;
  }
  if (events.enabled()) {
    events.post(
        {.kind = EventKind::token, .conversation = c.id, .generation = Generation(gen), .token = token, .text = text});
  }
  const bool callback = g.params.on_token || g.params.on_logprob;
  if (reason != FinishReason::running) finish_generation_locked(c, reason, std::nullopt, !callback);
  if (callback) {
    outbox.callbacks.push_back(
        {std::move(gen), token, std::move(text), reason != FinishReason::running, std::move(logprob)});
  }
  return reason;
}

void ExecutorCore::deliver_callbacks() {
  for (auto &ev : outbox.callbacks) {
    try {
      if (ev.logprob && ev.gen->params.on_logprob) ev.gen->params.on_logprob(*ev.logprob);
      if (ev.gen->params.on_token) ev.gen->params.on_token(ev.token, ev.text);
    } catch (...) {
      // Documented: a throwing callback cancels its generation.
      std::lock_guard lock(mu);
      Conv *c = convs.find(ev.gen->conv_id);
      if (c != nullptr && c->gen == ev.gen) finish_generation_locked(*c, FinishReason::cancelled);
    }
    if (ev.finished) {
      // The last callback has run: now waiters may see the generation done.
      {
        std::lock_guard lock(ev.gen->mu);
        if (ev.gen->result.reason == FinishReason::running) ev.gen->result.reason = ev.gen->pending_reason;
      }
      ev.gen->cv.notify_all();
    }
  }
  outbox.callbacks.clear();
}

void ExecutorCore::deliver_finished(const std::vector<std::shared_ptr<GenState>> &ended) {
  for (const auto &gen : ended) {
    GenerationResult result;
    {
      std::lock_guard lock(gen->mu);
      result = gen->result;
    }
    try {
      gen->params.on_finish(result);
    } catch (...) {
      // Documented: ignored; the generation has ended already.
    }
  }
}

}  // namespace weft::detail
