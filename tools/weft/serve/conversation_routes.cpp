// weft serve: conversations as resources.
#include "serve/conversation_routes.hpp"

#include <fmt/format.h>

#include "serve/api_error.hpp"
#include "serve/auth.hpp"
#include "serve/generation_run.hpp"
#include "serve/media_input.hpp"
#include "serve/request_params.hpp"
#include "serve/sse.hpp"

namespace weft_cli::serve {

namespace {

Json conversation_json(ServeContext &ctx, ConvEntry &e, bool with_tokens) {
  const auto &c = e.conv;
  Json j = {{"id", e.id},
            {"object", "conversation"},
            {"kind", e.kind},
            {"n_tokens", c.n_tokens()},
            {"n_decoded", c.n_decoded()},
            {"n_queued", c.n_queued()},
            {"n_cells", c.n_cells()},
            {"residency", weft::residency_name(c.residency())},
            {"tokens_per_second", e.tokens_per_second()},
            {"age_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - e.created).count()}};
  const auto g = e.generation();
  const bool generating = g && !g->done();
  j["generating"] = generating;
  j["generated_tokens"] = g ? g->n_tokens() : 0;
  const auto err = c.error();
  j["error"] = err ? Json(err->what()) : Json(nullptr);
  if (with_tokens) {
    // Media positions hold negative image_token ids: kept as they are in
    // "tokens", one media marker each in "text".
    const auto tokens = c.tokens();
    j["tokens"] = tokens;
    j["text"] = text_with_markers(ctx.model, tokens);
  }
  return j;
}

std::string id_of(const httplib::Request &req) { return req.path_params.at("id"); }

// This node's conversation, else the store's (--store); 404 unless the
// request's key may use it.
std::shared_ptr<ConvEntry> find_conv(ServeContext &ctx, const httplib::Request &req) {
  return ctx.cluster->find(id_of(req), caller_of(ctx, req));
}

// A turn that throws before it is written gives its lease back.
struct TurnGuard {
  Cluster &cluster;
  std::shared_ptr<Turn> turn;
  ~TurnGuard() {
    if (turn) cluster.abandon(*turn);
  }
};

Json optional_body(const httplib::Request &req) {
  if (req.body.empty()) return Json::object();
  return parse_body(req);
}

void refuse_when_draining(const ServeContext &ctx) {
  if (ctx.draining.load()) throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
}

void create(ServeContext &ctx, const httplib::Request &req, httplib::Response &res) {
  refuse_when_draining(ctx);
  const Caller who = caller_of(ctx, req);
  const Json body = optional_body(req);
  std::string id;
  if (const Json *v = optional_field(body, "id", Json::value_t::string, "a string")) id = v->get<std::string>();
  PromptInput prefix;
  if (body.contains("messages")) {
    prefix = chat_prompt(ctx.model, parse_chat(body, ctx.projector, ctx.media), ctx.chat_template, false);
  } else if (const Json *v = optional_field(body, "prefix", Json::value_t::string, "a string");
             v && !v->get<std::string>().empty()) {
    prefix = PromptInput::of_tokens(ctx.model.tokenize(v->get<std::string>(), {.add_bos = ctx.model.bos() >= 0}));
  }
  auto entry = ctx.registry.add(ctx.ex->create(), "conversation", id, who.key_id, /*fresh=*/true);
  Json stored;
  try {
    queue_prompt(entry->conv, prefix);
    stored = ctx.cluster->publish(*entry);
  } catch (const weft::Error &e) {
    ctx.registry.remove(entry->id);
    if (e.code() == weft::Errc::out_of_range)
      throw ApiError(400, "invalid_request_error", "context_length_exceeded", e.what(), "prefix");
    throw;
  } catch (...) {
    ctx.registry.remove(entry->id);
    throw;
  }
  Json j = conversation_json(ctx, *entry, false);
  if (!stored.is_null()) j["store"] = stored;
  send_json(res, j, 201);
}

void messages(ServeContext &ctx, const httplib::Request &req, httplib::Response &res) {
  refuse_when_draining(ctx);
  const Json body = parse_body(req);
  // With a store: the lease, and the store's copy when it is newer.
  std::optional<std::uint64_t> if_version;
  if (const auto it = body.find("if_version"); it != body.end()) {
    if (!it->is_number_unsigned()) throw bad_param("if_version", "'if_version' must be a non-negative integer", "invalid_type");
    if_version = it->get<std::uint64_t>();
  }
  const Caller who = caller_of(ctx, req);
  auto turn = std::make_shared<Turn>(ctx.cluster->begin_turn(id_of(req), who, if_version));
  TurnGuard guard{*ctx.cluster, turn};
  auto entry = turn->entry;
  // content: a string, or parts as a chat message's (text, image_url, input_audio).
  std::string content;
  std::vector<PromptMedia> media;
  if (const auto c = body.find("content"); c != body.end() && c->is_array()) {
    check_media_count(count_media_parts(*c), ctx.media, "content");
    append_parts(*c, "content", ctx.projector, ctx.media, content, media);
  } else if (const Json *v = optional_field(body, "content", Json::value_t::string, "a string or an array of parts")) {
    content = v->get<std::string>();
  }
  bool special = false;
  if (const Json *v = optional_field(body, "parse_special", Json::value_t::boolean, "true or false")) special = v->get<bool>();
  const auto n_before = entry->conv.n_tokens();
  PromptInput input;
  if (!content.empty())
    input = make_prompt(ctx.model, content, std::move(media),
                        {.add_bos = n_before == 0 && ctx.model.bos() >= 0, .parse_special = special}, "content");
  const auto n_new = input.known_positions();
  const auto n_ctx = ctx.n_ctx();
  if (std::uint64_t{n_before} + n_new + 1 > n_ctx)
    throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                   fmt::format("the conversation holds {} tokens and the message adds {}; the context holds {}",
                               n_before, n_new, n_ctx),
                   "content");
  auto g = parse_generation(body, ctx.opt.max_tokens, n_ctx - n_before - n_new, ctx.model.n_vocab());
  auto run = std::make_shared<GenerationRun>(ctx, entry, input, g.params,
                                             RunOptions{.ignore_eos = g.ignore_eos, .key_id = who.key_id});
  const std::string id = entry->id;
  auto final_json = [id](const RunOutcome &o) {
    const auto c = o.result.tokens.size();
    return Json{{"id", id},
                {"object", "conversation.message"},
                {"text", o.result.text},
                {"finish_reason", finish_reason_word(o.result.reason)},
                {"usage", {{"prompt_tokens", o.prompt_tokens}, {"completion_tokens", c}, {"total_tokens", o.prompt_tokens + c}}}};
  };
  if (!g.stream) {
    const auto o = wait_run(*run);
    const auto events = stream_error_events(o);
    if (!events.empty() && o.end != RunEnd::normal) {
      const auto &e = events.front()["error"];
      throw ApiError(o.end == RunEnd::timeout ? 504 : 503, e["type"], e["code"], e["message"]);
    }
    Json j = final_json(o);
    if (const Json stored = ctx.cluster->commit(*turn); !stored.is_null()) j["store"] = stored;
    send_json(res, j);
    return;
  }
  // The stream owns the turn now: written at its end, given back by its cleanup.
  guard.turn = nullptr;
  Cluster *cluster = ctx.cluster.get();
  stream_run(res, run,
             SseCallbacks{.begin = nullptr,
                          .text = [id](std::string_view t) -> std::vector<Json> {
                            return {Json{{"id", id}, {"object", "conversation.message.delta"}, {"text", t}}};
                          },
                          .end = [final_json, cluster, turn](const RunOutcome &o) -> std::vector<Json> {
                            Json j = final_json(o);
                            try {
                              if (const Json stored = cluster->commit(*turn); !stored.is_null()) j["store"] = stored;
                            } catch (const ApiError &e) {
                              return {error_json(e)};
                            }
                            return {j};
                          },
                          .cleanup = [cluster, turn] { cluster->abandon(*turn); }});
}

void put_state(ServeContext &ctx, const httplib::Request &req, httplib::Response &res) {
  refuse_when_draining(ctx);
  const std::string id = id_of(req);
  // A conversation that exists keeps its owner, and only a key that may use
  // it replaces it; a new one is the caller's.
  const Caller who = caller_of(ctx, req);
  std::optional<std::string> owner;
  if (const auto held = ctx.registry.find(id)) owner = held->owner;
  else owner = ctx.cluster->stored_owner(id);
  if (owner && !who.may_use(*owner)) throw conversation_not_found(id);
  if (req.body.empty()) throw bad_param("body", "PUT /state needs the state bytes as the body");
  const auto *p = reinterpret_cast<const std::uint8_t *>(req.body.data());
  weft::Conversation conv = ctx.ex->load(std::span<const std::uint8_t>(p, req.body.size()));
  // Loading replaces a conversation of that id; the old one goes only once
  // the new one loaded.
  bool replaced = ctx.registry.remove(id);
  auto entry = ctx.registry.add(std::move(conv), "conversation", id, owner.value_or(who.key_id), /*fresh=*/!owner);
  Json stored;
  try {
    stored = ctx.cluster->replace(*entry);
  } catch (...) {
    ctx.registry.remove(id);  // the store keeps what it had; it loads again from there
    throw;
  }
  Json j = conversation_json(ctx, *entry, false);
  if (!stored.is_null()) {
    j["store"] = stored;
    if (stored.value("version", 0) > 1) replaced = true;
  }
  send_json(res, j, replaced ? 200 : 201);
}

}  // namespace

void add_conversation_routes(httplib::Server &svr, ServeContext &ctx) {
  svr.Get("/v1/conversations", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
            const Caller who = caller_of(ctx, req);
            Json list = Json::array();
            for (const auto &e : ctx.registry.list()) {
              if (!who.may_use(e->owner)) continue;  // another key's
              try {
                list.push_back(conversation_json(ctx, *e, false));
              } catch (const weft::Error &) {
                // removed while listing
              }
            }
            send_json(res, Json{{"object", "list"}, {"data", list}});
          }));
  svr.Post("/v1/conversations", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
             create(ctx, req, res);
           }));
  svr.Get("/v1/conversations/:id", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
            const std::string id = id_of(req);
            Json j = conversation_json(ctx, *find_conv(ctx, req), true);
            if (const Json stored = ctx.cluster->describe(id); !stored.is_null()) j["store"] = stored;
            send_json(res, j);
          }));
  svr.Delete("/v1/conversations/:id", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
               const std::string id = id_of(req);
               const Caller who = caller_of(ctx, req);
               if (const auto held = ctx.registry.find(id); held && !who.may_use(held->owner))
                 throw conversation_not_found(id);
               const bool stored = ctx.cluster->remove(id, who);  // 404 / 409 / 503 from the store
               if (!ctx.registry.remove(id) && !stored) throw conversation_not_found(id);
               send_json(res, Json{{"id", id}, {"object", "conversation"}, {"deleted", true}});
             }));
  svr.Post("/v1/conversations/:id/fork", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
             refuse_when_draining(ctx);
             const Caller who = caller_of(ctx, req);
             auto src = ctx.cluster->find(id_of(req), who);
             const Json body = optional_body(req);
             std::string id;
             if (const Json *v = optional_field(body, "id", Json::value_t::string, "a string")) id = v->get<std::string>();
             // The child is the caller's (an admin's fork is the admin's).
             auto entry = ctx.registry.add(src->conv.fork(), "conversation", id, who.key_id, /*fresh=*/true);
             Json stored;
             try {
               stored = ctx.cluster->publish(*entry);
             } catch (...) {
               ctx.registry.remove(entry->id);
               throw;
             }
             Json j = conversation_json(ctx, *entry, false);
             if (!stored.is_null()) j["store"] = stored;
             send_json(res, j, 201);
           }));
  svr.Post("/v1/conversations/:id/rewind", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
             const Json body = parse_body(req);
             auto turn = std::make_shared<Turn>(ctx.cluster->begin_turn(id_of(req), caller_of(ctx, req)));
             TurnGuard guard{*ctx.cluster, turn};
             auto e = turn->entry;
             const auto it = body.find("n");
             if (it == body.end() || !it->is_number_unsigned())
               throw bad_param("n", "'n' must be a non-negative integer (tokens to drop)", "invalid_type");
             const auto n = it->get<std::uint64_t>();
             const auto have = e->conv.n_tokens();
             if (n > have)
               throw bad_param("n", fmt::format("'n' is {}; conversation '{}' holds {} tokens", n, e->id, have));
             e->conv.rewind(static_cast<std::uint32_t>(n));
             Json j = conversation_json(ctx, *e, false);
             if (const Json stored = ctx.cluster->commit(*turn); !stored.is_null()) j["store"] = stored;
             send_json(res, j);
           }));
  svr.Post("/v1/conversations/:id/messages", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
             messages(ctx, req, res);
           }));
  svr.Get("/v1/conversations/:id/state", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
            const auto bytes = find_conv(ctx, req)->conv.save();
            res.status = 200;
            res.set_content(std::string(bytes.begin(), bytes.end()), "application/octet-stream");
          }));
  svr.Put("/v1/conversations/:id/state", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
            put_state(ctx, req, res);
          }));
}

}  // namespace weft_cli::serve
