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

std::string tools_grammar(std::span<const Tool> tools, ToolChoice choice, ToolFormat format) {
  const auto params = checked_parameters(tools);
  // llama3 names the arguments "parameters"; the others "arguments".
  const char *args_key = format == ToolFormat::llama3 ? "parameters" : "arguments";
  OJson any = OJson::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    OJson props = OJson::object();
    props["name"] = {{"const", tools[i].name}};
    props[args_key] = params[i];
    any.push_back({{"type", "object"}, {"properties", props}, {"required", {"name", args_key}},
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
  // Plain text is whatever does not begin as a call does.
  std::string g, text;
  switch (format) {
    case ToolFormat::llama3:
      g = "root ::= weft-tool-call";
      text = "[^{]";
      break;
    case ToolFormat::mistral:
      g = "root ::= \"[TOOL_CALLS][\" weft-tool-call \"]\"";
      text = "[^[]";
      break;
    case ToolFormat::automatic:
    case ToolFormat::hermes:
      g = "root ::= \"<tool_call>\\n\" weft-tool-call \"\\n</tool_call>\"";
      text = "[^<]";
      break;
  }
  if (choice == ToolChoice::automatic) g += " | weft-tool-text\nweft-tool-text ::= " + text + " .*";
  return g + "\n" + call;
}

std::string tools_prompt(std::span<const Tool> tools, ToolFormat format) {
  const auto params = checked_parameters(tools);
  // As the format's templates list them: one function object each.
  OJson listed = OJson::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    listed.push_back({{"type", "function"},
                      {"function", {{"name", tools[i].name}, {"description", tools[i].description},
                                    {"parameters", params[i]}}}});
  }
  switch (format) {
    case ToolFormat::llama3: {
      std::string out =
          "Given the following functions, please respond with a JSON for a function call with its proper arguments "
          "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
          "dictionary of argument name and its value}. Do not use variables.\n\n";
      for (const OJson &f : listed) out += f.dump(4) + "\n\n";
      return out;
    }
    case ToolFormat::mistral: return "[AVAILABLE_TOOLS]" + listed.dump() + "[/AVAILABLE_TOOLS]";
    case ToolFormat::automatic:
    case ToolFormat::hermes: break;
  }
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

std::string tool_call_text(const ToolCall &call, ToolFormat format) {
  if (call.name.empty()) detail::fail(Errc::invalid_argument, "tool_call_text: the call has no name");
  OJson args = OJson::parse(call.arguments, nullptr, false);
  if (args.is_discarded() || !args.is_object()) {
    detail::fail(Errc::invalid_argument, fmt::format("tool_call_text: the arguments of '{}' are not a JSON object: {}",
                                                     call.name, call.arguments.substr(0, 80)));
  }
  const auto dump = [](const OJson &j) { return j.dump(-1, ' ', false, OJson::error_handler_t::replace); };
  switch (format) {
    case ToolFormat::llama3: return dump({{"name", call.name}, {"parameters", std::move(args)}});
    case ToolFormat::mistral:
      return "[TOOL_CALLS]" + dump(OJson::array({{{"name", call.name}, {"arguments", std::move(args)}}}));
    case ToolFormat::automatic:
    case ToolFormat::hermes: break;
  }
  return std::string(kOpen) + dump({{"name", call.name}, {"arguments", std::move(args)}}) + std::string(kClose);
}

bool parse_tool_call(std::string_view text, ToolCall &out, ToolFormat format) {
  std::string_view body;
  const char *args_key = "arguments";
  switch (format) {
    case ToolFormat::llama3:
      if (text.starts_with("<|python_tag|>")) text.remove_prefix(14);
      body = text;
      args_key = "parameters";
      break;
    case ToolFormat::mistral:
      if (text.starts_with("[TOOL_CALLS]")) text.remove_prefix(12);
      body = text;
      break;
    case ToolFormat::automatic:
    case ToolFormat::hermes: {
      if (text.substr(0, kOpen.size()) != kOpen) return false;
      const auto end = text.find(kClose, kOpen.size());
      if (end == std::string_view::npos) return false;
      body = text.substr(kOpen.size(), end - kOpen.size());
      break;
    }
  }
  OJson j = OJson::parse(body, nullptr, false);
  if (format == ToolFormat::mistral) {
    if (j.is_discarded() || !j.is_array() || j.size() != 1) return false;
    j = j[0];
  }
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains(args_key) ||
      !j[args_key].is_object()) {
    return false;
  }
  out.name = j["name"].get<std::string>();
  out.arguments = j[args_key].dump(-1, ' ', false, OJson::error_handler_t::replace);
  return true;
}

}  // namespace weft
