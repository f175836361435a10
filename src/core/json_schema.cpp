// weft::json_schema_to_grammar: the converter (core/jsg/) behind a bounded,
// thread-safe cache of converted schemas, keyed by the schema's exact text.
#include "weft/json_schema.hpp"

#include "weft/tools.hpp"

#include <fmt/format.h>

#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/internal.hpp"
#include "core/json_schema.hpp"

namespace weft {
namespace {

// Least recently used first out; a hit moves its entry to the front.
class GrammarCache {
 public:
  bool find(const std::string &schema, std::string &grammar) {
    std::lock_guard lock(mu_);
    const auto it = index_.find(schema);
    if (it == index_.end()) return false;
    order_.splice(order_.begin(), order_, it->second);
    grammar = it->second->second;
    return true;
  }
  void put(std::string schema, std::string grammar) {
    std::lock_guard lock(mu_);
    if (index_.count(schema) != 0) return;  // another thread converted it meanwhile
    order_.emplace_front(std::move(schema), std::move(grammar));
    index_.emplace(order_.front().first, order_.begin());
    if (order_.size() > kJsonSchemaCacheEntries) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

 private:
  using Entry = std::pair<std::string, std::string>;  // schema text, grammar
  std::mutex mu_;
  std::list<Entry> order_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

GrammarCache &cache() {
  static GrammarCache c;
  return c;
}

}  // namespace

std::string json_schema_to_grammar(std::string_view schema) {
#ifdef WEFT_HAVE_JSG
  std::string key(schema);
  std::string grammar;
  if (cache().find(key, grammar)) return grammar;
  grammar = detail::convert_json_schema(schema);
  cache().put(std::move(key), grammar);
  return grammar;
#else
  (void)schema;
  detail::fail(Errc::invalid_argument,
               "this weft was built without llama.cpp's source tree, so it has no JSON-schema converter "
               "(weft::json_schema_supported() is false)");
#endif
}

namespace {

// `s` as a JSON string literal (UTF-8 passes through).
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

}  // namespace

// The texts that need no converter; the rest of weft/tools.hpp is in
// core/jsg/tool_calls.cpp, or refuses below without it.
std::string tool_result_prompt(std::string_view result, ToolFormat format) {
  switch (format) {
    case ToolFormat::llama3: return "<|start_header_id|>ipython<|end_header_id|>\n\n" + std::string(result) + "<|eot_id|>";
    case ToolFormat::mistral: return "[TOOL_RESULTS]{\"content\": " + json_string(result) + "}[/TOOL_RESULTS]";
    case ToolFormat::automatic:
    case ToolFormat::hermes: break;
  }
  return "<tool_response>\n" + std::string(result) + "\n</tool_response>";
}

ToolFormat tool_format_of(std::string_view t) noexcept {
  if (t.find("[TOOL_CALLS]") != std::string_view::npos) return ToolFormat::mistral;
  if (t.find("<tool_call>") != std::string_view::npos) return ToolFormat::hermes;
  if (t.find("<|start_header_id|>") != std::string_view::npos &&
      (t.find("ipython") != std::string_view::npos || t.find("<|python_tag|>") != std::string_view::npos)) {
    return ToolFormat::llama3;
  }
  return ToolFormat::hermes;
}

const char *tool_format_name(ToolFormat format) noexcept {
  switch (format) {
    case ToolFormat::automatic: return "automatic";
    case ToolFormat::hermes: return "hermes";
    case ToolFormat::llama3: return "llama3";
    case ToolFormat::mistral: return "mistral";
  }
  return "unknown";
}

#ifndef WEFT_HAVE_JSG
std::string tools_grammar(std::span<const Tool>, ToolChoice, ToolFormat) { return json_schema_to_grammar("{}"); }
std::string tools_prompt(std::span<const Tool>, ToolFormat) { return json_schema_to_grammar("{}"); }
bool parse_tool_call(std::string_view, ToolCall &, ToolFormat) { return false; }
std::string tool_call_text(const ToolCall &, ToolFormat) { return json_schema_to_grammar("{}"); }
#endif

bool json_schema_supported() noexcept {
#ifdef WEFT_HAVE_JSG
  return true;
#else
  return false;
#endif
}

}  // namespace weft
