// weft serve: response_format's JSON schema as a GBNF grammar for weft's
// grammar sampler, through llama.cpp's own converter
// (common/json-schema-to-grammar.cpp, compiled into the CLI alone; see
// tools/weft/CMakeLists.txt). Without llama.cpp's source tree at build time
// (an installed llama.cpp), schemas are refused with a clear message.
#pragma once

#include <string>

namespace weft_cli::serve {

// True when this build carries the converter.
bool json_schema_supported();
// The grammar for `schema_json` (a JSON schema, serialized). Throws
// std::runtime_error naming what the converter could not handle.
std::string json_schema_to_gbnf(const std::string &schema_json);

}  // namespace weft_cli::serve
