// weft serve: one request's generation.
#include "serve/generation_run.hpp"

#include <fmt/format.h>

#include "serve/api_error.hpp"

namespace weft_cli::serve {

const char *finish_reason_word(weft::FinishReason r) {
  switch (r) {
    case weft::FinishReason::max_tokens:
    case weft::FinishReason::context_full: return "length";
    case weft::FinishReason::end_of_generation:
    case weft::FinishReason::stop_string: return "stop";
    case weft::FinishReason::cancelled: return "cancelled";
    case weft::FinishReason::error: return "error";
    case weft::FinishReason::running: break;
  }
  return "running";
}

GenerationRun::GenerationRun(ServeContext &ctx, std::shared_ptr<ConvEntry> entry, const PromptInput &prompt,
                             weft::GenerateParams params, RunOptions options)
    : ctx_(ctx), entry_(std::move(entry)), opt_(options) {
  if (ctx_.draining.load())
    throw ApiError(503, "server_error", "shutting_down", "the server is shutting down; no new generations");
  lease_ = ctx_.key_limits.admit(opt_.key_id, KeyLimits::Clock::now());
  if (!entry_->try_claim())
    throw ApiError(409, "invalid_request_error", "conversation_busy",
                   fmt::format("conversation '{}' is generating for another request", entry_->id));
  claimed_ = true;
  ++ctx_.active_runs;
  try {
    if (!prompt.empty()) {
      const auto n_before = entry_->conv.n_tokens();
      // A prompt with media that fails part way is taken back whole: a
      // conversation resource keeps no half of a message's images.
      auto take_back = [&] {
        if (prompt.has_media() && entry_->conv.n_tokens() > n_before)
          entry_->conv.rewind(entry_->conv.n_tokens() - n_before);
      };
      try {
        queue_prompt(entry_->conv, prompt);
      } catch (const weft::Error &e) {
        take_back();
        if (e.code() == weft::Errc::out_of_range)
          throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                         fmt::format("the prompt does not fit the context: {}", e.what()));
        throw;
      }
      // A clip's positions, and the text around media, are known only now.
      const auto n_after = entry_->conv.n_tokens();
      if (n_after + 1 > ctx_.n_ctx()) {
        take_back();
        throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                       fmt::format("This model's maximum context length is {} tokens; the conversation holds {} "
                                   "with the prompt, media included (and at least one must be generated)",
                                   ctx_.n_ctx(), n_after));
      }
      prompt_tokens_ = n_after - n_before;
    }
    params.ignore_eos = opt_.ignore_eos;
    params.on_token = [ch = ch_, every = opt_.every_token](weft::Token, std::string_view text) {
      {
        std::lock_guard lk(ch->mu);
        ch->text.append(text);
        ++ch->tokens;
      }
      if (!text.empty() || every) ch->cv.notify_all();
    };
    params.on_finish = [ch = ch_](const weft::GenerationResult &) {
      {
        std::lock_guard lk(ch->mu);
        ch->finished = true;
      }
      ch->cv.notify_all();
    };
    gen_ = entry_->conv.generate(params);
    entry_->set_generation(gen_);
  } catch (...) {
    // Whatever was queued stays in a /v1/conversations conversation, as
    // Conversation::prompt() documents; the claim goes back.
    entry_->release();
    --ctx_.active_runs;
    claimed_ = false;
    throw;
  }
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(ctx_.opt.request_timeout_s));
  ctx_.counters.prompt_tokens += prompt_tokens_;
  lease_.charge(prompt_tokens_, KeyLimits::Clock::now());
}

GenerationRun::~GenerationRun() {
  if (!claimed_) return;
  if (!gen_.done()) gen_.cancel();
  ctx_.counters.completion_tokens += gen_.n_tokens();
  if (gen_.n_tokens() > charged_) lease_.charge(gen_.n_tokens() - charged_, KeyLimits::Clock::now());
  entry_->release();
  --ctx_.active_runs;
}

void GenerationRun::enforce_limits() {
  if (gen_.done()) return;
  if (ctx_.cancel_all.load()) {
    cancel(RunEnd::shutdown);
  } else if (std::chrono::steady_clock::now() >= deadline_) {
    cancel(RunEnd::timeout);
    ++ctx_.counters.timeouts;
  }
}

void GenerationRun::cancel(RunEnd why) {
  if (gen_.done()) return;
  if (end_ == RunEnd::normal) end_ = why;
  gen_.cancel();
  if (why == RunEnd::disconnect) ++ctx_.counters.disconnects;
}

std::string GenerationRun::next(std::chrono::milliseconds wait) {
  enforce_limits();
  std::unique_lock lk(ch_->mu);
  // on_finish runs after the last on_token: once it has, all text is here.
  // A cancel (ours, or a rewind's) ends it too: done() covers those.
  if (ch_->text.empty() && !ch_->finished && !gen_.done())
    ch_->cv.wait_for(lk, wait, [&] {
      return !ch_->text.empty() || ch_->finished || (opt_.every_token && ch_->tokens != taken_);
    });
  taken_ = ch_->tokens;
  std::string text = std::exchange(ch_->text, std::string());
  lk.unlock();
  charge_taken();
  return text;
}

void GenerationRun::charge_taken() {
  if (taken_ == charged_) return;
  lease_.charge(taken_ - charged_, KeyLimits::Clock::now());
  charged_ = taken_;
}

bool GenerationRun::finished() {
  if (!gen_.done()) return false;
  std::lock_guard lk(ch_->mu);
  return ch_->text.empty() && taken_ == ch_->tokens;
}

RunOutcome GenerationRun::outcome() const {
  return RunOutcome{.result = gen_.result(), .end = end_, .prompt_tokens = prompt_tokens_};
}

RunOutcome wait_run(GenerationRun &run) {
  // Woken by on_finish; the bound is for the deadline and shutdown checks.
  while (!run.finished()) run.next(std::chrono::milliseconds(50));
  return run.outcome();
}

}  // namespace weft_cli::serve
