// weft serve: the OpenAI-compatible endpoints.
#include "serve/openai_routes.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>

#include "serve/api_error.hpp"
#include "serve/auth.hpp"
#include "serve/generation_run.hpp"
#include "serve/media_input.hpp"
#include "serve/request_params.hpp"
#include "serve/sse.hpp"
#include "serve/tool_calls.hpp"

namespace weft_cli::serve {

namespace {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string next_id(const char *prefix) {
  static std::atomic<std::uint64_t> n{1};
  return fmt::format("{}-{}", prefix, n++);
}

void check_model(const ServeContext &ctx, const Json &body) {
  const std::string m = required_string(body, "model");
  if (m != ctx.model_name)
    throw ApiError(404, "invalid_request_error", "model_not_found",
                   fmt::format("The model `{}` does not exist; this server serves `{}`", m.substr(0, 100),
                               ctx.model_name),
                   "model");
}

Json usage_json(const RunOutcome &o) {
  const auto c = o.result.tokens.size();
  return Json{{"prompt_tokens", o.prompt_tokens}, {"completion_tokens", c}, {"total_tokens", o.prompt_tokens + c}};
}

// A cut run (timeout, shutdown, error) is an error reply, not a short answer.
void throw_if_cut(const RunOutcome &o) {
  const auto events = stream_error_events(o);
  if (events.empty()) return;
  const auto &e = events.front()["error"];
  const int status = e["code"] == "request_timeout" ? 504 : e["code"] == "shutting_down" ? 503
                     : e["code"] == "cancelled" ? 409 : 500;
  throw ApiError(status, e["type"].get<std::string>(), e["code"].get<std::string>(), e["message"].get<std::string>());
}

// Refuses a prompt the context cannot hold: its text tokens and images'
// positions (a clip's are counted once queued, GenerationRun).
void check_prompt_fits(const ServeContext &ctx, const PromptInput &prompt, const char *param) {
  const auto n = prompt.known_positions();
  const auto n_ctx = ctx.n_ctx();
  if (n + 1 > n_ctx)
    throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                   fmt::format("This model's maximum context length is {} tokens; the prompt is {} tokens{} "
                               "(and at least one must be generated)",
                               n_ctx, n, prompt.has_media() ? ", images' positions included" : ""),
                   param);
}

// A prompt given as token ids (OpenAI's array of integers, or an array
// holding one such array): used as given, no BOS added.
std::vector<weft::Token> prompt_token_ids(const ServeContext &ctx, const Json &prompt) {
  const Json &ids = prompt.size() == 1 && prompt[0].is_array() ? prompt[0] : prompt;
  if (ids.empty()) throw bad_param("prompt", "'prompt' must not be empty");
  std::vector<weft::Token> tokens;
  tokens.reserve(ids.size());
  const auto n_vocab = ctx.model.n_vocab();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer())
      throw bad_param("prompt", fmt::format("'prompt[{}]' must be a token id (an integer)", i), "invalid_type");
    const auto t = ids[i].get<std::int64_t>();
    if (t < 0 || t >= n_vocab)
      throw bad_param("prompt", fmt::format("'prompt[{}]' is {}; token ids must be in [0, {})", i, t, n_vocab));
    tokens.push_back(static_cast<weft::Token>(t));
  }
  const auto n_ctx = ctx.n_ctx();
  if (tokens.size() + 1 > n_ctx)
    throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                   fmt::format("This model's maximum context length is {} tokens; the prompt is {} tokens "
                               "(and at least one must be generated)", n_ctx, tokens.size()),
                   "prompt");
  return tokens;
}

bool is_token_prompt(const Json &p) {
  if (!p.is_array() || p.empty()) return false;
  const Json &first = p.size() == 1 && p[0].is_array() ? p[0] : p;
  return !first.empty() && first[0].is_number();
}

// OpenAI's logprobs object for `r`'s tokens (null when not asked): chat's
// {"content": [{token, logprob, bytes, top_logprobs}]}, or the legacy
// completions' parallel arrays.
Json logprobs_json(const ServeContext &ctx, const weft::GenerationResult &r, bool chat) {
  if (r.logprobs.empty()) return nullptr;
  auto piece = [&](weft::Token t) { return ctx.model.token_piece(t); };
  // JSON numbers cannot be -inf: the least float stands for it.
  auto num = [](float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -std::numeric_limits<float>::max(); };
  if (chat) {
    Json content = Json::array();
    auto entry = [&](weft::Token t, float lp) {
      const std::string s = piece(t);
      // The piece's UTF-8 bytes: a token may hold part of a character.
      // (Replies are dumped with invalid UTF-8 replaced; `bytes` keeps them.)
      return Json{{"token", s},
                  {"logprob", num(lp)},
                  {"bytes", Json(std::vector<int>(s.begin(), s.end()))}};
    };
    for (const auto &e : r.logprobs) {
      Json j = entry(e.token, e.logprob);
      Json top = Json::array();
      for (const auto &t : e.top) top.push_back(entry(t.token, t.logprob));
      j["top_logprobs"] = std::move(top);
      content.push_back(std::move(j));
    }
    return Json{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  std::size_t offset = 0;
  for (const auto &e : r.logprobs) {
    const std::string s = piece(e.token);
    tokens.push_back(s);
    lps.push_back(num(e.logprob));
    Json top = Json::object();
    for (const auto &t : e.top) top[piece(t.token)] = num(t.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += s.size();
  }
  return Json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

struct Completion {
  bool chat = false;
  std::string id, model;
  std::int64_t created = unix_now();
  std::string fingerprint;

  Json base(const char *object) const {
    return Json{{"id", id}, {"object", object}, {"created", created}, {"model", model},
                {"system_fingerprint", fingerprint}};
  }
  Json choice_text(std::string_view text, Json finish) const {
    if (chat) return Json{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", finish}};
    return Json{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}};
  }
  Json chunk(Json choice) const {
    Json c = base(chat ? "chat.completion.chunk" : "text_completion");
    c["choices"] = Json::array({std::move(choice)});
    return c;
  }
};

void run_completion(ServeContext &ctx, const httplib::Request &req, httplib::Response &res, bool chat) {
  if (ctx.draining.load()) throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
  const Caller who = caller_of(ctx, req);
  const Json body = parse_body(req);
  check_model(ctx, body);
  PromptInput input;
  ToolRequest tools;
  if (chat) {
    tools = parse_tools(body, tool_format_for(ctx.model, ctx.chat_template));
    ChatInput messages = parse_chat(body, ctx.projector, ctx.media);
    render_tool_messages(body, tools, messages);
    input = chat_prompt(ctx.model, std::move(messages), ctx.chat_template, true);
    check_prompt_fits(ctx, input, "messages");
  } else {
    const auto it = body.find("prompt");
    std::string prompt;
    if (it != body.end() && is_token_prompt(*it)) {
      input = PromptInput::of_tokens(prompt_token_ids(ctx, *it));
    } else {
      if (it != body.end() && it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
        prompt = (*it)[0].get<std::string>();
      } else {
        prompt = required_string(body, "prompt");
      }
      if (prompt.empty()) throw bad_param("prompt", "'prompt' must not be empty");
      input = PromptInput::of_tokens(ctx.model.tokenize(prompt, {.add_bos = ctx.model.bos() >= 0}));
      check_prompt_fits(ctx, input, "prompt");
    }
  }
  const std::uint32_t room = ctx.n_ctx() - input.known_positions();
  auto g = parse_generation(body, ctx.opt.max_tokens, room, ctx.model.n_vocab());
  g.params.tools = tools.tools;
  g.params.tool_choice = tools.choice;
  g.params.tool_format = tools.format;

  auto entry = ctx.registry.add(ctx.ex->create(), chat ? "chat.completion" : "text_completion", {},
                                who.key_id, /*fresh=*/true);
  Completion c{.chat = chat, .id = next_id(chat ? "chatcmpl" : "cmpl"), .model = ctx.model_name,
               .fingerprint = fmt::format("weft-{:016x}", ctx.model.fingerprint())};
  std::shared_ptr<GenerationRun> run;
  try {
    run = std::make_shared<GenerationRun>(ctx, entry, input, g.params,
                                          RunOptions{.ignore_eos = g.ignore_eos,
                                                     .every_token = g.stream && g.continuous_usage,
                                                     .key_id = who.key_id});
  } catch (...) {
    ctx.registry.remove(entry->id);
    throw;
  }
  if (!g.stream) {
    EphemeralGuard guard(ctx.registry, entry->id);
    const auto o = wait_run(*run);
    throw_if_cut(o);
    Json out = c.base(chat ? "chat.completion" : "text_completion");
    Json choice = {{"index", 0},
                   {"finish_reason", finish_reason_word(o.result.reason)},
                   {"logprobs", logprobs_json(ctx, o.result, chat)}};
    if (chat && o.result.tool_call) {
      choice["message"] = {{"role", "assistant"}, {"content", nullptr}, {"refusal", nullptr},
                           {"tool_calls", tool_calls_json(*o.result.tool_call)}};
      choice["finish_reason"] = "tool_calls";
    } else if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", o.result.text}, {"refusal", nullptr}};
    } else {
      choice["text"] = o.result.text;
    }
    out["choices"] = Json::array({choice});
    out["usage"] = usage_json(o);
    send_json(res, out);
    return;
  }
  const bool include_usage = g.include_usage;
  struct Calling {
    int state = 0;  // 0: no text yet, 1: a call's text (held back), 2: spoken text
  };
  auto calling = std::make_shared<Calling>();
  if (!tools.any()) calling->state = 2;
  const auto n_prompt = run->prompt_tokens();
  // stream_options.continuous_usage_stats (vLLM's extension): usage in every chunk.
  auto with_usage = [c, n_prompt](std::string_view t, std::uint32_t n) -> std::vector<Json> {
    Json chunk = c.chunk(c.choice_text(t, nullptr));
    chunk["usage"] = Json{{"prompt_tokens", n_prompt}, {"completion_tokens", n}, {"total_tokens", n_prompt + n}};
    return {chunk};
  };
  decltype(SseCallbacks::tokens) tokens_cb;
  if (g.continuous_usage) tokens_cb = with_usage;
  stream_run(res, run,
             SseCallbacks{
                 .begin = [c]() -> std::vector<Json> {
                   if (!c.chat) return {};
                   return {c.chunk(Json{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                        {"finish_reason", nullptr}})};
                 },
                 .text = [c, calling](std::string_view t) -> std::vector<Json> {
                   // A reply with tools that begins with '<' is a call (the
                   // grammar makes spoken text begin otherwise): it comes
                   // as tool_calls in the last chunk, not as text.
                   if (calling->state == 0 && !t.empty()) calling->state = t.front() == '<' ? 1 : 2;
                   if (calling->state == 1) return {};
                   return {c.chunk(c.choice_text(t, nullptr))};
                 },
                 .tokens = tokens_cb,
                 .end = [&ctx, c, include_usage, continuous = g.continuous_usage](const RunOutcome &o) -> std::vector<Json> {
                   Json last = c.chat ? Json{{"index", 0}, {"delta", Json::object()},
                                             {"finish_reason", finish_reason_word(o.result.reason)}}
                                      : c.choice_text("", finish_reason_word(o.result.reason));
                   // Every token's logprobs, in the last chunk: text chunks
                   // are released text, not tokens.
                   if (!o.result.logprobs.empty()) last["logprobs"] = logprobs_json(ctx, o.result, c.chat);
                   if (c.chat && o.result.tool_call) {
                     last["delta"] = {{"role", "assistant"}, {"tool_calls", tool_calls_json(*o.result.tool_call)}};
                     last["delta"]["tool_calls"][0]["index"] = 0;
                     last["finish_reason"] = "tool_calls";
                   }
                   std::vector<Json> out{c.chunk(last)};
                   if (continuous) out.back()["usage"] = usage_json(o);
                   if (include_usage) {
                     Json u = c.base(c.chat ? "chat.completion.chunk" : "text_completion");
                     u["choices"] = Json::array();
                     u["usage"] = usage_json(o);
                     out.push_back(u);
                   }
                   return out;
                 },
                 .cleanup = [&ctx, id = entry->id] { ctx.registry.remove(id); },
             });
}

}  // namespace

void add_openai_routes(httplib::Server &svr, ServeContext &ctx) {
  svr.Get("/v1/models", guarded([&ctx](const httplib::Request &, httplib::Response &res) {
            Json m = {{"id", ctx.model_name},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "weft"},
                      {"meta", {{"n_ctx", ctx.n_ctx()},
                                {"n_ctx_train", ctx.model.n_ctx_train()},
                                {"n_vocab", ctx.model.n_vocab()},
                                {"n_params", ctx.model.n_params()},
                                {"description", ctx.model.description()},
                                {"chat_template", ctx.chat_template.empty() ? "chatml (fallback)" : ctx.chat_template.substr(0, 200)}}}};
            Json data = Json::array({m});
            if (ctx.embed_model) {
              // The embedder: the chat model's own entry, or an entry of its own.
              const Json e = {{"n_embd", ctx.ex->embedding_size()}, {"n_ctx", ctx.embed_n_ctx},
                              {"pooling", ctx.opt.pooling.empty() ? "model" : ctx.opt.pooling}};
              if (ctx.embed_model_name == ctx.model_name && ctx.opt.embedding_model.empty()) {
                data[0]["meta"]["embeddings"] = e;
              } else {
                data.push_back({{"id", ctx.embed_model_name},
                                {"object", "model"},
                                {"created", 0},
                                {"owned_by", "weft"},
                                {"meta", {{"n_ctx_train", ctx.embed_model->n_ctx_train()},
                                          {"n_vocab", ctx.embed_model->n_vocab()},
                                          {"n_params", ctx.embed_model->n_params()},
                                          {"description", ctx.embed_model->description()},
                                          {"embeddings", e}}}});
              }
            }
            send_json(res, Json{{"object", "list"}, {"data", data}});
          }));
  svr.Post("/v1/chat/completions", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
             run_completion(ctx, req, res, true);
           }));
  svr.Post("/v1/completions", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
             run_completion(ctx, req, res, false);
           }));
}

}  // namespace weft_cli::serve
