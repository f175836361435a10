// Routes llama.cpp/ggml log output to the user's sink, line by line.
#include <llama.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/backend_loader.hpp"
#include "core/internal.hpp"
#include "weft/log.hpp"

namespace weft {
namespace {

struct SinkState {
  LogSink sink;
  LogLevel min_level = LogLevel::none;
  int in_flight = 0;  // threads inside `sink` now; under g_mutex
};

// Replacing a sink waits until no thread is still in the old one, so once
// set_log_sink returns the old sink (and whatever it captured, e.g. a C#
// trampoline of an unloaded Unity domain) is never called again.
std::mutex g_mutex;
std::condition_variable g_idle;
std::shared_ptr<SinkState> g_state = std::make_shared<SinkState>();

// The sinks this thread is inside, innermost last (a sink may log again).
// A fixed array: nothing here may throw between counting in and out.
constexpr int k_max_depth = 8;
thread_local const SinkState *t_inside[k_max_depth];
thread_local int t_depth = 0;

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
  std::shared_ptr<SinkState> state;
  {
    std::lock_guard lock(g_mutex);
    if (!g_state->sink || g_state->min_level == LogLevel::none || level < g_state->min_level) return;
    state = g_state;
    ++state->in_flight;
  }
  if (t_depth < k_max_depth) t_inside[t_depth] = state.get();
  ++t_depth;
  try {
    state->sink(level, line);
  } catch (...) {
    // a throwing sink loses its line; nothing unwinds into llama.cpp
  }
  --t_depth;
  std::lock_guard lock(g_mutex);
  if (--state->in_flight == 0) g_idle.notify_all();
  // `state` may be the last owner: then the old sink is freed here, on the
  // thread that was inside it, which only happens when that very thread
  // replaced it from within (set_log_sink does not wait for itself).
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
  std::shared_ptr<SinkState> old;
  {
    std::unique_lock lock(g_mutex);
    old = std::exchange(g_state, std::move(state));
    // This thread's own calls into `old` (a sink replacing itself) cannot
    // finish while we wait: count them out instead of deadlocking.
    const auto mine = std::count(t_inside, t_inside + std::min(t_depth, k_max_depth), old.get());
    g_idle.wait(lock, [&] { return old->in_flight <= static_cast<int>(mine); });
  }
  // Destroyed here, outside the lock, unless this thread is still inside it.
  old.reset();
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
  static std::once_flag logs, init;
  std::call_once(logs, [] { llama_log_set(llama_router, nullptr); });
  // Before llama.cpp's own initialisation: a portable build loads its CPU
  // variant, a fixed one checks this CPU has the instructions it was built
  // for; either throws instead of reaching code this CPU cannot run.
  loaded_cpu_backend();
  std::call_once(init, [] { llama_backend_init(); });
}

void log_warning(const std::string &line) { emit(LogLevel::warn, line); }

std::string take_llama_error() {
  std::string out;
  out.swap(t_last_error);
  return out;
}

}  // namespace detail

}  // namespace weft
