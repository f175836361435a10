// weft serve: POST /v1/embeddings.
#include "serve/embeddings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "serve/api_error.hpp"
#include "serve/auth.hpp"
#include "serve/request_params.hpp"

namespace weft_cli::serve {

namespace {

// OpenAI's limit on inputs per request.
constexpr std::size_t kMaxEmbedInputs = 2048;
// The probe text of probe_embedder().
constexpr const char *kEmbedProbe = "weft";

std::string shown_input(const Json &v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

weft::Pooling pooling_of(const std::string &name) {
  if (name == "mean") return weft::Pooling::mean;
  if (name == "cls") return weft::Pooling::cls;
  if (name == "last") return weft::Pooling::last;
  return weft::Pooling::model;
}

// The request's inputs, checked: texts, or token inputs (used as given).
struct EmbedInputs {
  std::vector<std::string> texts;
  std::vector<std::vector<weft::Token>> tokens;
  std::vector<std::uint32_t> n_tokens;  // each input's tokens as the embedder decodes them
  std::uint64_t total = 0;
  std::size_t size() const { return n_tokens.size(); }
};

// `name`: the input's place in the request ("input" for a lone one,
// "input[2]" in an array).
void check_input_length(const ServeContext &ctx, const std::string &name, std::uint64_t n) {
  if (n > ctx.embed_n_ctx)
    throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                   fmt::format("'{}' is {} tokens; this server embeds at most {} tokens per input (--embedding-ctx)",
                               name, n, ctx.embed_n_ctx),
                   "input");
}

void add_text_input(const ServeContext &ctx, EmbedInputs &in, std::string text, const std::string &name) {
  if (text.empty()) throw bad_param("input", fmt::format("'{}' must not be an empty string", name));
  const auto n = ctx.embed_model->tokenize(text).size() + ctx.embed_special_tokens;
  if (n == 0) throw bad_param("input", fmt::format("'{}' has no tokens", name));
  check_input_length(ctx, name, n);
  in.texts.push_back(std::move(text));
  in.n_tokens.push_back(static_cast<std::uint32_t>(n));
  in.total += n;
}

// An array of token ids of the embedding model (`name` as above).
void add_token_input(const ServeContext &ctx, EmbedInputs &in, const Json &ids, const std::string &name) {
  if (ids.empty()) throw bad_param("input", fmt::format("'{}' must not be an empty array", name));
  check_input_length(ctx, name, ids.size());
  const auto n_vocab = ctx.embed_model->n_vocab();
  std::vector<weft::Token> tokens;
  tokens.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer())
      throw bad_param("input", fmt::format("'{}[{}]' must be a token id (an integer), not {}", name, i, shown_input(ids[i])),
                      "invalid_type");
    const auto t = ids[i].get<std::int64_t>();
    if (t < 0 || t >= n_vocab)
      throw bad_param("input", fmt::format("'{}[{}]' is {}; token ids must be in [0, {})", name, i, t, n_vocab));
    tokens.push_back(static_cast<weft::Token>(t));
  }
  in.tokens.push_back(std::move(tokens));
  in.n_tokens.push_back(static_cast<std::uint32_t>(ids.size()));
  in.total += ids.size();
}

// OpenAI's `input`: a string, an array of strings, an array of token ids (one
// input) or an array of such arrays.
EmbedInputs parse_embed_input(const ServeContext &ctx, const Json &body) {
  const auto it = body.find("input");
  if (it == body.end() || it->is_null())
    throw bad_param("input", "'input' is required", "missing_required_parameter");
  EmbedInputs in;
  const Json &input = *it;
  if (input.is_string()) {
    add_text_input(ctx, in, input.get<std::string>(), "input");
    return in;
  }
  constexpr const char *kShapes =
      "a string, an array of strings, an array of token ids or an array of token-id arrays";
  if (!input.is_array())
    throw bad_param("input", fmt::format("'input' must be {}, not {}", kShapes, shown_input(input)), "invalid_type");
  if (input.empty()) throw bad_param("input", "'input' must not be an empty array");
  if (input[0].is_number_integer()) {
    add_token_input(ctx, in, input, "input");
    return in;
  }
  if (input.size() > kMaxEmbedInputs)
    throw bad_param("input", fmt::format("'input' has {} inputs; at most {} are allowed", input.size(), kMaxEmbedInputs));
  const bool texts = input[0].is_string();
  if (!texts && !input[0].is_array())
    throw bad_param("input", fmt::format("'input' must be {}; 'input[0]' is {}", kShapes, shown_input(input[0])),
                    "invalid_type");
  for (std::size_t i = 0; i < input.size(); ++i) {
    const std::string name = fmt::format("input[{}]", i);
    if (texts != input[i].is_string() || (!texts && !input[i].is_array()))
      throw bad_param("input",
                      fmt::format("'{}' must be {} as 'input[0]' is, not {}", name, texts ? "a string" : "an array of token ids",
                                  shown_input(input[i])),
                      "invalid_type");
    if (texts) {
      add_text_input(ctx, in, input[i].get<std::string>(), name);
    } else {
      add_token_input(ctx, in, input[i], name);
    }
  }
  return in;
}

const char kBase64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The floats as little-endian float32 bytes in standard base64, as OpenAI's
// encoding_format "base64".
void append_base64(std::string &out, const std::vector<float> &v) {
  std::vector<unsigned char> bytes(v.size() * 4);
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint32_t u = 0;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<unsigned char>(u >> (8 * b));
  }
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t n = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    out += kBase64Alphabet[(n >> 18) & 63];
    out += kBase64Alphabet[(n >> 12) & 63];
    out += kBase64Alphabet[(n >> 6) & 63];
    out += kBase64Alphabet[n & 63];
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const std::uint32_t n = (bytes[i] << 16) | (two ? bytes[i + 1] << 8 : 0);
    out += kBase64Alphabet[(n >> 18) & 63];
    out += kBase64Alphabet[(n >> 12) & 63];
    out += two ? kBase64Alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
}

// The reply, written directly: a float as 9 significant digits, which a
// reader's double (JavaScript's Number, Python's float) rounds back to the
// same float32, at half the length of nlohmann's double rendering.
std::string embeddings_reply(const ServeContext &ctx, const std::vector<std::vector<float>> &vectors, bool base64,
                       std::uint64_t tokens) {
  std::string out = R"({"object":"list","data":[)";
  out.reserve(64 + vectors.size() * (64 + (vectors.empty() ? 0 : vectors[0].size()) * 16));
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    if (i > 0) out += ',';
    fmt::format_to(std::back_inserter(out), R"({{"object":"embedding","index":{},"embedding":)", i);
    if (base64) {
      out += '"';
      append_base64(out, vectors[i]);
      out += '"';
    } else {
      out += '[';
      for (std::size_t j = 0; j < vectors[i].size(); ++j) {
        if (j > 0) out += ',';
        fmt::format_to(std::back_inserter(out), "{:.9g}", vectors[i][j]);
      }
      out += ']';
    }
    out += '}';
  }
  fmt::format_to(std::back_inserter(out), R"(],"model":{},"usage":{{"prompt_tokens":{},"total_tokens":{}}}}})",
                 Json(ctx.embed_model_name).dump(-1, ' ', false, Json::error_handler_t::replace), tokens, tokens);
  return out;
}

// Counts a request waiting for its vectors (shutdown waits for them).
struct ActiveEmbedding {
  std::atomic<int> &n;
  explicit ActiveEmbedding(std::atomic<int> &c) : n(c) { ++n; }
  ~ActiveEmbedding() { --n; }
  ActiveEmbedding(const ActiveEmbedding &) = delete;
  ActiveEmbedding &operator=(const ActiveEmbedding &) = delete;
};

void run_embeddings(ServeContext &ctx, const httplib::Request &req, httplib::Response &res) {
  if (!ctx.embed_model)
    throw ApiError(404, "not_found_error", "embeddings_disabled",
                   "embeddings are off on this server: start weft serve with --embedding-model PATH (an embedding "
                   "GGUF) or --embeddings (the chat model's own pooled states)");
  if (ctx.draining.load()) throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
  const Caller who = caller_of(ctx, req);
  const Json body = parse_body(req);
  const std::string model = required_string(body, "model");
  if (model != ctx.embed_model_name)
    throw ApiError(404, "invalid_request_error", "model_not_found",
                   fmt::format("The model `{}` does not exist; this server embeds with `{}`", model.substr(0, 100),
                               ctx.embed_model_name),
                   "model");
  bool base64 = false;
  if (const Json *f = optional_field(body, "encoding_format", Json::value_t::string, "a string")) {
    const auto v = f->get<std::string>();
    if (v != "float" && v != "base64")
      throw bad_param("encoding_format",
                      fmt::format("'encoding_format' is '{}'; expected float or base64", v.substr(0, 40)));
    base64 = v == "base64";
  }
  const auto n_embd = ctx.ex->embedding_size();
  if (const Json *d = optional_field(body, "dimensions", Json::value_t::number_integer, "an integer")) {
    if (d->get<std::int64_t>() != static_cast<std::int64_t>(n_embd))
      throw bad_param("dimensions",
                      fmt::format("'dimensions' is {}; `{}` gives vectors of {} floats only (weft does not shorten "
                                  "vectors; leave 'dimensions' out)",
                                  d->get<std::int64_t>(), ctx.embed_model_name, n_embd));
  }
  EmbedInputs in = parse_embed_input(ctx, body);

  ctx.key_limits.admit_tokens(who.key_id, KeyLimits::Clock::now());
  weft::Embedding e;
  try {
    e = in.texts.empty() ? ctx.ex->embed_tokens(std::move(in.tokens)) : ctx.ex->embed(in.texts);
  } catch (const weft::Error &err) {
    // Backstops: the checks above refuse these inputs first, with the request's own names.
    if (err.code() == weft::Errc::out_of_range)
      throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                     fmt::format("{} (this server's --embedding-ctx)", err.what()), "input");
    if (err.code() == weft::Errc::disposed)
      throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
    throw from_weft(err, "input");
  }
  ctx.key_limits.charge(who.key_id, in.total, KeyLimits::Clock::now());
  ActiveEmbedding active(ctx.active_embeddings);
  using std::chrono::steady_clock;
  const auto deadline = steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(
                                                  std::chrono::duration<double>(ctx.opt.request_timeout_s));
  // Bounded waits: between them, the deadline, shutdown and the client.
  while (!e.wait_for(std::chrono::milliseconds(50))) {
    if (ctx.cancel_all.load()) {
      e.cancel();
      throw ApiError(503, "server_error", "shutting_down", "the server is shutting down; the embedding was cancelled");
    }
    if (steady_clock::now() >= deadline) {
      e.cancel();
      ++ctx.counters.timeouts;
      throw ApiError(504, "timeout_error", "request_timeout", "the embedding ran past the server's --timeout");
    }
    if (req.is_connection_closed()) {
      e.cancel();
      ++ctx.counters.embedding_disconnects;
      // Nobody reads it; the status is what the request log counts.
      throw ApiError(499, "invalid_request_error", "client_disconnected", "the client went away");
    }
  }
  if (const auto err = e.error()) {
    if (err->code() == weft::Errc::disposed || err->code() == weft::Errc::cancelled)
      throw ApiError(503, "server_error", "shutting_down",
                     fmt::format("the embedding was cut short: {}", err->what()));
    throw ApiError(500, "server_error", "embedding_failed", err->what());
  }
  const auto vectors = e.vectors();
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    if (vectors[i].size() != n_embd)
      throw ApiError(500, "server_error", "embedding_failed",
                     fmt::format("input {} has a vector of {} floats, not {}", i, vectors[i].size(), n_embd));
    for (float x : vectors[i])
      if (!std::isfinite(x))
        throw ApiError(500, "server_error", "embedding_failed",
                       fmt::format("the model gave input {} a vector that is not finite", i));
  }
  res.status = 200;
  res.set_content(embeddings_reply(ctx, vectors, base64, in.total), "application/json");
  ++ctx.counters.embedding_requests;
  ctx.counters.embedding_inputs += in.size();
  ctx.counters.embedding_tokens += in.total;
}

}  // namespace

void check_embedding_options(const ServeOptions &o) {
  if (o.embedding_model.empty() && !o.embeddings && (o.embedding_ctx != 0 || !o.pooling.empty()))
    throw weft::Error(weft::Errc::invalid_argument,
                      "--embedding-ctx and --pooling need --embedding-model PATH or --embeddings");
}

std::optional<weft::EmbedderParams> embedder_params(ServeContext &ctx) {
  const auto &o = ctx.opt;
  check_embedding_options(o);
  if (o.embedding_model.empty() && !o.embeddings) return std::nullopt;
  weft::EmbedderParams p;
  if (!o.embedding_model.empty()) {
    p.model = weft::Model::load({.path = o.embedding_model});
    ctx.embed_model = p.model;
    ctx.embed_model_name = std::filesystem::path(o.embedding_model).stem().string();
  } else {
    ctx.embed_model = ctx.model;
    ctx.embed_model_name = ctx.model_name;
  }
  p.pooling = pooling_of(o.pooling);
  p.n_ctx = o.embedding_ctx != 0 ? o.embedding_ctx : 512;
  if (p.n_ctx > static_cast<std::uint32_t>(std::max(0, ctx.embed_model->n_ctx_train())))
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("--embedding-ctx {} is above the embedding model's n_ctx_train ({})", p.n_ctx,
                                  ctx.embed_model->n_ctx_train()));
  ctx.embed_n_ctx = p.n_ctx;
  return p;
}

void probe_embedder(ServeContext &ctx) {
  auto &ex = *ctx.ex;
  const auto raw = ctx.embed_model->tokenize(kEmbedProbe).size();
  const auto before = ex.stats().embed_tokens;
  auto e = ex.embed({kEmbedProbe});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!e.done() && std::chrono::steady_clock::now() < until) ex.step();
  if (!e.done() || e.error())
    throw weft::Error(weft::Errc::backend,
                      fmt::format("the embedder could not embed a probe text: {}",
                                  e.error() ? e.error()->what() : "not done in 60 s"));
  const auto decoded = ex.stats().embed_tokens - before;
  if (decoded < raw)
    throw weft::Error(weft::Errc::backend, fmt::format("the embedder decoded {} tokens of a text of {}", decoded, raw));
  ctx.embed_special_tokens = static_cast<std::uint32_t>(decoded - raw);
}

void add_embeddings_routes(httplib::Server &svr, ServeContext &ctx) {
  svr.Post("/v1/embeddings", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
             run_embeddings(ctx, req, res);
           }));
}

}  // namespace weft_cli::serve
