// The C ABI, tools: their C structs read, the prompt and result texts.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "capi/c_api_internal.hpp"
#include "weft/tools.hpp"

namespace weft::capi {

weft::ToolFormat to_tool_format(std::int32_t f, const char *field) {
  if (f < WEFT_TOOL_FORMAT_AUTO || f > WEFT_TOOL_FORMAT_MISTRAL) {
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("{} = {} is not a weft_tool_format", field, f));
  }
  return static_cast<weft::ToolFormat>(f);
}

std::vector<weft::Tool> to_tools(const weft_tool *tools, std::size_t n, const char *field) {
  if (n > weft::kMaxTools) {  // before reading them
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("{} = {} tools; at most {} are taken", field, n, weft::kMaxTools));
  }
  if (n > 0) need(tools, field);
  std::vector<weft::Tool> out;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string at = fmt::format("{}[{}]", field, i);
    out.push_back({std::string(cstr_arg(tools[i].name, (at + ".name").c_str())),
                   std::string(cstr_arg(tools[i].description, (at + ".description").c_str(), true)),
                   std::string(cstr_arg(tools[i].parameters, (at + ".parameters").c_str(), true))});
  }
  return out;
}

}  // namespace weft::capi

using namespace weft::capi;

weft_status weft_tools_prompt(const weft_tool *tools, size_t n_tools, char *buf, size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] {
    copy_text_out(weft::tools_prompt(to_tools(tools, n_tools, "tools")), buf, capacity, out_len);
  });
}

weft_status weft_tools_prompt_format(const weft_tool *tools, size_t n_tools, int32_t format, char *buf,
                                     size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] {
    const auto f = to_tool_format(format, "format");
    copy_text_out(weft::tools_prompt(to_tools(tools, n_tools, "tools"), f), buf, capacity, out_len);
  });
}

weft_status weft_tool_result_prompt(const char *result, int32_t format, char *buf, size_t capacity,
                                    size_t *out_len) {
  return guarded(__func__, [&] {
    const auto f = to_tool_format(format, "format");
    copy_text_out(weft::tool_result_prompt(cstr_arg(result, "result"), f), buf, capacity, out_len);
  });
}

weft_status weft_tool_call_text(const char *name, const char *arguments, int32_t format, char *buf, size_t capacity,
                                size_t *out_len) {
  return guarded(__func__, [&] {
    const auto f = to_tool_format(format, "format");
    const weft::ToolCall call{std::string(cstr_arg(name, "name")), std::string(cstr_arg(arguments, "arguments"))};
    copy_text_out(weft::tool_call_text(call, f), buf, capacity, out_len);
  });
}
