// weft::json_schema_to_grammar: the converter (core/jsg/) behind a bounded,
// thread-safe cache of converted schemas, keyed by the schema's exact text.
#include "weft/json_schema.hpp"

#include "weft/tools.hpp"

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

// The one text that needs no converter; the rest of weft/tools.hpp is in
// core/jsg/tool_calls.cpp, or refuses below without it.
std::string tool_result_prompt(std::string_view result) {
  return "<tool_response>\n" + std::string(result) + "\n</tool_response>";
}

#ifndef WEFT_HAVE_JSG
std::string tools_grammar(std::span<const Tool>, ToolChoice) { return json_schema_to_grammar("{}"); }
std::string tools_prompt(std::span<const Tool>) { return json_schema_to_grammar("{}"); }
bool parse_tool_call(std::string_view, ToolCall &) { return false; }
#endif

bool json_schema_supported() noexcept {
#ifdef WEFT_HAVE_JSG
  return true;
#else
  return false;
#endif
}

}  // namespace weft
