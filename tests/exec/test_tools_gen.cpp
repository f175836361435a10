// GenerateParams::tools: with ToolChoice::required every reply, at any seed,
// is one call that parses, names a tool and whose arguments match its
// schema, and arrives as a tool_call event just before its finished event;
// automatic speaks (text not beginning with '<') unless a bias puts
// the model on '<', then calls; the conversation after a call and its result
// goes on exactly as the same tokens prompted by hand; a save mid-call
// (state version 11) loads and parses the same call; bad tools are refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <set>
#include <vector>

#include "common.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"
#include "weft/json_schema.hpp"

namespace {

using weft::Token;
using weft::Tool;
using weft::ToolChoice;
using weft_test::run_until_idle;

weft::ExecutorParams params() { return {.n_ctx = 2048, .n_batch = 64, .n_seq_max = 4, .n_threads = 2}; }

const std::vector<Tool> &tools() {
  static const std::vector<Tool> t = {
      {"give_item", "Give the player an item.",
       R"({"type": "object", "properties": {"item": {"enum": ["sword", "shield", "potion"]},
           "count": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["item", "count"],
           "additionalProperties": false})"},
      {"open_gate", "Open the town gate.", R"({"type": "object", "properties": {}, "additionalProperties": false})"},
  };
  return t;
}

// The call names a tool and its arguments match that tool's schema.
void expect_valid(const weft::ToolCall &call, const std::string &where) {
  const auto args = nlohmann::json::parse(call.arguments);
  if (call.name == "give_item") {
    ASSERT_TRUE(args.is_object()) << where;
    EXPECT_EQ(args.size(), 2u) << where << " " << call.arguments;
    const std::set<std::string> items = {"sword", "shield", "potion"};
    EXPECT_TRUE(items.count(args.at("item").get<std::string>())) << where << " " << call.arguments;
    ASSERT_TRUE(args.at("count").is_number_integer()) << where << " " << call.arguments;
    EXPECT_GE(args.at("count").get<int>(), 1);
    EXPECT_LE(args.at("count").get<int>(), 9);
  } else {
    EXPECT_EQ(call.name, "open_gate") << where;
    EXPECT_EQ(call.arguments, "{}") << where;
  }
}

std::vector<Token> prompt_tokens(const weft::Model &m, const std::string &user) {
  return m.tokenize(weft::tools_prompt(tools()) + "\nPlayer: " + user + "\nMerchant:", {.add_bos = true});
}

}  // namespace

TEST(ToolsGeneration, RequiredAlwaysGivesAWellFormedCall) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  const auto &m = weft_test::tiny();
  std::set<std::string> names;
  for (unsigned seed = 1; seed <= 6; ++seed) {
    auto ep = params();
    ep.events = true;
    weft::Executor ex(m, ep);
    std::vector<weft::Conversation> convs;
    std::vector<weft::Generation> gens;
    for (unsigned k = 0; k < 3; ++k) {
      convs.push_back(ex.create());
      convs.back().prompt(prompt_tokens(m, "I need something, friend " + std::to_string(k)));
      gens.push_back(convs.back().generate({.max_tokens = 200,
                                            .sampler = weft::SamplerParams{.temperature = 1.0f, .seed = seed * 10 + k},
                                            .tools = tools(),
                                            .tool_choice = ToolChoice::required}));
    }
    run_until_idle(ex);
    for (unsigned k = 0; k < 3; ++k) {
      const auto r = gens[k].result();
      const std::string where = "seed " + std::to_string(seed) + " conv " + std::to_string(k) + ": " + r.text;
      EXPECT_EQ(r.reason, weft::FinishReason::end_of_generation) << where;
      ASSERT_TRUE(r.tool_call.has_value()) << where;
      EXPECT_EQ(r.text.rfind("<tool_call>\n", 0), 0u) << where;
      expect_valid(*r.tool_call, where);
      names.insert(r.tool_call->name);
    }
    // Each call as an event too, just before its generation's finished event.
    const auto events = ex.poll_events();
    for (unsigned k = 0; k < 3; ++k) {
      const auto call = gens[k].result().tool_call;
      std::vector<weft::EventKind> last;
      for (std::size_t i = 0; i < events.size(); ++i) {
        const auto &e = events[i];
        if (e.conversation != convs[k].id() || e.kind == weft::EventKind::token) continue;
        last.push_back(e.kind);
        if (e.kind != weft::EventKind::tool_call) continue;
        ASSERT_TRUE(e.tool_call && call);
        EXPECT_EQ(e.tool_call->name, call->name);
        EXPECT_EQ(e.tool_call->arguments, call->arguments);
        ASSERT_LT(i + 1, events.size());
        EXPECT_EQ(events[i + 1].kind, weft::EventKind::finished);
        EXPECT_EQ(events[i + 1].conversation, convs[k].id());
      }
      EXPECT_EQ(last, (std::vector<weft::EventKind>{weft::EventKind::tool_call, weft::EventKind::finished}))
          << "seed " << seed << " conv " << k;
    }
  }
  EXPECT_EQ(names.size(), 2u) << "both tools get called across seeds";
}

TEST(ToolsGeneration, AutomaticSpeaksUnlessTheModelReachesForACall) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  const auto &m = weft_test::tiny();
  // A token that is "<" alone (tokenize() would give " <": a leading space is text).
  Token lt = -1;
  for (Token t = 0; t < m.n_vocab() && lt < 0; ++t) {
    if (m.token_piece(t) == "<") lt = t;
  }
  ASSERT_GE(lt, 0);
  int spoke = 0;
  for (unsigned seed = 1; seed <= 6; ++seed) {
    auto ep = params();
    ep.events = true;
    weft::Executor ex(m, ep);
    auto c = ex.create();
    c.prompt(prompt_tokens(m, "Hello there"));
    auto d = c.fork();
    auto talk = c.generate({.max_tokens = 12, .sampler = weft::SamplerParams{.temperature = 1.0f, .seed = seed},
                            .tools = tools()});
    // The first token of "<tool_call>" boosted: the grammar then holds it to a call.
    auto act = d.generate({.max_tokens = 200,
                           .sampler = weft::SamplerParams{.temperature = 1.0f, .seed = seed,
                                                          .logit_bias = {{lt, 100.0f}}},
                           .tools = tools()});
    run_until_idle(ex);
    const auto rt = talk.result(), ra = act.result();
    for (const auto &e : ex.poll_events()) {
      EXPECT_FALSE(e.kind == weft::EventKind::tool_call && e.conversation == c.id() && !rt.tool_call)
          << "a call event for a reply without a call";
    }
    if (!rt.tool_call) {
      ++spoke;
      EXPECT_NE(rt.text.substr(0, 1), "<") << rt.text;
    }
    ASSERT_TRUE(ra.tool_call.has_value()) << "seed " << seed << ": " << ra.text;
    expect_valid(*ra.tool_call, ra.text);
  }
  EXPECT_GT(spoke, 0) << "left alone, the model talks";
}

TEST(ToolsGeneration, AfterACallAndItsResultTheConversationGoesOnAsPromptedByHand) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 3; ++seed) {
    weft::Executor ex(m, params());
    auto c = ex.create();
    c.prompt(prompt_tokens(m, "Open the gate or give me a potion"));
    auto g = c.generate({.max_tokens = 200, .sampler = weft::SamplerParams{.temperature = 0.8f, .seed = seed},
                         .tools = tools(), .tool_choice = ToolChoice::required});
    run_until_idle(ex);
    ASSERT_TRUE(g.result().tool_call.has_value());
    c.prompt(m.tokenize(weft::tool_result_prompt(R"({"ok": true})") + "\nMerchant:", {.add_bos = false}));
    run_until_idle(ex);
    const auto history = c.tokens();
    auto reply = c.generate({.max_tokens = 10});
    run_until_idle(ex);
    // The same tokens, prompted by hand into a fresh executor.
    weft::Executor fresh(m, params());
    auto f = fresh.create();
    f.prompt(history);
    auto by_hand = f.generate({.max_tokens = 10});
    run_until_idle(fresh);
    EXPECT_EQ(reply.result().tokens, by_hand.result().tokens) << "seed " << seed;
  }
}

TEST(ToolsGeneration, SaveAndLoadMidCallParseTheSameCall) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  const auto &m = weft_test::tiny();
  for (unsigned seed = 1; seed <= 3; ++seed) {
    weft::Executor a(m, params());
    auto c = a.create();
    c.prompt(prompt_tokens(m, "What do you have?"));
    auto g = c.generate({.max_tokens = 200, .sampler = weft::SamplerParams{.temperature = 1.0f, .seed = seed},
                         .tools = tools(), .tool_choice = ToolChoice::required});
    const auto run = weft_test::save_mid_generation(a, c, g, 4, params());
    ASSERT_TRUE(run.ok);
    EXPECT_EQ(run.version, 11) << "a generation with tools is state version 11 (docs/STATE_FORMAT.md)";
    const auto &ra = run.original, &rb = run.loaded;
    ASSERT_TRUE(ra.tool_call.has_value()) << ra.text;
    ASSERT_TRUE(rb.tool_call.has_value()) << rb.text;
    EXPECT_EQ(rb.tool_call->name, ra.tool_call->name);
    EXPECT_EQ(rb.tool_call->arguments, ra.tool_call->arguments);
    EXPECT_EQ(rb.tokens, ra.tokens);
  }
}

TEST(ToolsGeneration, BadToolsAreRefused) {
  if (!weft::json_schema_supported()) GTEST_SKIP() << "built without llama.cpp's source tree";
  const auto &m = weft_test::tiny();
  weft::Executor ex(m, params());
  auto c = ex.create();
  c.prompt(std::vector<Token>{1, 2, 3});
  auto refused = [&](weft::GenerateParams p, const char *needle) {
    return weft_test::throws_weft([&] { (void)c.generate(p); }, weft::Errc::invalid_argument, needle);
  };
  EXPECT_TRUE(refused({.tools = {{"give item", "", ""}}}, "GenerateParams.tools[0].name 'give item' must be"));
  EXPECT_TRUE(refused({.tools = {{"a", "", ""}, {"a", "", ""}}}, "GenerateParams.tools names 'a' twice"));
  EXPECT_TRUE(refused({.tools = {{"a", "", "[1]"}}}, "GenerateParams.tools[0] ('a'): parameters is not a JSON object"));
  EXPECT_TRUE(refused({.tools = {{"a", "", R"({"type": "string"})"}}}, "parameters must describe an object"));
  EXPECT_TRUE(refused({.tools = {{"a", "", R"({"$ref": "#/nope"})"}}}, "GenerateParams.tools: "));
  EXPECT_TRUE(refused({.sampler = weft::SamplerParams{.grammar = "root ::= \"x\""}, .tools = tools()},
                      "a grammar or json_schema of its own"));
  std::vector<Tool> many(65);
  for (std::size_t i = 0; i < many.size(); ++i) many[i].name = "t" + std::to_string(i);
  EXPECT_TRUE(refused({.tools = many}, "GenerateParams.tools has 65 tools; at most 64"));
  EXPECT_FALSE(c.generation().has_value());
}
