// weft/tools.hpp — NPC actions: tools a generation may call, and the call it
// made (GenerateParams::tools, GenerationResult::tool_call).
//
// A generation with tools is constrained by a grammar so that its reply is
// one well-formed call — weft's own format, as Hermes-style chat templates
// (Qwen, Hermes) write it:
//
//   <tool_call>
//   {"name": "give_item", "arguments": {"item": "sword"}}
//   </tool_call>
//
// with `arguments` matching the tool's JSON Schema — or, with
// ToolChoice::automatic, plain text instead (text that does not begin with
// '<'). The model learns the tools from tools_prompt(), placed in its system
// prompt; the game applies the call and prompts the result back with
// tool_result_prompt(). Needs weft built with llama.cpp's source tree (as
// json_schema_supported(); Errc::invalid_argument otherwise).
//
// Thread-safety: the functions are callable from any thread.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "weft/export.hpp"

namespace weft {

struct Tool {
  // [A-Za-z0-9_-], 1 to 64 characters; unique among a generation's tools.
  std::string name;
  // What it does, for the model (tools_prompt()). Default empty.
  std::string description;
  // A JSON Schema (its text) of the arguments object; every keyword
  // json_schema_to_grammar() takes. Empty (the default) = any object.
  std::string parameters;
};

enum class ToolChoice {
  automatic,  // one call or plain text (that does not begin with '<')
  required,   // one call
};

struct ToolCall {
  std::string name;
  std::string arguments;  // the arguments object, as compact JSON text
};

// The most tools one generation takes.
inline constexpr std::size_t kMaxTools = 64;

// A system-prompt paragraph that lists the tools (name, description,
// parameters) and the call format. Throws as tools_grammar() does.
WEFT_API std::string tools_prompt(std::span<const Tool> tools);

// The text that gives a call's result back to the model, to prompt after the
// call: "<tool_response>\n" + result + "\n</tool_response>".
WEFT_API std::string tool_result_prompt(std::string_view result);

// The GBNF grammar (start rule "root") a generation with these tools samples
// under. Throws Errc::invalid_argument for no tools or more than kMaxTools,
// a bad or repeated name, or parameters that are not a JSON Schema of an
// object the converter takes (the message names the tool).
WEFT_API std::string tools_grammar(std::span<const Tool> tools, ToolChoice choice);

// The call at the start of `text` (a generation's text), or false when it
// holds no complete, well-formed one.
WEFT_API bool parse_tool_call(std::string_view text, ToolCall &out);

}  // namespace weft
