// weft/sampling.hpp — how a conversation picks its next token.
//
// SamplerParams is a plain value: copy it freely, from any thread. A
// conversation owns one sampler built from it (llama.cpp sampler chain), whose
// state (RNG, penalty history, grammar position) travels with the
// conversation through fork, save and load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/types.hpp"

namespace weft {

// One entry of SamplerParams::logit_bias: `bias` is added to `token`'s logit.
struct LogitBias {
  Token token = 0;
  float bias = 0.0f;
};

struct SamplerParams {
  // 0 = greedy (argmax, deterministic). > 0 = sample at this temperature.
  // Default 0. Must be finite and >= 0.
  float temperature = 0.0f;
  // Keep only the k most likely tokens; 0 = off. Default 0. Must be >= 0.
  int top_k = 0;
  // Nucleus sampling: keep the smallest set with probability >= top_p;
  // 1 = off. Default 1. Must be in (0, 1].
  float top_p = 1.0f;
  // Drop tokens with probability < min_p * p(best); 0 = off. Default 0.
  // Must be in [0, 1].
  float min_p = 0.0f;
  // Repetition penalty over the last `penalty_last_n` tokens; 1 = off.
  // Default 1. Must be > 0.
  float repeat_penalty = 1.0f;
  // OpenAI-style frequency and presence penalties; 0 = off. Default 0.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // How many recent tokens the penalties look at; 0 = none, -1 = the whole
  // context. Default 64. They are the tokens this sampler sampled (across
  // generations, for the conversation's own), not the prompt.
  int penalty_last_n = 64;
  // RNG seed for temperature > 0; the same seed gives the same choices.
  // Default 0.
  std::uint32_t seed = 0;
  // A GBNF grammar that every sampled token must keep valid (e.g. JSON);
  // empty = none. Default empty. An unparsable grammar is refused with
  // Errc::invalid_argument.
  std::string grammar;
  // The grammar's start rule. Default "root". Applies to `grammar` only.
  std::string grammar_root = "root";
  // A JSON Schema (its JSON text); when set, every sampled token must keep
  // the output a prefix of JSON that matches it, through the grammar
  // weft::json_schema_to_grammar(json_schema) gives (weft/json_schema.hpp:
  // the keywords supported, the cache). Empty = none. Default empty. A schema
  // that does not convert is refused with Errc::invalid_argument naming where
  // it failed; setting both `grammar` and `json_schema` is
  // Errc::invalid_argument.
  std::string json_schema;
  // Added to the listed tokens' logits before any other sampling step (the
  // greedy argmax, the top-k selection, the penalties, the grammar, the
  // chain); -INFINITY bans a token. The sampler works on its own copy: the
  // logits a conversation exposes (Conversation::logits()) stay as the model
  // gave them. Empty = none. Default empty. At most kMaxLogitBias entries;
  // a NaN or +inf bias, a token listed twice or more entries are
  // Errc::invalid_argument; a token outside the vocabulary is
  // Errc::out_of_range when the sampler is set on a conversation.
  std::vector<LogitBias> logit_bias;
  static constexpr std::size_t kMaxLogitBias = 1024;
  // Text a generation never writes: a token whose text would complete one of
  // these strings, counting the generation's text before it, is never drawn
  // (its logit counts as -inf, after logit_bias and beside the grammar). The
  // strings are matched byte for byte against the generated text (the
  // prompt does not count); a string may span several tokens. weft does not
  // backtrack: the text swerves at the token that would complete a string.
  // A generation with the conversation's own sampler starts its text afresh;
  // Conversation::sample() continues the sampler's. Empty = none. Default
  // empty. At most kMaxBannedStrings, each 1 to kMaxBannedStringBytes
  // bytes, else Errc::invalid_argument. Saved as state version 12.
  std::vector<std::string> banned_strings;
  static constexpr std::size_t kMaxBannedStrings = 256;
  static constexpr std::size_t kMaxBannedStringBytes = 256;

  // The stages below follow llama.cpp's (llama-server's names and order:
  // penalties -> DRY -> top_k -> typical_p -> top_p -> min_p -> XTC ->
  // temperature, or penalties -> DRY -> temperature -> mirostat). Each is off
  // by default; a sampler that uses any is saved as state version 10.

  // Locally typical sampling: keep the tokens whose surprise is closest to
  // the distribution's entropy, up to this much probability; 1 = off.
  // Default 1. Must be in (0, 1]. At a temperature only.
  float typical_p = 1.0f;
  // XTC ("exclude top choices"): with this probability, per token, drop
  // every token whose probability is at least xtc_threshold except the
  // least likely of them; 0 = off. Default 0. Must be in [0, 1]. At a
  // temperature only; the chance is drawn from the sampler's own seeded RNG.
  float xtc_probability = 0.0f;
  // Default 0.1. Must be in (0, 1]; above 0.5 nothing is ever dropped.
  float xtc_threshold = 0.1f;
  // DRY ("don't repeat yourself"): a token that would extend a run of
  // tokens repeating one already in the last dry_penalty_last_n tokens by
  // more than dry_allowed_length loses dry_multiplier *
  // dry_base^(run - dry_allowed_length) from its logit; 0 = off. Default 0.
  // Must be >= 0. Greedy too. As for the penalties, only what the sampler
  // sampled counts, not the prompt (llama-server feeds it the prompt too).
  float dry_multiplier = 0.0f;
  // Default 1.75. Must be >= 1.
  float dry_base = 1.75f;
  // Default 2. Must be >= 1.
  std::int32_t dry_allowed_length = 2;
  // How far back DRY looks; -1 = the whole context, 0 = off. Default -1.
  // Must be >= -1.
  std::int32_t dry_penalty_last_n = -1;
  // Text that ends a run DRY tracks (a newline, a speaker's colon...).
  // Default {"\n", ":", "\"", "*"}. At most kMaxDryBreakers, each non-empty
  // and at most kMaxDryBreakerBytes bytes.
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
  static constexpr std::size_t kMaxDryBreakers = 64;
  static constexpr std::size_t kMaxDryBreakerBytes = 40;
  // Mirostat 2.0: 0 = off, 2 = on (1.0 is not offered). It keeps the
  // surprise of the text near mirostat_tau, replacing top_k, typical_p,
  // top_p, min_p and XTC. Default 0. At a temperature only.
  std::int32_t mirostat = 0;
  // Target surprise (bits). Default 5. Must be > 0 and finite.
  float mirostat_tau = 5.0f;
  // Learning rate. Default 0.1. Must be in (0, 1].
  float mirostat_eta = 0.1f;
};

}  // namespace weft
