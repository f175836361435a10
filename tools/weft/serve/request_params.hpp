// weft serve: the generation fields of a request (OpenAI's names), checked
// and turned into weft::GenerateParams. Every refusal is a 400 naming the
// field, the value and the allowed range.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "serve/api_error.hpp"
#include "weft/generation.hpp"
#include "weft/model.hpp"

namespace weft_cli::serve {

struct GenerationRequest {
  weft::GenerateParams params;  // max_tokens, sampler, stop; on_token unset
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
  // Extensions other servers share (llama-server, vLLM): go on after an
  // end-of-generation token until max_tokens; a usage object in every
  // streamed chunk (stream_options.continuous_usage_stats), so a client can
  // count tokens whose text is held back or empty.
  bool ignore_eos = false;
  bool continuous_usage = false;
};

// Reads max_tokens (or max_completion_tokens), temperature, top_p, seed,
// stop, n (only 1), frequency_penalty, presence_penalty, response_format, logit_bias,
// stream, stream_options, ignore_eos, speculative (weft's: false opts out of --speculative), llama-server's top_k, min_p,
// repeat_penalty, repeat_last_n, typical_p, xtc_*, dry_* and mirostat*, and logprobs (chat: a boolean with
// top_logprobs in [0, 20]; completions: an integer in [0, 20]). `max_tokens_limit` is the server's cap;
// `room` the context left after the prompt (the default max_tokens).
// `n_vocab` bounds logit_bias's token ids.
GenerationRequest parse_generation(const Json &body, std::uint32_t max_tokens_limit, std::uint32_t room,
                                   std::int32_t n_vocab);

// Required string field.
std::string required_string(const Json &body, std::string_view key);
// Optional field of a given JSON type; throws 400 when present with another.
const Json *optional_field(const Json &body, std::string_view key, Json::value_t type, const char *type_name);

}  // namespace weft_cli::serve
