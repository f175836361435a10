// weft/tools.hpp — NPC actions: tools a generation may call, and the call it
// made (GenerateParams::tools, GenerationResult::tool_call).
//
// A generation with tools is constrained by a grammar so that its reply is
// one well-formed call, in the format the model's chat template teaches it
// (ToolFormat; Model::tool_format()), with the arguments matching the tool's
// JSON Schema — or, with ToolChoice::automatic, plain text instead (text that
// does not begin as a call does). The formats:
//
//   hermes   <tool_call>
//            {"name": "give_item", "arguments": {"item": "sword"}}
//            </tool_call>
//   llama3   {"name": "give_item", "parameters": {"item": "sword"}}
//   mistral  [TOOL_CALLS][{"name": "give_item", "arguments": {"item": "sword"}}]
//
// hermes is weft's own, for a model whose template shows none. The model
// learns the tools from tools_prompt(), placed in its system prompt; the game
// applies the call and prompts the result back with tool_result_prompt().
// Needs weft built with llama.cpp's source tree (as json_schema_supported();
// Errc::invalid_argument otherwise).
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

// How a model writes a call (the formats above).
enum class ToolFormat {
  automatic,  // GenerateParams: the model's (Model::tool_format()); elsewhere hermes
  hermes,     // Qwen 2.5/3, Hermes 2/3 (the <tool_call> tags); weft's own
  llama3,     // Llama 3.1-3.3's JSON tool calls
  mistral,    // Mistral's [TOOL_CALLS]
};

// The format a chat template's text teaches: mistral when it names
// [TOOL_CALLS], hermes when <tool_call>, llama3 when it is a Llama 3 template
// with an ipython role; hermes otherwise (and for an empty template).
WEFT_API ToolFormat tool_format_of(std::string_view chat_template) noexcept;
// "automatic", "hermes", "llama3", "mistral".
WEFT_API const char *tool_format_name(ToolFormat format) noexcept;

struct ToolCall {
  std::string name;
  std::string arguments;  // the arguments object, as compact JSON text
};

// The most tools one generation takes.
inline constexpr std::size_t kMaxTools = 64;

// A system-prompt paragraph that lists the tools (name, description,
// parameters) and the call format: for mistral, its [AVAILABLE_TOOLS] block.
// Throws as tools_grammar() does.
WEFT_API std::string tools_prompt(std::span<const Tool> tools, ToolFormat format = ToolFormat::hermes);

// The text that gives a call's result back to the model, to prompt after the
// call, as the format's templates write it: hermes "<tool_response>\n" +
// result + "\n</tool_response>" (its templates put it in a user turn);
// llama3 a whole ipython turn ("<|start_header_id|>ipython<|end_header_id|>\n\n"
// + result + "<|eot_id|>"); mistral "[TOOL_RESULTS]{\"content\": " + result
// as a JSON string + "}[/TOOL_RESULTS]".
WEFT_API std::string tool_result_prompt(std::string_view result, ToolFormat format = ToolFormat::hermes);

// The GBNF grammar (start rule "root") a generation with these tools samples
// under. Throws Errc::invalid_argument for no tools or more than kMaxTools,
// a bad or repeated name, or parameters that are not a JSON Schema of an
// object the converter takes (the message names the tool).
WEFT_API std::string tools_grammar(std::span<const Tool> tools, ToolChoice choice,
                                   ToolFormat format = ToolFormat::hermes);

// `call` written as the format writes it (hermes: "<tool_call>\n{...}\n</tool_call>"),
// as the model would have: for rendering an earlier turn's call back into a
// prompt. Throws Errc::invalid_argument when call.arguments is not a JSON
// object's text or the name is empty.
WEFT_API std::string tool_call_text(const ToolCall &call, ToolFormat format = ToolFormat::hermes);

// The call at the start of `text` (a generation's text), or false when it
// holds no complete, well-formed one. For mistral the [TOOL_CALLS] marker may
// be missing (a special token, left out of text that renders none).
WEFT_API bool parse_tool_call(std::string_view text, ToolCall &out, ToolFormat format = ToolFormat::hermes);

}  // namespace weft
