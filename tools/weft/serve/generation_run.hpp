// weft serve: one request's generation — prompt, generate, collect the text
// as it is released, and end it on the request's deadline, on shutdown or
// when the client goes away.
//
// The executor's on_token and on_finish callbacks (on the stepping thread)
// only append to a buffer or set a flag under a mutex and notify; the HTTP
// thread waits on that (bounded, for the deadline and shutdown checks), so
// neither ever waits long for the other.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/key_limits.hpp"
#include "serve/media_input.hpp"
#include "serve/registry.hpp"
#include "serve/serve_context.hpp"
#include "weft/generation.hpp"

namespace weft_cli::serve {

enum class RunEnd { normal, timeout, shutdown, disconnect };

struct RunOutcome {
  weft::GenerationResult result;
  RunEnd end = RunEnd::normal;
  std::uint32_t prompt_tokens = 0;
};

// "stop", "length", "cancelled" or "error": OpenAI's finish_reason words,
// plus weft's two.
const char *finish_reason_word(weft::FinishReason r);

struct RunOptions {
  // Never sample an end-of-generation token (GenerateParams::ignore_eos).
  bool ignore_eos = false;
  // next() returns on every token, not only on released text, so a stream
  // can report token counts as they grow.
  bool every_token = false;
  // The caller's key (Caller::key_id), whose --key-max-streams and
  // --key-tokens-per-minute the run counts against.
  std::string key_id;
};

class GenerationRun {
 public:
  // Admits the run under the caller's key limits (429 too_many_streams or
  // rate_limit_exceeded), claims the conversation (409 when a request
  // already generates on it),
  // queues `prompt` (may be empty), starts generating with `params`
  // (on_token and on_finish are set here); the executor's worker takes it
  // up. Throws ApiError; a context-length refusal (media positions counted)
  // is 400 context_length_exceeded.
  GenerationRun(ServeContext &ctx, std::shared_ptr<ConvEntry> entry, const PromptInput &prompt,
                weft::GenerateParams params, RunOptions options = {});
  GenerationRun(ServeContext &ctx, std::shared_ptr<ConvEntry> entry, const std::vector<weft::Token> &prompt,
                weft::GenerateParams params, RunOptions options = {})
      : GenerationRun(ctx, std::move(entry), PromptInput::of_tokens(prompt), std::move(params), options) {}
  ~GenerationRun();
  GenerationRun(const GenerationRun &) = delete;
  GenerationRun &operator=(const GenerationRun &) = delete;

  // Text released since the last call; waits up to `wait` when there is
  // none yet. Also enforces the deadline and shutdown.
  std::string next(std::chrono::milliseconds wait);
  // Tokens sampled whose text next() has handed out.
  std::uint32_t tokens_taken() const { return taken_; }
  // Positions the prompt added to the conversation (an image's or clip's included).
  std::uint32_t prompt_tokens() const { return prompt_tokens_; }
  // The generation ended and next() has handed out all its text.
  bool finished();
  // Ends it now (the client went away).
  void cancel(RunEnd why);
  // Complete once finished().
  RunOutcome outcome() const;
  const std::shared_ptr<ConvEntry> &entry() const { return entry_; }

 private:
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::string text;
    std::uint32_t tokens = 0;  // sampled so far
    bool finished = false;     // on_finish ran: no more text comes
  };
  void enforce_limits();
  void charge_taken();

  ServeContext &ctx_;
  std::shared_ptr<ConvEntry> entry_;
  std::shared_ptr<Channel> ch_ = std::make_shared<Channel>();
  weft::Generation gen_;
  RunOptions opt_;
  std::uint32_t taken_ = 0;
  std::uint32_t charged_ = 0;  // of taken_, counted against the key's tokens per minute
  KeyLimits::Lease lease_;
  std::chrono::steady_clock::time_point deadline_;
  std::uint32_t prompt_tokens_ = 0;
  RunEnd end_ = RunEnd::normal;
  bool claimed_ = false;
};

// Waits (in bounded slices) until the run finishes; for non-streaming replies.
RunOutcome wait_run(GenerationRun &run);

}  // namespace weft_cli::serve
