// weft/tools.hpp: the tools' grammar (one JSON Schema of every call, through
// the converter), their prompt, and the call parsed back. Compiled in
// weft_jsg (nlohmann's JSON, as the converter's).
// weft_jsg renames the converter's json_schema_to_grammar on the command line;
// this file calls weft's public one (with its cache).
#undef json_schema_to_grammar
#include "weft/tools.hpp"

#include <fmt/format.h>

#include <regex>
#include <set>
#include <string>

#include "ggml.h"
#define JSON_ASSERT GGML_ASSERT  // as json.cpp and jsg_bridge.cpp compile nlohmann
#include <nlohmann/json.hpp>

#include "core/internal.hpp"
#include "weft/json_schema.hpp"

namespace weft {
namespace {

using OJson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>\n";
constexpr std::string_view kClose = "\n</tool_call>";

// Each tool's parameters as a schema object (empty = any object), checked.
std::vector<OJson> checked_parameters(std::span<const Tool> tools) {
  if (tools.empty()) detail::fail(Errc::invalid_argument, "GenerateParams.tools is empty");
  if (tools.size() > kMaxTools) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("GenerateParams.tools has {} tools; at most {} are taken", tools.size(), kMaxTools));
  }
  static const std::regex name_re("[A-Za-z0-9_-]{1,64}");
  std::set<std::string> seen;
  std::vector<OJson> out;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const Tool &t = tools[i];
    if (!std::regex_match(t.name, name_re)) {
      detail::fail(Errc::invalid_argument, fmt::format("GenerateParams.tools[{}].name '{}' must be 1 to 64 of "
                                                       "[A-Za-z0-9_-]", i, t.name.substr(0, 80)));
    }
    if (!seen.insert(t.name).second) {
      detail::fail(Errc::invalid_argument, fmt::format("GenerateParams.tools names '{}' twice", t.name));
    }
    OJson p = OJson::object({{"type", "object"}});
    if (!t.parameters.empty()) {
      p = OJson::parse(t.parameters, nullptr, false);
      if (p.is_discarded() || !p.is_object()) {
        detail::fail(Errc::invalid_argument,
                     fmt::format("GenerateParams.tools[{}] ('{}'): parameters is not a JSON object", i, t.name));
      }
      if (p.contains("type") && p["type"] != "object") {
        detail::fail(Errc::invalid_argument, fmt::format("GenerateParams.tools[{}] ('{}'): parameters must describe "
                                                         "an object, not type {}", i, t.name, p["type"].dump()));
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::string tools_grammar(std::span<const Tool> tools, ToolChoice choice) {
  const auto params = checked_parameters(tools);
  OJson any = OJson::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    OJson props = OJson::object();
    props["name"] = {{"const", tools[i].name}};
    props["arguments"] = params[i];
    any.push_back({{"type", "object"}, {"properties", props}, {"required", {"name", "arguments"}},
                   {"additionalProperties", false}});
  }
  const OJson schema = any.size() == 1 ? any[0] : OJson{{"anyOf", any}};
  std::string call;
  try {
    call = json_schema_to_grammar(schema.dump());
  } catch (const Error &e) {
    detail::fail(e.code(), fmt::format("GenerateParams.tools: {}", e.what()));
  }
  // The schema's start rule becomes the call's; every other name stays.
  static const std::regex root_rule("(^|\n)root ::=");
  call = std::regex_replace(call, root_rule, "$1weft-tool-call ::=");
  std::string g = "root ::= \"<tool_call>\\n\" weft-tool-call \"\\n</tool_call>\"";
  if (choice == ToolChoice::automatic) g += " | weft-tool-text\nweft-tool-text ::= [^<] .*";
  return g + "\n" + call;
}

std::string tools_prompt(std::span<const Tool> tools) {
  const auto params = checked_parameters(tools);
  std::string out =
      "You can act by calling a tool. To call one, reply with nothing but the call, in this form:\n"
      "<tool_call>\n{\"name\": \"<tool name>\", \"arguments\": <the arguments as a JSON object>}\n</tool_call>\n"
      "The result comes back as <tool_response>...</tool_response>. The tools:\n";
  for (std::size_t i = 0; i < tools.size(); ++i) {
    out += "- " + tools[i].name;
    if (!tools[i].description.empty()) out += ": " + tools[i].description;
    out += "\n  arguments: " + params[i].dump() + "\n";
  }
  return out;
}

bool parse_tool_call(std::string_view text, ToolCall &out) {
  if (text.substr(0, kOpen.size()) != kOpen) return false;
  const auto end = text.find(kClose, kOpen.size());
  if (end == std::string_view::npos) return false;
  const OJson j = OJson::parse(text.substr(kOpen.size(), end - kOpen.size()), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() ||
      !j.contains("arguments") || !j["arguments"].is_object()) {
    return false;
  }
  out.name = j["name"].get<std::string>();
  out.arguments = j["arguments"].dump(-1, ' ', false, OJson::error_handler_t::replace);
  return true;
}

}  // namespace weft
