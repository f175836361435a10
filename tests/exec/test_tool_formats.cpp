// Tool-call formats (weft::ToolFormat): a chat template names its format;
// under each format every required reply, at any seed, is one call written
// as the format writes it, parsed back only by that format, with arguments
// its schema allows; automatic text never begins as a call does; results go
// back as the format's templates write them; a save mid-call carries the
// format (state version 13); a bad format is refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "common.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"
#include "weft/json_schema.hpp"

namespace {

using weft::Tool;
using weft::ToolChoice;
using weft::ToolFormat;
using weft_test::run_until_idle;

weft::ExecutorParams params() { return {.n_ctx = 2048, .n_batch = 64, .n_seq_max = 4, .n_threads = 2}; }

const std::vector<Tool> &tools() {
  static const std::vector<Tool> t = {
      {"give_item", "Give the player an item.",
       R"({"type": "object", "properties": {"item": {"enum": ["sword", "shield", "potion"]}}, "required": ["item"],
           "additionalProperties": false})"},
      {"open_gate", "Open the town gate.", R"({"type": "object", "properties": {}, "additionalProperties": false})"},
  };
  return t;
}

constexpr ToolFormat kFormats[] = {ToolFormat::hermes, ToolFormat::llama3, ToolFormat::mistral};

// How each format's call text begins (the JSON inside may space itself).
std::string opening(ToolFormat f) {
  switch (f) {
    case ToolFormat::llama3: return "{";
    case ToolFormat::mistral: return "[TOOL_CALLS][";
    default: return "<tool_call>\n{";
  }
}

void expect_valid(const weft::ToolCall &call, const std::string &where) {
  const auto args = nlohmann::json::parse(call.arguments);
  if (call.name == "give_item") {
    const std::set<std::string> items = {"sword", "shield", "potion"};
    ASSERT_TRUE(args.is_object() && args.size() == 1u) << where;
    EXPECT_TRUE(items.count(args.at("item").get<std::string>())) << where;
  } else {
    EXPECT_EQ(call.name, "open_gate") << where;
    EXPECT_EQ(call.arguments, "{}") << where;
  }
}

std::vector<weft::Token> prompt_tokens(const weft::Model &m, ToolFormat f, const std::string &user) {
  return m.tokenize(weft::tools_prompt(tools(), f) + "\nPlayer: " + user + "\nMerchant:", {.add_bos = true});
}

}  // namespace

TEST(ToolFormats, ChatTemplatesNameTheirFormat) {
  // Excerpts of the templates these models ship.
  EXPECT_EQ(weft::tool_format_of("{%- if tools %}...<tool_call>\\n{\"name\": <function-name>, ...</tool_call>"),
            ToolFormat::hermes);  // Qwen 2.5
  EXPECT_EQ(weft::tool_format_of("<|start_header_id|>system<|end_header_id|>\\n\\nEnvironment: ipython\\n"),
            ToolFormat::llama3);  // Llama 3.1
  EXPECT_EQ(weft::tool_format_of("{%- elif message.tool_calls is defined %}{{- \"[TOOL_CALLS][\" }}"),
            ToolFormat::mistral);  // Mistral Nemo
  EXPECT_EQ(weft::tool_format_of("<|start_header_id|>user<|end_header_id|>"), ToolFormat::hermes);  // Llama 3, no tools
  EXPECT_EQ(weft::tool_format_of("<|im_start|>{{ message.role }}"), ToolFormat::hermes);           // ChatML
  EXPECT_EQ(weft::tool_format_of(""), ToolFormat::hermes);
  EXPECT_EQ(weft_test::tiny().tool_format(), ToolFormat::hermes) << "the test model has no template";
  EXPECT_STREQ(weft::tool_format_name(ToolFormat::llama3), "llama3");
  EXPECT_STREQ(weft::tool_format_name(ToolFormat::automatic), "automatic");
}

TEST(ToolFormats, RequiredCallsAreWrittenAndParsedInEveryFormat) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  const auto &m = weft_test::tiny();
  for (ToolFormat f : kFormats) {
    std::set<std::string> names;
    for (unsigned seed = 1; seed <= 4; ++seed) {
      weft::Executor ex(m, params());
      std::vector<weft::Conversation> convs;
      std::vector<weft::Generation> gens;
      for (unsigned k = 0; k < 2; ++k) {
        convs.push_back(ex.create());
        convs.back().prompt(prompt_tokens(m, f, "friend " + std::to_string(k)));
        gens.push_back(convs.back().generate({.max_tokens = 200,
                                              .sampler = weft::SamplerParams{.temperature = 1.0f, .seed = seed * 10 + k},
                                              .tools = tools(),
                                              .tool_choice = ToolChoice::required,
                                              .tool_format = f}));
      }
      run_until_idle(ex);
      for (auto &g : gens) {
        const auto r = g.result();
        const std::string where = std::string(weft::tool_format_name(f)) + " seed " + std::to_string(seed) + ": " + r.text;
        ASSERT_TRUE(r.tool_call.has_value()) << where;
        EXPECT_EQ(r.text.rfind(opening(f), 0), 0u) << where;
        expect_valid(*r.tool_call, where);
        names.insert(r.tool_call->name);
        // Rendered back (an earlier turn in a prompt), it parses as the same call.
        weft::ToolCall back;
        ASSERT_TRUE(weft::parse_tool_call(weft::tool_call_text(*r.tool_call, f), back, f)) << where;
        EXPECT_EQ(back.name, r.tool_call->name);
        EXPECT_EQ(back.arguments, r.tool_call->arguments);
        // Parsed by its own format only.
        for (ToolFormat other : kFormats) {
          weft::ToolCall parsed;
          EXPECT_EQ(weft::parse_tool_call(r.text, parsed, other), other == f) << where << " as " << weft::tool_format_name(other);
          if (other == f) {
            EXPECT_EQ(parsed.name, r.tool_call->name);
            EXPECT_EQ(parsed.arguments, r.tool_call->arguments);
          }
        }
      }
    }
    EXPECT_EQ(names.size(), 2u) << weft::tool_format_name(f) << ": both tools get called across seeds";
  }
}

TEST(ToolFormats, AutomaticTextNeverBeginsAsACall) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  const auto &m = weft_test::tiny();
  for (ToolFormat f : kFormats) {
    weft::Executor ex(m, params());
    std::vector<weft::Conversation> convs;
    std::vector<weft::Generation> gens;
    for (unsigned seed = 1; seed <= 4; ++seed) {
      convs.push_back(ex.create());
      convs.back().prompt(prompt_tokens(m, f, "hello"));
      gens.push_back(convs.back().generate({.max_tokens = 24,
                                            .sampler = weft::SamplerParams{.temperature = 1.0f, .seed = seed},
                                            .tools = tools(),
                                            .tool_format = f}));
    }
    run_until_idle(ex);
    for (auto &g : gens) {
      const auto r = g.result();
      const std::string where = std::string(weft::tool_format_name(f)) + ": " + r.text;
      ASSERT_FALSE(r.text.empty()) << where;
      if (r.tool_call) {
        EXPECT_EQ(r.text.rfind(opening(f), 0), 0u) << where;
      } else {
        EXPECT_NE(r.text[0], opening(f)[0]) << where;
      }
    }
  }
}

TEST(ToolFormats, ParsingTakesTheMarkersASpecialTokenLeavesOut) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  weft::ToolCall c;
  // Mistral's [TOOL_CALLS] and Llama's <|python_tag|> are special tokens: text may or may not show them.
  ASSERT_TRUE(weft::parse_tool_call(R"([{"name": "open_gate", "arguments": {}}])", c, ToolFormat::mistral));
  EXPECT_EQ(c.name, "open_gate");
  ASSERT_TRUE(weft::parse_tool_call(R"(<|python_tag|>{"name": "give_item", "parameters": {"item": "sword"}})", c,
                                    ToolFormat::llama3));
  EXPECT_EQ(c.arguments, R"({"item":"sword"})");
  EXPECT_FALSE(weft::parse_tool_call(R"([TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}])",
                                     c, ToolFormat::mistral)) << "one call";
  EXPECT_FALSE(weft::parse_tool_call(R"({"name": "a", "arguments": {}})", c, ToolFormat::llama3)) << "llama3 says parameters";
  EXPECT_FALSE(weft::parse_tool_call(R"({"name": "a", "parameters": [1]})", c, ToolFormat::llama3));
  EXPECT_FALSE(weft::parse_tool_call("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", c, ToolFormat::hermes));
  EXPECT_FALSE(weft::parse_tool_call("Hello there", c, ToolFormat::llama3));
}

TEST(ToolFormats, PromptsAndResultsAreTheFormats) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  EXPECT_EQ(weft::tool_result_prompt("{\"gold\": 5}", ToolFormat::hermes), "<tool_response>\n{\"gold\": 5}\n</tool_response>");
  EXPECT_EQ(weft::tool_result_prompt("ok", ToolFormat::llama3),
            "<|start_header_id|>ipython<|end_header_id|>\n\nok<|eot_id|>");
  EXPECT_EQ(weft::tool_result_prompt("a \"b\"\n\x01", ToolFormat::mistral),
            "[TOOL_RESULTS]{\"content\": \"a \\\"b\\\"\\n\\u0001\"}[/TOOL_RESULTS]");
  const weft::ToolCall call{"give_item", R"({"item": "sword"})"};
  EXPECT_EQ(weft::tool_call_text(call, ToolFormat::hermes),
            "<tool_call>\n{\"name\":\"give_item\",\"arguments\":{\"item\":\"sword\"}}\n</tool_call>");
  EXPECT_EQ(weft::tool_call_text(call, ToolFormat::llama3), R"({"name":"give_item","parameters":{"item":"sword"}})");
  EXPECT_EQ(weft::tool_call_text(call, ToolFormat::mistral),
            R"([TOOL_CALLS][{"name":"give_item","arguments":{"item":"sword"}}])");
  EXPECT_TRUE(weft_test::throws_weft([] { (void)weft::tool_call_text({"a", "[1]"}, ToolFormat::hermes); },
                                     weft::Errc::invalid_argument, "the arguments of 'a' are not a JSON object"));
  EXPECT_TRUE(weft_test::throws_weft([] { (void)weft::tool_call_text({"", "{}"}); }, weft::Errc::invalid_argument,
                                     "no name"));
  const std::string mistral = weft::tools_prompt(tools(), ToolFormat::mistral);
  const std::string open = "[AVAILABLE_TOOLS]", close = "[/AVAILABLE_TOOLS]";
  ASSERT_EQ(mistral.rfind(open, 0), 0u) << mistral;
  ASSERT_TRUE(mistral.ends_with(close)) << mistral;
  const auto listed = nlohmann::json::parse(mistral.substr(open.size(), mistral.size() - open.size() - close.size()));
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0]["function"]["name"], "give_item");
  EXPECT_EQ(listed[1]["function"]["parameters"], nlohmann::json::parse(tools()[1].parameters));
  const std::string llama = weft::tools_prompt(tools(), ToolFormat::llama3);
  EXPECT_NE(llama.find("\"parameters\": dictionary of argument name"), std::string::npos) << llama;
  EXPECT_NE(llama.find("\"name\": \"open_gate\""), std::string::npos) << llama;
  EXPECT_EQ(weft::tools_prompt(tools(), ToolFormat::automatic), weft::tools_prompt(tools(), ToolFormat::hermes));
}

TEST(ToolFormats, SaveAndLoadMidCallKeepTheFormat) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  const auto &m = weft_test::tiny();
  for (ToolFormat f : {ToolFormat::llama3, ToolFormat::mistral}) {
    weft::Executor a(m, params());
    auto c = a.create();
    c.prompt(prompt_tokens(m, f, "What do you have?"));
    auto g = c.generate({.max_tokens = 200, .sampler = weft::SamplerParams{.temperature = 1.0f, .seed = 3},
                         .tools = tools(), .tool_choice = ToolChoice::required, .tool_format = f});
    const auto run = weft_test::save_mid_generation(a, c, g, 4, params());
    ASSERT_TRUE(run.ok);
    EXPECT_EQ(run.version, 13) << "a call format other than hermes is state version 13 (docs/STATE_FORMAT.md)";
    ASSERT_TRUE(run.original.tool_call.has_value()) << run.original.text;
    ASSERT_TRUE(run.loaded.tool_call.has_value()) << run.loaded.text;
    EXPECT_EQ(run.loaded.tool_call->name, run.original.tool_call->name);
    EXPECT_EQ(run.loaded.tool_call->arguments, run.original.tool_call->arguments);
    EXPECT_EQ(run.loaded.text, run.original.text);
  }
}

TEST(ToolFormats, AnUnknownFormatIsRefused) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  weft::Executor ex(weft_test::tiny(), params());
  auto c = ex.create();
  c.prompt(std::vector<weft::Token>{1, 2, 3});
  EXPECT_TRUE(weft_test::throws_weft([&] { (void)c.generate({.tools = tools(), .tool_format = static_cast<ToolFormat>(9)}); },
                                     weft::Errc::invalid_argument, "GenerateParams.tool_format = 9 is not a ToolFormat"));
  EXPECT_FALSE(c.generation().has_value());
}
