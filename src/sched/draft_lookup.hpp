// Prompt-lookup drafting: the tokens a conversation is likely to produce
// next, read from its own history (no second model). NPC replies copy names,
// items and prices from their prompt, and a model that repeats itself
// repeats its own words; both continue an earlier run of the same tokens.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "weft/types.hpp"

namespace weft::detail {

// Writes to `out` (at most out.size() tokens) what followed the latest
// earlier occurrence of the last n tokens of history + `last`, trying n from
// ngram_max down to ngram_min (a longer match predicts better). Returns how
// many it wrote: 0 when no run of ngram_min tokens occurs earlier. A match
// close to the end continues periodically (a loop goes on looping). Only the
// last `window` tokens of the history are searched (bounded work a step).
std::uint32_t lookup_draft(std::span<const Token> history, Token last, std::uint32_t ngram_min,
                           std::uint32_t ngram_max, std::span<Token> out, std::uint32_t window = 8192);

}  // namespace weft::detail
