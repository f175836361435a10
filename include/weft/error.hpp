// weft/error.hpp — the one exception type weft throws.
//
// Every failure weft reports is a weft::Error carrying a short code from the
// closed list below and a message that names the offending value and the
// limit it broke. Thread-safety: Error is an immutable value; copy freely.
#pragma once

#include <stdexcept>
#include <string>

#include "weft/export.hpp"

namespace weft {

enum class Errc {
  invalid_argument = 1,  // a value outside its documented domain
  out_of_range,          // a count or index past a limit (context, vocab, ...)
  not_found,             // a file or object that does not exist
  io,                    // reading or writing a file failed
  corrupt,               // bytes that do not parse (model file, state file)
  incompatible,          // well-formed input for another model or version
  backend,               // llama.cpp refused an operation weft could not pre-check
  disposed,              // use of a handle after dispose()
  cancelled,             // the caller cancelled the operation
};

// Stable lower-case name of a code ("invalid_argument"), for logs and bindings.
WEFT_API const char *errc_name(Errc code) noexcept;

class WEFT_API Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string &message)
      : std::runtime_error(message), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

}  // namespace weft
