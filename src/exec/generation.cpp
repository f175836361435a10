// Generation: sampling for generating conversations, streaming, finishing.
#include <fmt/format.h>

#include <chrono>

#include "exec/executor_core.hpp"
#include "core/internal.hpp"

namespace weft {
namespace detail {

std::string ExecutorCore::finish_generation_locked(Conv &c, FinishReason reason, std::optional<Error> error,
                                                   bool publish) {
  if (!c.gen) return {};
  auto gen = std::move(c.gen);
  c.gen.reset();
  std::string rest;
  if (gen->stream && reason != FinishReason::stop_string && reason != FinishReason::error) rest = gen->stream->flush();
  {
    std::lock_guard lock(gen->mu);
    gen->result.text += rest;
    gen->result.error = error;
    if (publish) {
      gen->result.reason = reason;
    } else {
      gen->pending_reason = reason;  // done() turns true after the last callback
    }
  }
  if (publish) gen->cv.notify_all();
  post_event_locked({.kind = EventKind::finished,
                     .conversation = c.id,
                     .generation = Generation(gen),
                     .reason = reason,
                     .error = std::move(error)});
  return rest;
}

void ExecutorCore::sample_phase_locked(StepResult &result) {
  for (auto &[id, cp] : convs) {
    Conv &c = *cp;
    if (!c.gen || !c.has_logits || c.n_queued() > 0 || c.error) continue;
    GenState &g = *c.gen;
    if (c.n_decoded() >= n_ctx) {
      finish_generation_locked(c, FinishReason::context_full);
      continue;
    }
    Token token = 0;
    try {
      Sampler &s = g.own_sampler ? *g.own_sampler : sampler_of(c);
      const auto s0 = std::chrono::steady_clock::now();
      if (sample_hook) sample_hook();
      token = s.sample(c.logits);
      s.accept(token);
      // A time budget keeps room for the sampling after its decode.
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      sample_seconds = sample_seconds == 0 ? took : 0.8 * sample_seconds + 0.2 * took;
    } catch (const Error &e) {
      finish_generation_locked(c, FinishReason::error, e);
      continue;
    }
    ++result.tokens_sampled;
    ++tokens_sampled;
    std::string text = g.stream->push(model.token_piece(token));
    // Every sampled token joins the conversation; it is decoded next step.
    c.queue.push_back(token);
    c.gen_token_queued = true;
    std::size_t n_tokens = 0;
    {
      std::lock_guard lock(g.mu);
      g.result.tokens.push_back(token);
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
    auto gen = c.gen;
    if (params.events) {
      post_event_locked({.kind = EventKind::token, .conversation = c.id, .generation = Generation(gen),
                         .token = token, .text = text});
    }
    const bool callback = static_cast<bool>(gen->params.on_token);
    if (reason != FinishReason::running) finish_generation_locked(c, reason, std::nullopt, !callback);
    if (callback) events.push_back({std::move(gen), token, std::move(text), reason != FinishReason::running});
  }
}

void ExecutorCore::deliver_events() {
  for (auto &ev : events) {
    try {
      ev.gen->params.on_token(ev.token, ev.text);
    } catch (...) {
      // Documented: a throwing callback cancels its generation.
      std::lock_guard lock(mu);
      auto it = convs.find(ev.gen->conv_id);
      if (it != convs.end() && it->second->gen == ev.gen) finish_generation_locked(*it->second, FinishReason::cancelled);
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
  events.clear();
}

}  // namespace detail

const char *finish_reason_name(FinishReason reason) noexcept {
  switch (reason) {
    case FinishReason::running: return "running";
    case FinishReason::max_tokens: return "max_tokens";
    case FinishReason::end_of_generation: return "end_of_generation";
    case FinishReason::stop_string: return "stop_string";
    case FinishReason::context_full: return "context_full";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "unknown";
}

Generation Conversation::generate(const GenerateParams &params) {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  if (params.max_tokens == 0) detail::fail(Errc::invalid_argument, "GenerateParams.max_tokens = 0 must be >= 1");
  auto &core = *handle_->core;
  auto gen = std::make_shared<detail::GenState>();
  gen->params = params;
  gen->stream.emplace(params.stop);  // validates the stop strings
  // Reserved up front so steps do not reallocate them as the reply grows.
  const std::size_t expect = std::min<std::size_t>(params.max_tokens, 4096);
  gen->result.tokens.reserve(expect);
  gen->result.text.reserve(expect * 4);
  if (params.sampler) gen->own_sampler.emplace(core.model, *params.sampler, static_cast<std::int32_t>(core.n_ctx));
  gen->core = core.weak_from_this();
  gen->conv_id = handle_->id;
  auto kv = core.kv_lock();  // may re-decode the last token for its logits
  std::lock_guard lock(core.mu);
  auto &c = core.get(handle_->id);
  if (c.gen) detail::fail(Errc::invalid_argument, fmt::format("conversation {} is already generating", c.id));
  if (c.n_decoded() + c.n_queued() == 0) {
    detail::fail(Errc::invalid_argument, fmt::format("conversation {} is empty: prompt it before generating", c.id));
  }
  if (c.error) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("conversation {} has an error to clear first: {}", c.id, c.error->what()));
  }
  core.ensure_logits_locked(c);
  if (!gen->own_sampler) core.sampler_of(c);  // build it now, errors here not mid-step
  c.gen = gen;
  core.notify_work_locked();
  return Generation(std::move(gen));
}

bool Generation::done() const { return reason() != FinishReason::running; }

FinishReason Generation::reason() const {
  if (!state_) return FinishReason::cancelled;
  std::lock_guard lock(state_->mu);
  return state_->result.reason;
}

std::size_t Generation::n_tokens() const {
  if (!state_) return 0;
  std::lock_guard lock(state_->mu);
  return state_->result.tokens.size();
}

std::string Generation::text() const {
  if (!state_) return {};
  std::lock_guard lock(state_->mu);
  return state_->result.text;
}

GenerationResult Generation::result() const {
  if (!state_) return {.reason = FinishReason::cancelled};
  std::lock_guard lock(state_->mu);
  return state_->result;
}

bool Generation::wait_for(std::chrono::milliseconds timeout) const {
  if (!state_) return true;
  std::unique_lock lock(state_->mu);
  return state_->cv.wait_for(lock, timeout, [&] { return state_->result.reason != FinishReason::running; });
}

void Generation::cancel() {
  if (!state_) return;
  if (auto core = state_->core.lock()) {
    std::lock_guard lock(core->mu);
    auto it = core->convs.find(state_->conv_id);
    if (it != core->convs.end() && it->second->gen == state_) {
      core->finish_generation_locked(*it->second, FinishReason::cancelled);
      return;
    }
  }
  {
    std::lock_guard lock(state_->mu);
    // Finished, with its last callback still to run: it keeps its reason.
    if (state_->result.reason == FinishReason::running && state_->pending_reason == FinishReason::running) {
      state_->result.reason = FinishReason::cancelled;
    }
  }
  state_->cv.notify_all();
}

}  // namespace weft
