// The independent path the serve tests compare against: the same request
// run straight on weft's C++ API, no HTTP, no server code. Prints one JSON
// line: {"text", "prompt_tokens", "prompt_token_ids", "completion_tokens",
// "completion_token_ids", "finish_reason"}.
//
//   serve_reference MODEL CTX PARALLEL BATCH THREADS REQUEST_JSON [MMPROJ]
//
// REQUEST_JSON: {"messages": [...]} (formatted with ChatML, as the server
// formats chats for a model without a template) or {"prompt": "..."} (raw
// text, BOS first) or {"prompts": ["...", "..."]} (each prompted and fully
// decoded before the next, as a conversation resource is prompted by
// create then messages; BOS before the first; with MMPROJ an element may be
// an array of parts, as below, queued around its media), with "max_tokens", "temperature", "top_p", "seed",
// "stop", llama-server's "top_k", "min_p", "typical_p", "xtc_*", "dry_*" and "mirostat*", "banned_strings", "logprobs" and "top_logprobs" (then "logprobs": [{token, logprob, top: [[token, logprob]]}] in the
// output) and "logit_bias" ({"id": bias}, -100 = a ban: SamplerParams's -inf) as in the OpenAI request. With MMPROJ (a projector for MODEL), a
// message's content may be an array of parts: {"type": "text", "text"},
// {"type": "image_file", "path"} (a PNG or JPEG, queued with
// Conversation::prompt_image) and {"type": "audio_f32", "path"} (raw
// little-endian f32 samples, queued with prompt_audio); the templated text is
// queued piece by piece around them, and prompt_tokens counts every position.
//
// REQUEST_JSON {"embed": [inputs], "embedding_model"?: path, "pooling"?:
// "mean"|"cls"|"last"|"model", "embedding_ctx"?: n}: each input (a string, or
// an array of token ids) embedded alone with Executor::embed / embed_tokens
// on an executor over MODEL whose embedder is the embedding model (MODEL's
// own without one). Prints {"n_embd", "vectors": [[floats]], "tokens": [each
// input's tokens as the embedder decoded them: ExecutorStats::embed_tokens]}.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "weft/weft.hpp"

namespace {

std::vector<std::uint8_t> file_bytes(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A message's content as text, the media marker where each media part was
// (whose path and kind go to `media`, in order).
std::string content_of(const nlohmann::json &c, std::vector<nlohmann::json> &media) {
  if (c.is_string()) return c.get<std::string>();
  std::string out;
  for (const auto &part : c) {
    if (part["type"] == "text") {
      out += part["text"].get<std::string>();
    } else {
      out += weft::media_marker();
      media.push_back(part);
    }
  }
  return out;
}

// The chat on the library's own media calls: text between markers with
// Conversation::prompt, images with prompt_image(file), clips with prompt_audio.
void queue_chat(const weft::Model &model, weft::Conversation &conv, const std::string &text,
                const std::vector<nlohmann::json> &media, bool bos = true, bool special = true) {
  const std::string marker(weft::media_marker());
  std::size_t from = 0;
  for (std::size_t i = 0; i <= media.size(); ++i) {
    const auto at = i < media.size() ? text.find(marker, from) : std::string::npos;
    if (i < media.size() && at == std::string::npos) throw std::runtime_error("the template lost a media marker");
    const std::string piece = text.substr(from, at == std::string::npos ? std::string::npos : at - from);
    if (!piece.empty()) conv.prompt(piece, {.add_bos = bos && i == 0 && model.bos() >= 0, .parse_special = special});
    if (i == media.size()) break;
    const auto bytes = file_bytes(media[i]["path"].get<std::string>());
    if (media[i]["type"] == "image_file") {
      conv.prompt_image(bytes);
    } else {
      std::vector<float> samples(bytes.size() / sizeof(float));
      std::memcpy(samples.data(), bytes.data(), samples.size() * sizeof(float));
      conv.prompt_audio(samples);
    }
    from = at + marker.size();
  }
}

// The "embed" request (above).
nlohmann::json run_embed(const weft::Model &model, weft::ExecutorParams ep, const nlohmann::json &req) {
  weft::EmbedderParams e;
  if (req.contains("embedding_model")) e.model = weft::Model::load({.path = req["embedding_model"].get<std::string>()});
  const std::string pooling = req.value("pooling", "model");
  e.pooling = pooling == "mean" ? weft::Pooling::mean
              : pooling == "cls" ? weft::Pooling::cls
              : pooling == "last" ? weft::Pooling::last
                                  : weft::Pooling::model;
  e.n_ctx = req.value("embedding_ctx", 512u);
  ep.embedder = e;
  weft::Executor ex(model, ep);
  nlohmann::json vectors = nlohmann::json::array(), tokens = nlohmann::json::array();
  for (const auto &in : req["embed"]) {
    const auto before = ex.stats().embed_tokens;
    auto emb = in.is_string() ? ex.embed({in.get<std::string>()})
                              : ex.embed_tokens({in.get<std::vector<weft::Token>>()});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!emb.done() && std::chrono::steady_clock::now() < deadline) ex.step();
    if (!emb.done() || emb.error()) throw std::runtime_error("the embedding did not finish");
    vectors.push_back(emb.vector(0));
    tokens.push_back(ex.stats().embed_tokens - before);
  }
  return {{"n_embd", ex.embedding_size()}, {"vectors", vectors}, {"tokens", tokens}};
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 7 && argc != 8) {
    std::fprintf(stderr, "usage: serve_reference MODEL CTX PARALLEL BATCH THREADS REQUEST_JSON [MMPROJ]\n");
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
    if (argc == 8) ep.projector = weft::Projector::load(model, {.path = argv[7]});
    if (req.contains("embed")) {
      std::printf("%s\n", run_embed(model, ep, req).dump().c_str());
      return 0;
    }
    weft::Executor ex(model, ep);

    std::vector<weft::Token> prompt;
    bool queued = false;  // the prompt went in already (in pieces, or turn by turn)
    auto conv = ex.create();
    if (req.contains("prompts")) {
      for (const auto &p : req["prompts"]) {
        if (p.is_array()) {
          // A message's parts, as /v1/conversations/{id}/messages takes them.
          std::vector<nlohmann::json> media;
          const std::string text = content_of(p, media);
          queue_chat(model, conv, text, media, conv.n_tokens() == 0, false);
        } else {
          conv.prompt(model.tokenize(p.get<std::string>(), {.add_bos = conv.n_tokens() == 0 && model.bos() >= 0}));
        }
        while (!ex.step().idle) {
        }
      }
      prompt = conv.tokens();
    } else if (req.contains("messages")) {
      std::vector<weft::ChatMessage> msgs;
      std::vector<nlohmann::json> media;
      for (const auto &m : req["messages"]) msgs.push_back({m["role"].get<std::string>(), content_of(m["content"], media)});
      const std::string text = model.apply_chat_template(msgs, true, "chatml");
      if (media.empty()) {
        prompt = model.tokenize(text, {.add_bos = model.bos() >= 0, .parse_special = true});
      } else {
        queue_chat(model, conv, text, media);
        prompt = conv.tokens();  // image_token ids at media positions
        queued = true;
      }
    } else {
      prompt = model.tokenize(req["prompt"].get<std::string>(), {.add_bos = model.bos() >= 0});
    }
    weft::GenerateParams gp;
    gp.max_tokens = req.value("max_tokens", 16u);
    gp.sampler = weft::SamplerParams{.temperature = req.value("temperature", 1.0f),
                                     .top_p = req.value("top_p", 1.0f),
                                     .seed = req.value("seed", 0u)};
    if (req.contains("logit_bias")) {
      for (const auto &[id, b] : req["logit_bias"].items()) {
        const auto bias = b.get<double>();
        gp.sampler->logit_bias.push_back({std::stoi(id), bias == -100 ? -INFINITY : static_cast<float>(bias)});
      }
    }
    // llama-server's sampling fields, as serve reads them.
    auto &sp = *gp.sampler;
    sp.top_k = req.value("top_k", sp.top_k);
    sp.min_p = req.value("min_p", sp.min_p);
    sp.typical_p = req.value("typical_p", sp.typical_p);
    sp.xtc_probability = req.value("xtc_probability", sp.xtc_probability);
    sp.xtc_threshold = req.value("xtc_threshold", sp.xtc_threshold);
    sp.dry_multiplier = req.value("dry_multiplier", sp.dry_multiplier);
    sp.dry_base = req.value("dry_base", sp.dry_base);
    sp.dry_allowed_length = req.value("dry_allowed_length", sp.dry_allowed_length);
    sp.dry_penalty_last_n = req.value("dry_penalty_last_n", sp.dry_penalty_last_n);
    if (req.contains("dry_sequence_breakers")) sp.dry_sequence_breakers = req["dry_sequence_breakers"];
    sp.mirostat = req.value("mirostat", sp.mirostat);
    sp.mirostat_tau = req.value("mirostat_tau", sp.mirostat_tau);
    sp.mirostat_eta = req.value("mirostat_eta", sp.mirostat_eta);
    if (req.contains("banned_strings")) sp.banned_strings = req["banned_strings"];
    if (req.value("logprobs", false)) {
      gp.logprobs = true;
      gp.top_logprobs = req.value("top_logprobs", 0u);
    }
    if (req.contains("stop")) {
      if (req["stop"].is_string()) gp.stop.push_back(req["stop"].get<std::string>());
      else for (const auto &s : req["stop"]) gp.stop.push_back(s.get<std::string>());
    }
    if (!req.contains("prompts") && !queued) conv.prompt(prompt);
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
    nlohmann::json logprobs = nlohmann::json::array();
    for (const auto &e : r.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto &t : e.top) top.push_back({t.token, t.logprob});
      logprobs.push_back({{"token", e.token}, {"logprob", e.logprob}, {"top", top}});
    }
    const nlohmann::json out = {{"text", r.text},
                                {"logprobs", logprobs},
                                {"prompt_tokens", prompt.size()},
                                {"prompt_token_ids", prompt},
                                {"completion_tokens", r.tokens.size()},
                                {"completion_token_ids", r.tokens},
                                {"finish_reason", reason}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "serve_reference: %s\n", e.what());
    return 1;
  }
}
