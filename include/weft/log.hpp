// weft/log.hpp — where llama.cpp's and weft's log lines go.
//
// weft is quiet by default: nothing reaches stderr unless a sink is installed
// (a game must not get console spam). The sink receives every line at or above
// the chosen level from weft and from llama.cpp/ggml.
//
// Thread-safety: set_log_sink() may be called from any thread at any time.
// It returns once no other thread is still inside the previous sink, which
// is then destroyed on the calling thread: after it returns, the previous
// sink is never called again. (From inside the previous sink it cannot wait
// for itself; that sink is destroyed when its call returns.) The
// sink itself is called from whichever thread logs (loader, stepping thread),
// possibly concurrently, and must be thread-safe. The sink must not call back
// into weft.
#pragma once

#include <functional>
#include <string_view>

#include "weft/export.hpp"

namespace weft {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3, none = 4 };

// A line without its trailing newline.
using LogSink = std::function<void(LogLevel level, std::string_view line)>;

// Installs `sink` for lines at `min_level` or above; an empty sink (the
// default) or LogLevel::none silences everything.
WEFT_API void set_log_sink(LogSink sink, LogLevel min_level = LogLevel::warn);

// A ready-made sink that writes "weft: <level>: <line>" to stderr.
WEFT_API LogSink stderr_log_sink();

}  // namespace weft
