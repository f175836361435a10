// Generation handles and Conversation::generate (the sampling itself is the
// step's update stage, update.cpp).
#include <fmt/format.h>

#include <chrono>

#include "exec/executor_core.hpp"
#include "core/internal.hpp"
#include "core/logprobs.hpp"

namespace weft {

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

const char *drafter_name(Drafter drafter) noexcept {
  switch (drafter) {
    case Drafter::none: return "none";
    case Drafter::lookup: return "lookup";
    case Drafter::model: return "model";
  }
  return "unknown";
}

Generation Conversation::generate(const GenerateParams &params) {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  if (params.max_tokens == 0) detail::fail(Errc::invalid_argument, "GenerateParams.max_tokens = 0 must be >= 1");
  detail::validate_logprobs(params);
  if (params.speculative) detail::validate_speculative(*params.speculative, "GenerateParams.speculative");
  auto &core = *handle_->core;
  auto gen = std::make_shared<detail::GenState>();
  gen->params = params;
  gen->spec = params.speculative.value_or(core.params.speculative);
  if (gen->spec.drafter == Drafter::model && !core.drafter) {
    detail::fail(Errc::invalid_argument, "GenerateParams.speculative.drafter = model needs ExecutorParams::draft_model");
  }
  gen->stream.emplace(params.stop);  // validates the stop strings
  // Reserved up front so steps do not reallocate them as the reply grows.
  const std::size_t expect = std::min<std::size_t>(params.max_tokens, 4096);
  gen->result.tokens.reserve(expect);
  if (params.logprobs) gen->result.logprobs.reserve(expect);
  gen->result.text.reserve(expect * 4);
  std::optional<SamplerParams> own = params.sampler;
  if (!params.tools.empty()) {
    if (params.tool_format < ToolFormat::automatic || params.tool_format > ToolFormat::mistral) {
      detail::fail(Errc::invalid_argument, fmt::format("GenerateParams.tool_format = {} is not a ToolFormat",
                                                       static_cast<int>(params.tool_format)));
    }
    if (!own) {
      std::lock_guard lock(core.mu);
      own = core.get(handle_->id).sampler_params;  // a copy: the conversation's sampler does not advance
    }
    if (!own->grammar.empty() || !own->json_schema.empty()) {
      detail::fail(Errc::invalid_argument, "GenerateParams.tools with a sampler that has a grammar or json_schema of "
                                           "its own: a generation takes one constraint");
    }
    gen->tool_format = params.tool_format == ToolFormat::automatic ? core.model.tool_format() : params.tool_format;
    own->grammar = tools_grammar(params.tools, params.tool_choice, gen->tool_format);
    own->grammar_root = "root";
    gen->tools = true;
  }
  if (own) {
    gen->own_sampler = std::make_shared<detail::Sampler>(core.model, *own, static_cast<std::int32_t>(core.n_ctx));
    gen->params.sampler = own;  // saved with the generation: the tools' grammar too
  }
  gen->core = core.weak_from_this();
  gen->conv_id = handle_->id;
  {
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
    core.ensure_logits_locked(c);  // may re-decode the last token for its logits
    if (!gen->own_sampler && !c.share.pending) core.sampler_of(c);  // build it now, errors here not mid-step
    c.gen = gen;
    core.settle_locked();
  }
  core.notify_work();
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
    detail::Conv *c = core->convs.find(state_->conv_id);
    if (c != nullptr && c->gen == state_) {
      core->finish_generation_locked(*c, FinishReason::cancelled);
      if (state_->params.on_finish) core->notify_work();  // the worker's next step runs it
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
