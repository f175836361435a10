// weft serve: OpenAI function calling through libweft's tools.
#include "serve/tool_calls.hpp"

#include "serve/request_params.hpp"

#include <fmt/format.h>

#include <atomic>

namespace weft_cli::serve {

namespace {

std::string schema_text(const Json &fn, std::size_t i) {
  const auto p = fn.find("parameters");
  if (p == fn.end() || p->is_null()) return {};
  if (!p->is_object()) {
    throw bad_param("tools", fmt::format("'tools[{}].function.parameters' must be a JSON Schema object", i),
                    "invalid_type");
  }
  return p->dump();
}

}  // namespace

weft::ToolFormat tool_format_for(const weft::Model &model, const std::string &chat_template) {
  if (chat_template.empty()) return model.tool_format();
  if (chat_template == "llama3") return weft::ToolFormat::llama3;
  if (chat_template.starts_with("mistral")) return weft::ToolFormat::mistral;
  return weft::tool_format_of(chat_template);
}

ToolRequest parse_tools(const Json &body, weft::ToolFormat format) {
  ToolRequest out;
  out.format = format;
  const Json *tools = optional_field(body, "tools", Json::value_t::array, "an array of tools");
  if (tools == nullptr || tools->empty()) {
    if (body.contains("tool_choice") && !body["tool_choice"].is_null() && body["tool_choice"] != "none" &&
        body["tool_choice"] != "auto") {
      throw bad_param("tool_choice", "'tool_choice' asks for a tool, but the request offers no 'tools'");
    }
    return out;
  }
  if (tools->size() > weft::kMaxTools) {
    throw bad_param("tools", fmt::format("'tools' has {} tools; at most {} are taken", tools->size(), weft::kMaxTools));
  }
  for (std::size_t i = 0; i < tools->size(); ++i) {
    const Json &t = (*tools)[i];
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string()) {
      throw bad_param("tools", fmt::format("'tools[{}]' must be {{\"type\": \"function\", \"function\": {{\"name\": "
                                           "...}}}}", i), "invalid_type");
    }
    const Json &fn = t["function"];
    const auto d = fn.find("description");
    out.tools.push_back({fn["name"].get<std::string>(), d != fn.end() && d->is_string() ? d->get<std::string>() : "",
                         schema_text(fn, i)});
  }
  const auto c = body.find("tool_choice");
  if (c != body.end() && !c->is_null()) {
    if (*c == "none") return {};
    if (*c == "required") {
      out.choice = weft::ToolChoice::required;
    } else if (c->is_object() && c->value("type", "") == "function" && c->contains("function") &&
               (*c)["function"].is_object() && (*c)["function"].contains("name") &&
               (*c)["function"]["name"].is_string()) {
      const std::string name = (*c)["function"]["name"].get<std::string>();
      std::vector<weft::Tool> one;
      for (auto &t : out.tools)
        if (t.name == name) one.push_back(std::move(t));
      if (one.empty()) throw bad_param("tool_choice", fmt::format("'tool_choice' names '{}', which 'tools' does not offer", name));
      out.tools = std::move(one);
      out.choice = weft::ToolChoice::required;
    } else if (*c != "auto") {
      throw bad_param("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                                     "\"function\": {\"name\": ...}}", "invalid_value");
    }
  }
  try {
    (void)weft::tools_grammar(out.tools, out.choice, out.format);  // every refusal now, not mid-request
  } catch (const weft::Error &e) {
    throw bad_param("tools", e.what());
  }
  return out;
}

void render_tool_messages(const Json &body, const ToolRequest &tools, ChatInput &chat) {
  const Json &msgs = body["messages"];
  for (std::size_t i = 0; i < msgs.size() && i < chat.messages.size(); ++i) {
    const Json &m = msgs[i];
    auto &msg = chat.messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (msg.role == "tool") {
      if (tools.format == weft::ToolFormat::llama3) {
        msg.role = "ipython";
      } else {
        msg.role = "user";
        msg.content = weft::tool_result_prompt(msg.content, tools.format);
      }
    } else if (msg.role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (!m["tool_calls"].is_array()) throw bad_param(where, fmt::format("'{}.tool_calls' must be an array", where), "invalid_type");
      for (const Json &tc : m["tool_calls"]) {
        const Json *fn = tc.is_object() && tc.contains("function") ? &tc["function"] : nullptr;
        if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string() ||
            !fn->contains("arguments") || !(*fn)["arguments"].is_string()) {
          throw bad_param(where, fmt::format("'{}.tool_calls' entries need function.name and function.arguments "
                                             "(a string)", where), "invalid_type");
        }
        Json args = Json::parse((*fn)["arguments"].get<std::string>(), nullptr, false);
        if (args.is_discarded()) throw bad_param(where, fmt::format("'{}.tool_calls' arguments are not JSON", where));
        if (!msg.content.empty()) msg.content += "\n";
        try {
          msg.content += weft::tool_call_text({(*fn)["name"].get<std::string>(), args.dump()}, tools.format);
        } catch (const weft::Error &e) {
          throw bad_param(where, fmt::format("'{}.tool_calls': {}", where, e.what()));
        }
      }
    }
  }
  if (!tools.any()) return;
  const std::string about = weft::tools_prompt(tools.tools, tools.format);
  if (!chat.messages.empty() && chat.messages.front().role == "system") {
    chat.messages.front().content += "\n\n" + about;
  } else {
    chat.messages.insert(chat.messages.begin(), weft::ChatMessage{.role = "system", .content = about});
  }
}

Json tool_calls_json(const weft::ToolCall &call) {
  static std::atomic<std::uint64_t> n{1};
  return Json::array({{{"id", fmt::format("call_{}", n++)},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}}});
}

}  // namespace weft_cli::serve
