// weft serve: a generation streamed as server-sent events (text/event-stream,
// `data: <json>` events, then `data: [DONE]`), as OpenAI streams.
//
// The HTTP thread takes text from the run in bounded waits (50 ms) and
// writes one event per batch of text; httplib checks between writes that the
// client is still there. When the client goes away mid-stream, the
// generation is cancelled at once (its tokens stay in the conversation) and
// `cleanup` runs — for an ephemeral conversation it removes it.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/api_error.hpp"
#include "serve/generation_run.hpp"

namespace weft_cli::serve {

std::string sse_event(const Json &event);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

struct SseCallbacks {
  std::function<std::vector<Json>()> begin;                         // events before any text
  std::function<std::vector<Json>(std::string_view text)> text;     // events for newly released text
  // Instead of `text` when set: called when text was released or the token
  // count grew (text may then be empty); n_tokens counts all so far.
  std::function<std::vector<Json>(std::string_view text, std::uint32_t n_tokens)> tokens;
  std::function<std::vector<Json>(const RunOutcome &)> end;         // the last events (before [DONE])
  std::function<void()> cleanup;                                    // runs once, after the stream ends
};

void stream_run(httplib::Response &res, std::shared_ptr<GenerationRun> run, SseCallbacks cb);

// The error event a stream ends with when its run was cut (timeout,
// shutdown, an error); empty when it ended normally.
std::vector<Json> stream_error_events(const RunOutcome &o);

}  // namespace weft_cli::serve
