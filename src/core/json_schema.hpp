// JSON Schema -> GBNF: the converter behind weft/json_schema.hpp. Internal.
//
// convert_json_schema() is llama.cpp's converter (core/jsg/, compiled into
// the weft_jsg object library with its global names renamed; see
// cmake/WeftJsonSchema.cmake) behind weft's own checks, uncached;
// core/json_schema.cpp adds the cache. Present only when WEFT_HAVE_JSG.
#pragma once

#include <string>
#include <string_view>

namespace weft::detail {

// Throws Error(Errc::invalid_argument) as json_schema_to_grammar documents.
std::string convert_json_schema(std::string_view schema);

}  // namespace weft::detail
