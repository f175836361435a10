// weft serve: OpenAI's function calling on libweft's tools (weft/tools.hpp):
// `tools` and `tool_choice` read, earlier `tool_calls` and `tool` messages
// rendered into the chat in the model's call format (weft::ToolFormat), and
// a reply's call answered as `tool_calls`.
#pragma once

#include <string>
#include <vector>

#include "serve/api_error.hpp"
#include "serve/media_input.hpp"
#include "weft/model.hpp"
#include "weft/tools.hpp"

namespace weft_cli::serve {

struct ToolRequest {
  std::vector<weft::Tool> tools;  // empty: none offered, or tool_choice "none"
  weft::ToolChoice choice = weft::ToolChoice::automatic;
  weft::ToolFormat format = weft::ToolFormat::hermes;  // the chat template's
  bool any() const { return !tools.empty(); }
};

// `tools` (at most weft::kMaxTools of {"type": "function", "function":
// {name, description?, parameters?}}) and `tool_choice` ("auto", "none",
// "required" or {"type": "function", "function": {"name"}}, which requires
// that one). 400 with param `tools` or `tool_choice` naming what is wrong,
// libweft's message for a schema it cannot convert. `format`: how the chat
// template in use writes a call (tool_format_for).
ToolRequest parse_tools(const Json &body, weft::ToolFormat format);

// The call format of the chat template serve applies: `chat_template` (a
// llama.cpp template name or text; "llama3" and "mistral-*" by name), else
// the model's own.
weft::ToolFormat tool_format_for(const weft::Model &model, const std::string &chat_template);

// Rewrites `chat` (from parse_chat, message for message of body's
// `messages`): the tools' description joins the system prompt; an assistant
// message's `tool_calls` become the format's call text after its content; a
// `tool` message becomes a user turn holding tool_result_prompt(content)
// (for llama3 an ipython turn holding the content, as its template has it).
// 400 naming the message for a malformed one.
void render_tool_messages(const Json &body, const ToolRequest &tools, ChatInput &chat);

// OpenAI's `tool_calls` array for `call`.
Json tool_calls_json(const weft::ToolCall &call);

}  // namespace weft_cli::serve
