// weft/cache.hpp — where weft keeps what it measures or makes once per
// machine (the attention probe's timings; the CLI's generated models).
// Thread-safe: reads the environment only.
#pragma once

#include <string>

#include "weft/export.hpp"

namespace weft {

// $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else %LOCALAPPDATA%/weft on
// Windows, else $HOME/.cache/weft; "" when none of them is set. UTF-8.
// The default of ExecutorParams::tuning_cache_dir; the same folder the
// build caches llama.cpp in.
WEFT_API std::string default_cache_dir();

}  // namespace weft
