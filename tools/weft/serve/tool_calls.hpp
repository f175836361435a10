// weft serve: OpenAI's function calling on libweft's tools (weft/tools.hpp):
// `tools` and `tool_choice` read, earlier `tool_calls` and `tool` messages
// rendered into the chat in weft's call format, and a reply's call answered
// as `tool_calls`.
#pragma once

#include <string>
#include <vector>

#include "serve/api_error.hpp"
#include "serve/media_input.hpp"
#include "weft/tools.hpp"

namespace weft_cli::serve {

struct ToolRequest {
  std::vector<weft::Tool> tools;  // empty: none offered, or tool_choice "none"
  weft::ToolChoice choice = weft::ToolChoice::automatic;
  bool any() const { return !tools.empty(); }
};

// `tools` (at most weft::kMaxTools of {"type": "function", "function":
// {name, description?, parameters?}}) and `tool_choice` ("auto", "none",
// "required" or {"type": "function", "function": {"name"}}, which requires
// that one). 400 with param `tools` or `tool_choice` naming what is wrong,
// libweft's message for a schema it cannot convert.
ToolRequest parse_tools(const Json &body);

// Rewrites `chat` (from parse_chat, message for message of body's
// `messages`): the tools' description joins the system prompt; an assistant
// message's `tool_calls` become weft's call text after its content; a
// `tool` message becomes a user turn holding tool_result_prompt(content).
// 400 naming the message for a malformed one.
void render_tool_messages(const Json &body, const ToolRequest &tools, ChatInput &chat);

// OpenAI's `tool_calls` array for `call`.
Json tool_calls_json(const weft::ToolCall &call);

}  // namespace weft_cli::serve
