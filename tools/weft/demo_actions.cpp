// weft demo --actions: the merchant's inventory changes only through the
// calls the model makes; the transcript shows each call, its result and the
// merchant's reply.
#include "demo_actions.hpp"

#include <fmt/format.h>

#include <fstream>
#include <map>

#include "weft/weft.hpp"

namespace weft_cli {
namespace {

struct Stock {
  int count;
  int price;
};

const std::vector<weft::Tool> &merchant_tools() {
  static const std::vector<weft::Tool> tools = {
      {"sell_item", "Sell the player one item from your stall for its price in gold.",
       R"({"type": "object", "properties": {"item": {"enum": ["sword", "shield", "potion", "bread"]}},
           "required": ["item"], "additionalProperties": false})"},
      {"decline", "Refuse the player's request.",
       R"({"type": "object", "properties": {}, "additionalProperties": false})"},
  };
  return tools;
}

constexpr const char *kLines[] = {"I would like to buy a potion.", "Do you have a sword for me?",
                                  "Sell me some bread, please.", "And a shield, if you have one."};

std::string inventory_line(const std::map<std::string, Stock> &inv, int gold) {
  std::string out;
  for (const auto &[name, s] : inv) out += fmt::format("{} {}, ", name, s.count);
  return out + fmt::format("gold {}", gold);
}

}  // namespace

void run_actions_demo(const weft::Model &model, const ActionsDemoOptions &o) {
  // n_seq_max 16: a model trained on short contexts (the npc preset: 256) may still take 4096 cells.
  weft::Executor ex(model, {.n_ctx = 4096, .n_batch = 256, .n_seq_max = 16, .n_threads = o.threads});
  std::map<std::string, Stock> inv = {{"sword", {1, 12}}, {"shield", {0, 9}}, {"potion", {3, 4}}, {"bread", {5, 1}}};
  int gold = 0, calls = 0, fitting = 0;
  auto npc = ex.create();
  const std::string header =
      "Tobias is the merchant of Eldermoor.\n" + weft::tools_prompt(merchant_tools(), model.tool_format()) + "\n";
  npc.prompt(header, {.add_bos = true});
  std::string transcript = fmt::format("inventory: {}\n", inventory_line(inv, gold));
  auto run = [&](weft::GenerateParams p) {
    auto g = npc.generate(p);
    for (int i = 0; i < 100000 && !g.done(); ++i) ex.step();
    return g.result();
  };
  unsigned turn = 0;
  for (const char *line : kLines) {
    npc.prompt(fmt::format("Player: {}\nTobias:", line));
    const auto r = run({.max_tokens = 200,
                        .sampler = weft::SamplerParams{.temperature = o.temperature, .seed = o.seed + 31 * turn++},
                        .tools = merchant_tools(),
                        .tool_choice = weft::ToolChoice::required});
    transcript += fmt::format("Player: {}\n", line);
    std::string result;
    if (!r.tool_call) {
      transcript += fmt::format("Tobias (no call: {}): {}\n", weft::finish_reason_name(r.reason), r.text);
      continue;
    }
    ++calls;
    const weft::ToolCall &call = *r.tool_call;
    if (call.name == "sell_item") {
      const auto at = call.arguments.find("\"item\":\"");
      const std::string item = at == std::string::npos ? "" : call.arguments.substr(at + 8, call.arguments.find('"', at + 8) - at - 8);
      const auto it = inv.find(item);
      fitting += it != inv.end() && call.arguments == fmt::format(R"({{"item":"{}"}})", item);
      if (it == inv.end()) {
        result = R"({"error": "no such item"})";
      } else if (it->second.count == 0) {
        result = fmt::format(R"({{"error": "no {} left"}})", item);
      } else {
        --it->second.count;
        gold += it->second.price;
        result = fmt::format(R"({{"sold": "{}", "price": {}}})", item, it->second.price);
      }
    } else {
      fitting += call.name == "decline" && call.arguments == "{}";
      result = R"({"declined": true})";
    }
    transcript += fmt::format("Tobias -> {} {}  => {}  [{}]\n", call.name, call.arguments, result, inventory_line(inv, gold));
    npc.prompt(weft::tool_result_prompt(result, model.tool_format()) + "\nTobias:");
    const auto said = run({.max_tokens = o.max_tokens,
                           .sampler = weft::SamplerParams{.temperature = o.temperature, .seed = o.seed + 7 * turn},
                           .stop = {"\n"}});
    transcript += fmt::format("Tobias:{}\n", said.text);
    npc.prompt("\n");
  }
  fmt::print("{}", transcript);
  if (!o.transcripts.empty()) {
    std::ofstream f(o.transcripts, std::ios::binary);
    f << transcript;
    if (!f.flush()) throw weft::Error(weft::Errc::io, fmt::format("could not write '{}'", o.transcripts));
  }
  fmt::print("{} of {} player lines answered by a call; {} with arguments that fit the tool; gold {}\n", calls,
             std::size(kLines), fitting, gold);
  fmt::print("model: {}\n", model.description());
}

}  // namespace weft_cli
