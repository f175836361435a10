// weft serve: JSON schema -> GBNF via llama.cpp's converter (when built in).
#include "serve/json_schema.hpp"

#include <stdexcept>

#ifdef WEFT_SERVE_JSON_SCHEMA
#include <cstdarg>
#include <cstdio>

#include <string>
#include <vector>

#include "json-schema-to-grammar.h"

// llama.cpp's json.cpp reports a broken invariant through GGML_ABORT; it is
// compiled with ggml_abort renamed to this, so bad input throws instead of
// ending the server.
extern "C" [[noreturn]] void weft_serve_ggml_abort(const char *file, int line, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw std::runtime_error(std::string("JSON schema conversion failed: ") + buf + " (" + file + ":" +
                           std::to_string(line) + ")");
}

// The three string helpers the converter takes from llama.cpp's common.cpp
// (the rest of which, with its downloads and logging, the CLI does not need).
std::string string_join(const std::vector<std::string> &values, const std::string &separator) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? separator : std::string()) + values[i];
  return out;
}

std::vector<std::string> string_split(const std::string &str, const std::string &delimiter) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t end; (end = str.find(delimiter, start)) != std::string::npos; start = end + delimiter.size())
    parts.push_back(str.substr(start, end - start));
  parts.push_back(str.substr(start));
  return parts;
}

std::string string_repeat(const std::string &str, std::size_t n) {
  std::string out;
  out.reserve(str.size() * n);
  for (std::size_t i = 0; i < n; ++i) out += str;
  return out;
}
#endif

namespace weft_cli::serve {

#ifdef WEFT_SERVE_JSON_SCHEMA
bool json_schema_supported() { return true; }

std::string json_schema_to_gbnf(const std::string &schema_json) {
  return json_schema_to_grammar(common_json::parse(schema_json), /*force_gbnf=*/true);
}
#else
bool json_schema_supported() { return false; }

std::string json_schema_to_gbnf(const std::string &) {
  throw std::runtime_error(
      "this weft was built without llama.cpp's source tree, so it has no JSON-schema converter "
      "(response_format json_schema / json_object); send a plain request");
}
#endif

}  // namespace weft_cli::serve
