// Routes mtmd's (and clip's) log through weft's log sink. Internal; only
// built when mtmd is (WEFT_MTMD, cmake/WeftMtmd.cmake).
#pragma once

namespace weft::detail {

// Once per process: initialises weft's llama.cpp logging (ensure_backend())
// and points mtmd's and mtmd-helper's log callbacks at whatever llama.cpp's
// callback is, so media messages reach the user's LogSink line by line, at
// the same levels, exactly as llama.cpp's own do. Call it before the first
// mtmd_* call (loading a projector); thread-safe.
void ensure_mtmd_log();

}  // namespace weft::detail
