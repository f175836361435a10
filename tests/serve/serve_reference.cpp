// The independent path the serve tests compare against: the same request
// run straight on weft's C++ API, no HTTP, no server code. Prints one JSON
// line: {"text", "prompt_tokens", "completion_tokens", "finish_reason"}.
//
//   serve_reference MODEL CTX PARALLEL BATCH THREADS REQUEST_JSON
//
// REQUEST_JSON: {"messages": [...]} (formatted with ChatML, as the server
// formats chats for a model without a template) or {"prompt": "..."} (raw
// text, BOS first) or {"prompts": ["...", "..."]} (each prompted and fully
// decoded before the next, as a conversation resource is prompted by
// create then messages; BOS before the first), with "max_tokens", "temperature", "top_p", "seed",
// "stop" as in the OpenAI request.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "weft/weft.hpp"

int main(int argc, char **argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: serve_reference MODEL CTX PARALLEL BATCH THREADS REQUEST_JSON\n");
    return 2;
  }
  try {
    const auto req = nlohmann::json::parse(argv[6]);
    auto model = weft::Model::load({.path = argv[1]});
    weft::ExecutorParams ep;
    ep.n_ctx = static_cast<std::uint32_t>(std::stoul(argv[2]));
    ep.n_seq_max = static_cast<std::uint32_t>(std::stoul(argv[3]));
    ep.n_batch = static_cast<std::uint32_t>(std::stoul(argv[4]));
    ep.n_threads = std::stoi(argv[5]);
    ep.flash_attn = weft::FlashAttention::disabled;  // as the servers under test (helpers.mjs)
    weft::Executor ex(model, ep);

    std::vector<weft::Token> prompt;
    auto conv = ex.create();
    if (req.contains("prompts")) {
      for (const auto &p : req["prompts"]) {
        const auto t = model.tokenize(p.get<std::string>(), {.add_bos = prompt.empty() && model.bos() >= 0});
        conv.prompt(t);
        while (!ex.step().idle) {
        }
        prompt.insert(prompt.end(), t.begin(), t.end());
      }
    } else if (req.contains("messages")) {
      std::vector<weft::ChatMessage> msgs;
      for (const auto &m : req["messages"]) msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      prompt = model.tokenize(model.apply_chat_template(msgs, true, "chatml"),
                              {.add_bos = model.bos() >= 0, .parse_special = true});
    } else {
      prompt = model.tokenize(req["prompt"].get<std::string>(), {.add_bos = model.bos() >= 0});
    }
    weft::GenerateParams gp;
    gp.max_tokens = req.value("max_tokens", 16u);
    gp.sampler = weft::SamplerParams{.temperature = req.value("temperature", 1.0f),
                                     .top_p = req.value("top_p", 1.0f),
                                     .seed = req.value("seed", 0u)};
    if (req.contains("stop")) {
      if (req["stop"].is_string()) gp.stop.push_back(req["stop"].get<std::string>());
      else for (const auto &s : req["stop"]) gp.stop.push_back(s.get<std::string>());
    }
    if (!req.contains("prompts")) conv.prompt(prompt);
    auto gen = conv.generate(gp);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!gen.done() && std::chrono::steady_clock::now() < deadline) ex.step();
    if (!gen.done()) {
      std::fprintf(stderr, "serve_reference: the generation did not finish in 60 s\n");
      return 1;
    }
    const auto r = gen.result();
    const char *reason = r.reason == weft::FinishReason::max_tokens || r.reason == weft::FinishReason::context_full
                             ? "length"
                             : r.reason == weft::FinishReason::end_of_generation || r.reason == weft::FinishReason::stop_string
                                   ? "stop"
                                   : weft::finish_reason_name(r.reason);
    const nlohmann::json out = {{"text", r.text},
                                {"prompt_tokens", prompt.size()},
                                {"prompt_token_ids", prompt},
                                {"completion_tokens", r.tokens.size()},
                                {"finish_reason", reason}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "serve_reference: %s\n", e.what());
    return 1;
  }
}
