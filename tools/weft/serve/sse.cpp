// weft serve: generations as server-sent events.
#include "serve/sse.hpp"

#include <chrono>

namespace weft_cli::serve {

std::string sse_event(const Json &event) {
  return "data: " + event.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

std::vector<Json> stream_error_events(const RunOutcome &o) {
  auto ev = [](const ApiError &e) { return std::vector<Json>{error_json(e)}; };
  switch (o.end) {
    case RunEnd::timeout:
      return ev(ApiError(504, "timeout_error", "request_timeout", "the generation ran past the server's --timeout"));
    case RunEnd::shutdown:
      return ev(ApiError(503, "server_error", "shutting_down", "the server is shutting down; the generation was cancelled"));
    case RunEnd::disconnect: return {};
    case RunEnd::normal: break;
  }
  if (o.result.reason == weft::FinishReason::error)
    return ev(ApiError(500, "server_error", "generation_failed",
                       o.result.error ? o.result.error->what() : "the generation failed"));
  if (o.result.reason == weft::FinishReason::cancelled)
    return ev(ApiError(409, "invalid_request_error", "cancelled",
                       "the generation was cancelled (the conversation was rewound, deleted or changed)"));
  return {};
}

namespace {

struct StreamState {
  std::shared_ptr<GenerationRun> run;
  SseCallbacks cb;
  bool begun = false;
  bool cleaned = false;
  std::uint32_t tokens_sent = 0;
  void cleanup() {
    if (cleaned) return;
    cleaned = true;
    if (cb.cleanup) cb.cleanup();
  }
};

bool write_events(httplib::DataSink &sink, const std::vector<Json> &events) {
  for (const auto &e : events) {
    const auto s = sse_event(e);
    if (!sink.write(s.data(), s.size())) return false;
  }
  return true;
}

}  // namespace

void stream_run(httplib::Response &res, std::shared_ptr<GenerationRun> run, SseCallbacks cb) {
  auto st = std::make_shared<StreamState>();
  st->run = std::move(run);
  st->cb = std::move(cb);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](std::size_t, httplib::DataSink &sink) -> bool {
        auto &r = *st->run;
        if (!st->begun) {
          st->begun = true;
          if (st->cb.begin && !write_events(sink, st->cb.begin())) {
            r.cancel(RunEnd::disconnect);
            return false;
          }
        }
        const std::string text = r.next(std::chrono::milliseconds(50));
        std::vector<Json> events;
        if (st->cb.tokens) {
          if (!text.empty() || r.tokens_taken() != st->tokens_sent) {
            st->tokens_sent = r.tokens_taken();
            events = st->cb.tokens(text, st->tokens_sent);
          }
        } else if (!text.empty()) {
          events = st->cb.text(text);
        }
        if (!events.empty() && !write_events(sink, events)) {
          r.cancel(RunEnd::disconnect);
          return false;
        }
        if (r.finished()) {
          const auto o = r.outcome();
          auto last = stream_error_events(o);
          if (last.empty()) last = st->cb.end(o);
          if (!write_events(sink, last) || !sink.write(kSseDone.data(), kSseDone.size())) {
            r.cancel(RunEnd::disconnect);
            return false;
          }
          sink.done();
        }
        return true;
      },
      [st](bool success) {
        // Not success: the client went away or the server stopped first.
        if (!success) st->run->cancel(RunEnd::disconnect);
        st->run.reset();  // releases the conversation's claim
        st->cleanup();
      });
}

}  // namespace weft_cli::serve
