// The C ABI, part 3: conversations, sampler parameters, generations.
#include <fmt/format.h>

#include <cstddef>

#include <chrono>
#include <vector>

#include "capi/c_api_internal.hpp"

namespace weft::capi {
namespace {

static_assert(WEFT_FINISH_ERROR == static_cast<int>(FinishReason::error));
static_assert(WEFT_FINISH_CANCELLED == static_cast<int>(FinishReason::cancelled));

using Conv = weft::Conversation;

std::shared_ptr<weft::Generation> gen_of(const weft_generation *g) {
  return get<weft::Generation>(g, Kind::generation);
}

weft_sampler_params sampler_defaults() {
  const SamplerParams d;
  weft_sampler_params p{};
  p.struct_size = sizeof p;
  p.grammar = nullptr;
  p.grammar_root = nullptr;
  p.temperature = d.temperature;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.repeat_penalty = d.repeat_penalty;
  p.frequency_penalty = d.frequency_penalty;
  p.presence_penalty = d.presence_penalty;
  p.top_k = d.top_k;
  p.penalty_last_n = d.penalty_last_n;
  p.seed = d.seed;
  p.json_schema = nullptr;
  p.logit_bias = nullptr;
  p.n_logit_bias = 0;
  p.typical_p = d.typical_p;
  p.xtc_probability = d.xtc_probability;
  p.xtc_threshold = d.xtc_threshold;
  p.dry_multiplier = d.dry_multiplier;
  p.dry_base = d.dry_base;
  p.dry_allowed_length = d.dry_allowed_length;
  p.dry_penalty_last_n = d.dry_penalty_last_n;
  p.dry_sequence_breakers = nullptr;
  p.n_dry_sequence_breakers = 0;
  p.mirostat = d.mirostat;
  p.mirostat_tau = d.mirostat_tau;
  p.mirostat_eta = d.mirostat_eta;
  p.banned_strings = nullptr;
  p.n_banned_strings = 0;
  return p;
}

// Before `json_schema` was appended, before `logit_bias`, before
// `typical_p` and the stages after it, before `banned_strings`, and now.
const std::initializer_list<std::size_t> kSamplerParamsSizes = {
    offsetof(weft_sampler_params, json_schema), offsetof(weft_sampler_params, logit_bias),
    offsetof(weft_sampler_params, typical_p), offsetof(weft_sampler_params, banned_strings),
    sizeof(weft_sampler_params)};

SamplerParams to_sampler(const weft_sampler_params *in) {
  weft_sampler_params p = sampler_defaults();
  read_struct(in, "weft_sampler_params", p, kSamplerParamsSizes);
  SamplerParams s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.repeat_penalty = p.repeat_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.presence_penalty = p.presence_penalty;
  s.penalty_last_n = p.penalty_last_n;
  s.seed = p.seed;
  s.grammar = std::string(cstr_arg(p.grammar, "weft_sampler_params.grammar", true));
  if (p.grammar_root != nullptr) s.grammar_root = std::string(cstr_arg(p.grammar_root, "weft_sampler_params.grammar_root"));
  s.json_schema = std::string(cstr_arg(p.json_schema, "weft_sampler_params.json_schema", true));
  if (p.n_logit_bias > SamplerParams::kMaxLogitBias) {  // before reading them
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("weft_sampler_params.n_logit_bias = {}; at most {} are taken",
                                                p.n_logit_bias, SamplerParams::kMaxLogitBias));
  }
  if (p.n_logit_bias > 0) need(p.logit_bias, "weft_sampler_params.logit_bias");
  for (std::size_t i = 0; i < p.n_logit_bias; ++i) {
    s.logit_bias.push_back({p.logit_bias[i].token, p.logit_bias[i].bias});
  }
  s.typical_p = p.typical_p;
  s.xtc_probability = p.xtc_probability;
  s.xtc_threshold = p.xtc_threshold;
  s.dry_multiplier = p.dry_multiplier;
  s.dry_base = p.dry_base;
  s.dry_allowed_length = p.dry_allowed_length;
  s.dry_penalty_last_n = p.dry_penalty_last_n;
  if (p.dry_sequence_breakers != nullptr) {
    if (p.n_dry_sequence_breakers > SamplerParams::kMaxDryBreakers) {  // before reading them
      fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("weft_sampler_params.n_dry_sequence_breakers = {}; at most {} are taken",
                                                  p.n_dry_sequence_breakers, SamplerParams::kMaxDryBreakers));
    }
    s.dry_sequence_breakers.clear();
    for (std::size_t i = 0; i < p.n_dry_sequence_breakers; ++i) {
      const std::string name = fmt::format("weft_sampler_params.dry_sequence_breakers[{}]", i);
      s.dry_sequence_breakers.emplace_back(cstr_arg(p.dry_sequence_breakers[i], name.c_str()));
    }
  } else if (p.n_dry_sequence_breakers > 0) {
    need(p.dry_sequence_breakers, "weft_sampler_params.dry_sequence_breakers");
  }
  s.mirostat = p.mirostat;
  s.mirostat_tau = p.mirostat_tau;
  s.mirostat_eta = p.mirostat_eta;
  if (p.n_banned_strings > SamplerParams::kMaxBannedStrings) {  // before reading them
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("weft_sampler_params.n_banned_strings = {}; at most {} are taken",
                                                p.n_banned_strings, SamplerParams::kMaxBannedStrings));
  }
  if (p.n_banned_strings > 0) need(p.banned_strings, "weft_sampler_params.banned_strings");
  for (std::size_t i = 0; i < p.n_banned_strings; ++i) {
    const std::string name = fmt::format("weft_sampler_params.banned_strings[{}]", i);
    s.banned_strings.emplace_back(cstr_arg(p.banned_strings[i], name.c_str()));
  }
  return s;
}

weft_generate_params generate_defaults() {
  const GenerateParams d;
  weft_generate_params p{};
  p.struct_size = sizeof p;
  p.sampler = nullptr;
  p.stop = nullptr;
  p.n_stop = 0;
  p.on_token = nullptr;
  p.user_data = nullptr;
  p.user_data_free = nullptr;
  p.max_tokens = d.max_tokens;
  p.ignore_eos = d.ignore_eos ? 1 : 0;
  p.on_finish = nullptr;
  p.logprobs = d.logprobs ? 1 : 0;
  p.top_logprobs = d.top_logprobs;
  p.tools = nullptr;
  p.n_tools = 0;
  p.tool_choice = WEFT_TOOL_CHOICE_AUTO;
  p.tool_format = WEFT_TOOL_FORMAT_AUTO;
  p.speculative = nullptr;
  return p;
}

// Before `ignore_eos` and `on_finish` were appended, before `logprobs` and
// `top_logprobs`, before `tools`, before `tool_format`, before `speculative`, and now.
const std::initializer_list<std::size_t> kGenerateParamsSizes = {
    offsetof(weft_generate_params, ignore_eos), offsetof(weft_generate_params, logprobs),
    offsetof(weft_generate_params, tools),      offsetof(weft_generate_params, tool_format),
    offsetof(weft_generate_params, speculative), sizeof(weft_generate_params)};

}  // namespace
}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

// --- Lifetime --------------------------------------------------------------------

weft_status weft_conversation_create(weft_executor *executor, weft_conversation **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto ex = get<weft::Executor>(executor, Kind::executor);
    *out = make_handle<weft_conversation>(Kind::conversation, std::make_shared<Conv>(ex->create()));
  });
}

weft_status weft_conversation_free(weft_conversation *conversation) {
  return free_handle(__func__, conversation, Kind::conversation);
}

weft_status weft_conversation_dispose(weft_conversation *conversation) {
  return guarded(__func__, [&] { conv_of(conversation)->dispose(); });
}

weft_status weft_conversation_is_disposed(const weft_conversation *conversation, weft_bool *out) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    need(out, "out");
    *out = c->disposed() ? 1 : 0;
  });
}

weft_status weft_conversation_id(const weft_conversation *conversation, uint64_t *out) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    need(out, "out");
    *out = c->id();
  });
}

// --- Input and cache operations ---------------------------------------------------

weft_status weft_conversation_prompt_text(weft_conversation *conversation, const char *text, size_t len,
                                          uint32_t flags) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    const auto s = text_arg(text, len, "text");
    check_flags(flags, WEFT_TEXT_ADD_BOS | WEFT_TEXT_PARSE_SPECIAL, "flags");
    c->prompt(s, {.add_bos = (flags & WEFT_TEXT_ADD_BOS) != 0, .parse_special = (flags & WEFT_TEXT_PARSE_SPECIAL) != 0});
  });
}

weft_status weft_conversation_prompt_tokens(weft_conversation *conversation, const weft_token *tokens,
                                            size_t n_tokens) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    if (n_tokens > 0) need(tokens, "tokens");
    c->prompt(std::span<const weft::Token>(tokens, n_tokens));
  });
}

weft_status weft_conversation_fork(weft_conversation *conversation, weft_conversation **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto c = conv_of(conversation);
    *out = make_handle<weft_conversation>(Kind::conversation, std::make_shared<Conv>(c->fork()));
  });
}

weft_status weft_conversation_rewind(weft_conversation *conversation, uint32_t n) {
  return guarded(__func__, [&] { conv_of(conversation)->rewind(n); });
}

weft_status weft_conversation_remove(weft_conversation *conversation, uint32_t p0, uint32_t p1) {
  return guarded(__func__, [&] { conv_of(conversation)->remove(p0, p1); });
}

weft_status weft_conversation_shift_left(weft_conversation *conversation, uint32_t keep, uint32_t discard) {
  return guarded(__func__, [&] { conv_of(conversation)->shift_left(keep, discard); });
}

// --- Readers -----------------------------------------------------------------------

#define WEFT_CONV_COUNT(fn, method)                                        \
  weft_status fn(const weft_conversation *conversation, uint32_t *out) {   \
    return guarded(__func__, [&] {                                         \
      auto c = conv_of(conversation);                                      \
      need(out, "out");                                                    \
      *out = c->method();                                                  \
    });                                                                    \
  }
WEFT_CONV_COUNT(weft_conversation_n_tokens, n_tokens)
WEFT_CONV_COUNT(weft_conversation_n_decoded, n_decoded)
WEFT_CONV_COUNT(weft_conversation_n_queued, n_queued)
WEFT_CONV_COUNT(weft_conversation_n_cells, n_cells)
#undef WEFT_CONV_COUNT

weft_status weft_conversation_tokens(const weft_conversation *conversation, weft_token *tokens, size_t capacity,
                                     size_t *out_n) {
  return guarded(__func__, [&] {
    const auto toks = conv_of(conversation)->tokens();
    copy_array_out<weft::Token>(toks, tokens, capacity, out_n);
  });
}

weft_status weft_conversation_has_logits(const weft_conversation *conversation, weft_bool *out) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    need(out, "out");
    *out = c->has_logits() ? 1 : 0;
  });
}

weft_status weft_conversation_logits(const weft_conversation *conversation, float *logits, size_t capacity,
                                     size_t *out_n) {
  return guarded(__func__, [&] {
    const auto v = conv_of(conversation)->logits();
    copy_array_out<float>(v, logits, capacity, out_n);
  });
}

weft_status weft_conversation_sample(weft_conversation *conversation, weft_token *out) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    need(out, "out");
    *out = c->sample();
  });
}

weft_status weft_sampler_params_init(weft_sampler_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_sampler_params", sampler_defaults(), kSamplerParamsSizes);
  });
}

weft_status weft_conversation_set_sampler(weft_conversation *conversation, const weft_sampler_params *params) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    need(params, "params");
    c->set_sampler(to_sampler(params));
  });
}

weft_status weft_conversation_set_priority(weft_conversation *conversation, int32_t priority) {
  return guarded(__func__, [&] { conv_of(conversation)->set_priority(priority); });
}

weft_status weft_conversation_error(const weft_conversation *conversation, weft_status *out_code, char *buf,
                                    size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] {
    copy_error_out(conv_of(conversation)->error(), out_code, buf, capacity, out_len);
  });
}

weft_status weft_conversation_clear_error(weft_conversation *conversation) {
  return guarded(__func__, [&] { conv_of(conversation)->clear_error(); });
}

// --- Generation ------------------------------------------------------------------------

const char *weft_finish_reason_name(int32_t reason) {
  if (reason < WEFT_FINISH_RUNNING || reason > WEFT_FINISH_ERROR) return "unknown";
  return weft::finish_reason_name(static_cast<weft::FinishReason>(reason));
}

weft_status weft_generate_params_init(weft_generate_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_generate_params", generate_defaults(), kGenerateParamsSizes);
  });
}

weft_status weft_conversation_generate(weft_conversation *conversation, const weft_generate_params *params,
                                       weft_generation **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto c = conv_of(conversation);
    weft_generate_params p = generate_defaults();
    if (params != nullptr) read_struct(params, "weft_generate_params", p, kGenerateParamsSizes);
    weft::GenerateParams gp;
    gp.max_tokens = p.max_tokens;
    gp.ignore_eos = p.ignore_eos != 0;
    gp.logprobs = p.logprobs != 0;
    gp.top_logprobs = p.top_logprobs;
    gp.tools = to_tools(p.tools, p.n_tools, "weft_generate_params.tools");
    if (p.tool_choice != WEFT_TOOL_CHOICE_AUTO && p.tool_choice != WEFT_TOOL_CHOICE_REQUIRED) {
      fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("weft_generate_params.tool_choice = {} is not a weft_tool_choice",
                                                  p.tool_choice));
    }
    gp.tool_choice = p.tool_choice == WEFT_TOOL_CHOICE_REQUIRED ? weft::ToolChoice::required : weft::ToolChoice::automatic;
    gp.tool_format = to_tool_format(p.tool_format, "weft_generate_params.tool_format");
    if (p.sampler != nullptr) gp.sampler = to_sampler(p.sampler);
    if (p.speculative != nullptr) gp.speculative = speculative_from_c(p.speculative, "weft_generate_params.speculative");
    if (p.n_stop > 0) need(p.stop, "weft_generate_params.stop");
    for (std::size_t i = 0; i < p.n_stop; ++i) {
      const std::string name = fmt::format("weft_generate_params.stop[{}]", i);
      gp.stop.emplace_back(cstr_arg(p.stop[i], name.c_str()));
    }
    std::shared_ptr<UserData> ud;
    if (p.on_token != nullptr || p.on_finish != nullptr) ud = std::make_shared<UserData>(p.user_data, p.user_data_free);
    if (p.on_token != nullptr) {
      gp.on_token = [cb = p.on_token, ud](weft::Token token, std::string_view text) {
        thread_local std::string buf;  // the callback gets NUL-terminated text
        buf.assign(text);
        cb(token, buf.c_str(), buf.size(), ud->data());
      };
    }
    if (p.on_finish != nullptr) {
      gp.on_finish = [cb = p.on_finish, ud](const weft::GenerationResult &r) {
        cb(static_cast<std::int32_t>(r.reason), ud->data());
      };
    }
    auto gen = std::make_shared<weft::Generation>(c->generate(gp));
    *out = make_handle<weft_generation>(Kind::generation, std::move(gen));
    if (ud) ud->arm();
  });
}

weft_status weft_conversation_generation(const weft_conversation *conversation, weft_generation **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto g = conv_of(conversation)->generation();
    if (g) *out = make_handle<weft_generation>(Kind::generation, std::make_shared<weft::Generation>(*g));
  });
}

weft_status weft_generation_free(weft_generation *generation) {
  return free_handle(__func__, generation, Kind::generation);
}

weft_status weft_generation_is_done(const weft_generation *generation, weft_bool *out) {
  return guarded(__func__, [&] {
    auto g = gen_of(generation);
    need(out, "out");
    *out = g->done() ? 1 : 0;
  });
}

weft_status weft_generation_reason(const weft_generation *generation, int32_t *out) {
  return guarded(__func__, [&] {
    auto g = gen_of(generation);
    need(out, "out");
    *out = static_cast<int32_t>(g->reason());
  });
}

weft_status weft_generation_n_tokens(const weft_generation *generation, size_t *out) {
  return guarded(__func__, [&] {
    auto g = gen_of(generation);
    need(out, "out");
    *out = g->n_tokens();
  });
}

weft_status weft_generation_text(const weft_generation *generation, char *buf, size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] { copy_text_out(gen_of(generation)->text(), buf, capacity, out_len); });
}

weft_status weft_generation_tokens(const weft_generation *generation, weft_token *tokens, size_t capacity,
                                   size_t *out_n) {
  return guarded(__func__, [&] {
    const auto r = gen_of(generation)->result();
    copy_array_out<weft::Token>(r.tokens, tokens, capacity, out_n);
  });
}

weft_status weft_generation_logprob(const weft_generation *generation, size_t index, weft_token_logprob *out,
                                    weft_token_logprob *top, size_t top_capacity, size_t *out_n_top) {
  return guarded(__func__, [&] {
    const auto r = gen_of(generation)->result();
    need(out, "out");
    if (index >= r.logprobs.size()) {
      fail(WEFT_ERR_OUT_OF_RANGE,
           fmt::format("index {} is past the generation's {} logprob records", index, r.logprobs.size()));
    }
    const weft::TokenLogprob &e = r.logprobs[index];
    std::vector<weft_token_logprob> alts;
    for (const auto &t : e.top) alts.push_back({t.token, t.logprob});
    copy_array_out<weft_token_logprob>(alts, top, top_capacity, out_n_top);
    *out = {e.token, e.logprob};
  });
}

weft_status weft_generation_tool_call(const weft_generation *generation, weft_bool *out_has, char *name,
                                      size_t name_capacity, size_t *name_len, char *arguments,
                                      size_t arguments_capacity, size_t *arguments_len) {
  return guarded(__func__, [&] {
    const auto r = gen_of(generation)->result();
    need(out_has, "out_has");
    *out_has = 0;
    if (!r.tool_call) return;
    need(name_len, "name_len");
    need(arguments_len, "arguments_len");
    // Both lengths known even when the first buffer is too small.
    *name_len = r.tool_call->name.size();
    *arguments_len = r.tool_call->arguments.size();
    copy_text_out(r.tool_call->name, name, name_capacity, name_len);
    copy_text_out(r.tool_call->arguments, arguments, arguments_capacity, arguments_len);
    *out_has = 1;
  });
}

weft_status weft_generation_wait(const weft_generation *generation, uint32_t timeout_ms, weft_bool *out_done) {
  return guarded(__func__, [&] {
    auto g = gen_of(generation);
    need(out_done, "out_done");
    *out_done = g->wait_for(std::chrono::milliseconds(timeout_ms)) ? 1 : 0;
  });
}

weft_status weft_generation_cancel(weft_generation *generation) {
  return guarded(__func__, [&] { gen_of(generation)->cancel(); });
}

weft_status weft_generation_error(const weft_generation *generation, weft_status *out_code, char *buf,
                                  size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] {
    copy_error_out(gen_of(generation)->result().error, out_code, buf, capacity, out_len);
  });
}

}  // extern "C"
