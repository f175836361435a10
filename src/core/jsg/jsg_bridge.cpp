// JSON schema -> GBNF through llama.cpp's converter (core/json_schema.hpp).
// Compiled in weft_jsg with the converter's global names renamed weft_jsg_*
// (cmake/WeftJsonSchema.cmake): this file defines the ones the converter takes
// from llama.cpp's common.cpp, and ggml_abort's stand-in that throws.
#include "core/json_schema.hpp"

#include <fmt/format.h>

#include <cstdarg>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "ggml.h"
// As json.cpp compiles nlohmann (its JSON_ASSERT must be the same in every
// unit that instantiates the same templates).
#define JSON_ASSERT GGML_ASSERT
#include <nlohmann/json.hpp>

#include "core/internal.hpp"
#include "core/jsg/schema_check.hpp"
#include "json-schema-to-grammar.h"

// json.cpp reports a broken invariant through GGML_ASSERT -> ggml_abort,
// renamed to this: bad input throws instead of ending the process.
extern "C" [[noreturn]] void ggml_abort(const char *file, int line, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw std::runtime_error(std::string(buf) + " (" + file + ":" + std::to_string(line) + ")");
}

// The three string helpers the converter takes from llama.cpp's common.cpp
// (the rest of which, with its downloads and logging, weft does not need).
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

namespace weft::detail {

std::string convert_json_schema(std::string_view schema) {
  nlohmann::ordered_json parsed;
  try {
    parsed = nlohmann::ordered_json::parse(schema);
  } catch (const nlohmann::ordered_json::parse_error &e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    std::string why = e.what();
    if (const auto p = why.find("] "); p != std::string::npos) why = why.substr(p + 2);
    fail(Errc::invalid_argument, fmt::format("JSON schema is not JSON: {}", why));
  }
  check_json_schema(parsed);
  try {
    // force_gbnf: GBNF even where llama.cpp was built with llguidance.
    return json_schema_to_grammar(common_json::parse(std::string(schema)), /*force_gbnf=*/true);
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    // e.g. "JSON schema conversion failed:\nInvalid pattern ^(a$: unbalanced parentheses"
    std::string why = e.what();
    for (char &c : why)
      if (c == '\n') c = ' ';
    fail(Errc::invalid_argument, fmt::format("JSON schema refused by llama.cpp's converter: {}", why));
  }
}

}  // namespace weft::detail
