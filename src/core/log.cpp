// Routes llama.cpp/ggml log output to the user's sink, line by line.
#include <llama.h>

#include <cstdio>
#include <memory>
#include <mutex>

#include "core/internal.hpp"
#include "weft/log.hpp"

namespace weft {
namespace {

struct SinkState {
  LogSink sink;
  LogLevel min_level = LogLevel::none;
};

std::mutex g_mutex;
std::shared_ptr<const SinkState> g_state = std::make_shared<SinkState>();

std::shared_ptr<const SinkState> current() {
  std::lock_guard lock(g_mutex);
  return g_state;
}

// llama.cpp emits partial lines (GGML_LOG_LEVEL_CONT); buffer per thread.
thread_local std::string t_line;
thread_local LogLevel t_level = LogLevel::info;
thread_local std::string t_last_error;

LogLevel from_ggml(ggml_log_level level, LogLevel previous) {
  switch (level) {
    case GGML_LOG_LEVEL_DEBUG: return LogLevel::debug;
    case GGML_LOG_LEVEL_INFO: return LogLevel::info;
    case GGML_LOG_LEVEL_WARN: return LogLevel::warn;
    case GGML_LOG_LEVEL_ERROR: return LogLevel::error;
    case GGML_LOG_LEVEL_CONT: return previous;
    default: return LogLevel::info;
  }
}

void emit(LogLevel level, std::string_view line) {
  if (level == LogLevel::error) t_last_error.assign(line);
  auto state = current();
  if (state->sink && level >= state->min_level && state->min_level != LogLevel::none) {
    state->sink(level, line);
  }
}

void llama_router(ggml_log_level level, const char *text, void *) {
  if (text == nullptr) return;
  if (level != GGML_LOG_LEVEL_CONT) t_level = from_ggml(level, t_level);
  t_line += text;
  std::size_t start = 0;
  for (std::size_t nl; (nl = t_line.find('\n', start)) != std::string::npos; start = nl + 1) {
    emit(t_level, std::string_view(t_line).substr(start, nl - start));
  }
  t_line.erase(0, start);
}

}  // namespace

void set_log_sink(LogSink sink, LogLevel min_level) {
  detail::ensure_backend();
  auto state = std::make_shared<SinkState>();
  state->sink = std::move(sink);
  state->min_level = state->sink ? min_level : LogLevel::none;
  std::lock_guard lock(g_mutex);
  g_state = std::move(state);
}

LogSink stderr_log_sink() {
  return [](LogLevel level, std::string_view line) {
    static const char *names[] = {"debug", "info", "warn", "error", "none"};
    std::fprintf(stderr, "weft: %s: %.*s\n", names[static_cast<int>(level)],
                 static_cast<int>(line.size()), line.data());
  };
}

namespace detail {

void ensure_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(llama_router, nullptr);
    llama_backend_init();
  });
}

void log_warning(const std::string &line) { emit(LogLevel::warn, line); }

std::string take_llama_error() {
  std::string out;
  out.swap(t_last_error);
  return out;
}

}  // namespace detail

}  // namespace weft
