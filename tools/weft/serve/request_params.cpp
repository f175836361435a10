// weft serve: request fields -> weft::GenerateParams.
#include "serve/request_params.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <random>

#include "weft/json_schema.hpp"

namespace weft_cli::serve {

namespace {

std::string shown(const Json &v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

double number_in(const Json &body, std::string_view key, double lo, double hi, double dflt, bool lo_open = false) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return dflt;
  if (!it->is_number()) throw bad_param(key, fmt::format("'{}' must be a number, not {}", key, shown(*it)), "invalid_type");
  const double v = it->get<double>();
  if (!std::isfinite(v) || (lo_open ? v <= lo : v < lo) || v > hi)
    throw bad_param(key, fmt::format("'{}' is {}; it must be in {}{}, {}]", key, v, lo_open ? "(" : "[", lo, hi));
  return v;
}

std::int64_t integer_in(const Json &body, std::string_view key, std::int64_t lo, std::int64_t hi, std::int64_t dflt) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return dflt;
  if (!it->is_number_integer())
    throw bad_param(key, fmt::format("'{}' must be an integer, not {}", key, shown(*it)), "invalid_type");
  const auto v = it->get<std::int64_t>();
  if (v < lo || v > hi) throw bad_param(key, fmt::format("'{}' is {}; it must be in [{}, {}]", key, v, lo, hi));
  return v;
}

bool boolean(const Json &body, std::string_view key, bool dflt) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) throw bad_param(key, fmt::format("'{}' must be true or false, not {}", key, shown(*it)), "invalid_type");
  return it->get<bool>();
}

std::vector<std::string> stops(const Json &body) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  std::vector<std::string> out;
  if (it->is_string()) {
    out.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->size() > 4) throw bad_param("stop", fmt::format("'stop' has {} strings; at most 4 are allowed", it->size()));
    for (const auto &s : *it) {
      if (!s.is_string()) throw bad_param("stop", fmt::format("'stop' must hold strings, not {}", shown(s)), "invalid_type");
      out.push_back(s.get<std::string>());
    }
  } else {
    throw bad_param("stop", fmt::format("'stop' must be a string or an array of strings, not {}", shown(*it)), "invalid_type");
  }
  for (const auto &s : out)
    if (s.empty()) throw bad_param("stop", "'stop' strings must not be empty");
  return out;
}

// response_format's schema as JSON text for SamplerParams::json_schema (empty:
// none), converted here once so a schema the converter refuses is this
// request's 400; the sampler's own conversion then hits libweft's cache.
std::string json_schema_for(const Json &body) {
  const auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
    throw bad_param("response_format", "'response_format' must be an object with a string 'type'", "invalid_type");
  const auto type = (*it)["type"].get<std::string>();
  Json schema;
  if (type == "text") return {};
  if (type == "json_object") {
    schema = Json{{"type", "object"}};
  } else if (type == "json_schema") {
    const auto js = it->find("json_schema");
    if (js == it->end() || !js->is_object() || !js->contains("schema") || !(*js)["schema"].is_object())
      throw bad_param("response_format", "'response_format.json_schema.schema' must be a JSON schema object", "invalid_type");
    schema = (*js)["schema"];
  } else {
    throw bad_param("response_format",
                    fmt::format("'response_format.type' is '{}'; expected text, json_object or json_schema", type));
  }
  std::string text = schema.dump();
  try {
    weft::json_schema_to_grammar(text);
    return text;
  } catch (const std::exception &e) {
    throw bad_param("response_format", fmt::format("the JSON schema cannot be turned into a grammar: {}", e.what()),
                    "unsupported_schema");
  }
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}; -100 bans the
// token (SamplerParams's -inf), as OpenAI documents it.
std::vector<weft::LogitBias> logit_bias(const Json &body, std::int32_t n_vocab) {
  const Json *lb = optional_field(body, "logit_bias", Json::value_t::object, "an object of token ids to numbers");
  if (lb == nullptr) return {};
  if (lb->size() > weft::SamplerParams::kMaxLogitBias) {
    throw bad_param("logit_bias", fmt::format("'logit_bias' has {} entries; at most {} are allowed", lb->size(),
                                              weft::SamplerParams::kMaxLogitBias));
  }
  std::vector<weft::LogitBias> out;
  for (const auto &[key, v] : lb->items()) {
    std::int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || ec != std::errc() || end != key.data() + key.size() || id < 0 || id >= n_vocab) {
      throw bad_param("logit_bias", fmt::format("'logit_bias' key '{}' is not a token id in [0, {})", key, n_vocab));
    }
    if (!v.is_number()) {
      throw bad_param("logit_bias", fmt::format("'logit_bias[\"{}\"]' must be a number, not {}", key, shown(v)),
                      "invalid_type");
    }
    const double b = v.get<double>();
    if (!(b >= -100 && b <= 100)) {
      throw bad_param("logit_bias", fmt::format("'logit_bias[\"{}\"]' is {}; it must be in [-100, 100]", key, b));
    }
    out.push_back({static_cast<weft::Token>(id), b == -100 ? -INFINITY : static_cast<float>(b)});
  }
  return out;
}

// body[name]: an array of at most `max` strings of 1 to `max_bytes` bytes;
// nullopt when absent or null.
std::optional<std::vector<std::string>> strings_in(const Json &body, const char *name, std::size_t max,
                                                  std::size_t max_bytes) {
  const Json *b = optional_field(body, name, Json::value_t::array, "an array of strings");
  if (b == nullptr) return std::nullopt;
  std::vector<std::string> out;
  if (b->size() > max) {
    throw bad_param(name, fmt::format("'{}' has {} strings; at most {} are allowed", name, b->size(), max));
  }
  for (const auto &v : *b) {
    if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > max_bytes) {
      throw bad_param(name, fmt::format("'{}' must hold strings of 1 to {} bytes, not {}", name, max_bytes, shown(v)));
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

// llama-server's sampling fields beyond OpenAI's, same names, same ranges
// as SamplerParams (the library names the field again if it refuses).
void read_llama_sampling(const Json &body, weft::SamplerParams &s) {
  const weft::SamplerParams d;
  s.top_k = static_cast<std::int32_t>(integer_in(body, "top_k", 0, INT32_MAX, d.top_k));
  s.min_p = static_cast<float>(number_in(body, "min_p", 0, 1, d.min_p));
  s.repeat_penalty = static_cast<float>(number_in(body, "repeat_penalty", 0, 1e6, d.repeat_penalty, true));
  s.penalty_last_n = static_cast<std::int32_t>(integer_in(body, "repeat_last_n", -1, INT32_MAX, d.penalty_last_n));
  s.typical_p = static_cast<float>(number_in(body, "typical_p", 0, 1, d.typical_p, true));
  s.xtc_probability = static_cast<float>(number_in(body, "xtc_probability", 0, 1, d.xtc_probability));
  s.xtc_threshold = static_cast<float>(number_in(body, "xtc_threshold", 0, 1, d.xtc_threshold, true));
  s.dry_multiplier = static_cast<float>(number_in(body, "dry_multiplier", 0, 1e6, d.dry_multiplier));
  s.dry_base = static_cast<float>(number_in(body, "dry_base", 1, 1e6, d.dry_base));
  s.dry_allowed_length = static_cast<std::int32_t>(integer_in(body, "dry_allowed_length", 1, INT32_MAX, d.dry_allowed_length));
  s.dry_penalty_last_n = static_cast<std::int32_t>(integer_in(body, "dry_penalty_last_n", -1, INT32_MAX, d.dry_penalty_last_n));
  if (auto b = strings_in(body, "dry_sequence_breakers", weft::SamplerParams::kMaxDryBreakers,
                          weft::SamplerParams::kMaxDryBreakerBytes)) {
    s.dry_sequence_breakers = std::move(*b);
  }
  // TabbyAPI's name: text the reply never contains (a weft extension to llama-server's fields).
  if (auto b = strings_in(body, "banned_strings", weft::SamplerParams::kMaxBannedStrings,
                          weft::SamplerParams::kMaxBannedStringBytes)) {
    s.banned_strings = std::move(*b);
  }
  s.mirostat = static_cast<std::int32_t>(integer_in(body, "mirostat", 0, 2, d.mirostat));
  if (s.mirostat == 1) throw bad_param("mirostat", "'mirostat' is 1; weft offers 0 (off) and 2 (Mirostat 2.0)");
  s.mirostat_tau = static_cast<float>(number_in(body, "mirostat_tau", 0, 1e6, d.mirostat_tau, true));
  s.mirostat_eta = static_cast<float>(number_in(body, "mirostat_eta", 0, 1, d.mirostat_eta, true));
}

// Chat's logprobs (a boolean) with top_logprobs in [0, 20]; the legacy
// completions' logprobs (an integer: how many alternatives) likewise.
void read_logprobs(const Json &body, weft::GenerateParams &p) {
  const auto it = body.find("logprobs");
  const auto max = static_cast<std::int64_t>(weft::GenerateParams::kMaxTopLogprobs);
  if (it != body.end() && it->is_number_integer()) {
    p.logprobs = true;
    p.top_logprobs = static_cast<std::uint32_t>(integer_in(body, "logprobs", 0, max, 0));
    return;
  }
  p.logprobs = boolean(body, "logprobs", false);
  if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
    if (!p.logprobs) throw bad_param("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    p.top_logprobs = static_cast<std::uint32_t>(integer_in(body, "top_logprobs", 0, max, 0));
  }
}

}  // namespace

std::string required_string(const Json &body, std::string_view key) {
  const auto it = body.find(key);
  if (it == body.end()) throw bad_param(key, fmt::format("'{}' is required", key), "missing_required_parameter");
  if (!it->is_string()) throw bad_param(key, fmt::format("'{}' must be a string, not {}", key, shown(*it)), "invalid_type");
  return it->get<std::string>();
}

const Json *optional_field(const Json &body, std::string_view key, Json::value_t type, const char *type_name) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  const bool ok = it->type() == type || (type == Json::value_t::number_integer && it->is_number_integer());
  if (!ok) throw bad_param(key, fmt::format("'{}' must be {}, not {}", key, type_name, shown(*it)), "invalid_type");
  return &*it;
}

GenerationRequest parse_generation(const Json &body, std::uint32_t max_tokens_limit, std::uint32_t room,
                                   std::int32_t n_vocab) {
  GenerationRequest out;
  const char *max_key = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const auto dflt = std::max<std::uint32_t>(1, std::min(max_tokens_limit, room));
  const auto it = body.find(max_key);
  if (it != body.end() && it->is_number_integer() && it->get<std::int64_t>() > max_tokens_limit)
    throw ApiError(400, "invalid_request_error", "max_tokens_exceeded",
                   fmt::format("'{}' is {}; this server allows at most {} (--max-tokens)", max_key,
                               it->get<std::int64_t>(), max_tokens_limit),
                   max_key);
  out.params.max_tokens = static_cast<std::uint32_t>(integer_in(body, max_key, 1, max_tokens_limit, dflt));
  const auto n = integer_in(body, "n", 1, 1, 1);
  (void)n;  // one choice per request: weft forks are the way to many
  weft::SamplerParams s;
  s.temperature = static_cast<float>(number_in(body, "temperature", 0, 2, 1.0));
  s.top_p = static_cast<float>(number_in(body, "top_p", 0, 1, 1.0, /*lo_open=*/true));
  s.frequency_penalty = static_cast<float>(number_in(body, "frequency_penalty", -2, 2, 0));
  s.presence_penalty = static_cast<float>(number_in(body, "presence_penalty", -2, 2, 0));
  // Without a seed each request draws one, as OpenAI's sampling is unseeded.
  const auto seed = integer_in(body, "seed", INT64_MIN, INT64_MAX, -1);
  s.seed = body.contains("seed") && !body["seed"].is_null() ? static_cast<std::uint32_t>(seed)
                                                             : static_cast<std::uint32_t>(std::random_device{}());
  s.json_schema = json_schema_for(body);
  s.logit_bias = logit_bias(body, n_vocab);
  read_llama_sampling(body, s);
  out.params.sampler = s;
  out.params.stop = stops(body);
  out.stream = boolean(body, "stream", false);
  if (const Json *so = optional_field(body, "stream_options", Json::value_t::object, "an object")) {
    out.include_usage = boolean(*so, "include_usage", false);
    out.continuous_usage = boolean(*so, "continuous_usage_stats", false);
  }
  out.ignore_eos = boolean(body, "ignore_eos", false);
  // weft's own: false opts this request out of --speculative (the tokens
  // are the same either way; drafts only change how fast they come).
  if (!boolean(body, "speculative", true)) out.params.speculative = weft::SpeculativeParams{};
  read_logprobs(body, out.params);
  return out;
}

}  // namespace weft_cli::serve
