// Internal helpers shared across weft's sources. Not installed.
#pragma once

#include <memory>
#include <string>

#include "weft/error.hpp"

struct ggml_tensor;

namespace weft {
struct SpeculativeParams;
}

namespace weft::detail {

// Throws Errc::invalid_argument / out_of_range for SpeculativeParams outside
// their documented ranges, naming `what` (sampler_params.cpp).
void validate_speculative(const SpeculativeParams &p, const char *what);

struct ExecutorCore;

// Installs weft's log router into llama.cpp/ggml and initialises the backend,
// once per process, and loads the CPU backend (core/backend_loader.hpp);
// every entry point that may reach llama.cpp calls it. Throws the Error of a
// portable build that found no CPU variant to load, or of a fixed build on a
// CPU without the instructions it was built for.
void ensure_backend();

// The last error line llama.cpp logged on this thread (for error messages).
std::string take_llama_error();

// A warning line through the user's log sink (weft's own messages).
void log_warning(const std::string &line);

// Formats with fmt and throws Error(code, message).
[[noreturn]] void fail(Errc code, const std::string &message);

// The core behind an Executor's public entry points; Errc::disposed when the
// Executor was moved from (its core_ is null), instead of a null dereference.
ExecutorCore &live_core(const std::shared_ptr<ExecutorCore> &core);

}  // namespace weft::detail
