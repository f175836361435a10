// The sampler's llama.cpp chain, built from SamplerParams, and the stages
// weft runs itself between that chain and its draw — XTC and Mirostat 2.0 —
// so that their randomness comes from the sampler's one serialisable RNG
// (llama.cpp's own keep engines a state file cannot hold). Internal.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/sampling.hpp"

struct llama_sampler;
struct llama_token_data_array;
struct llama_vocab;

namespace weft::detail {

// splitmix64: one 64-bit word of state, identical everywhere.
std::uint64_t next_u64(std::uint64_t &s);
// A uniform double in [0, 1) from the next word.
double next_unit(std::uint64_t &s);

// `s`, or Errc::backend naming `what` when llama.cpp could not make it (null).
llama_sampler *checked(llama_sampler *s, const char *what);

// The chain's stages and where weft's own go. `last_n` and `dry_n` are the
// penalty and DRY windows with -1 already resolved to the context size.
struct ChainPlan {
  bool dry = false;        // DRY is at index 1 (the penalties at 0)
  bool xtc = false;        // weft's XTC runs after the chain, then `temp`
  bool mirostat = false;   // weft's Mirostat 2.0 selects after the chain
  bool greedy = false;     // the chain ends in llama.cpp's greedy stage
};
ChainPlan plan_chain(const SamplerParams &p, std::int32_t dry_n);

// penalties [-> DRY] -> greedy (temperature 0); or -> temperature
// (mirostat); or -> top_k -> typical -> top_p -> min_p [-> temperature,
// unless XTC takes it to *temp]. Stages that are off are left out. Throws
// Errc::backend when llama.cpp cannot make one; frees what it made then.
llama_sampler *build_chain(const llama_vocab *vocab, std::int32_t n_vocab, const SamplerParams &p, const ChainPlan &plan,
                           std::int32_t last_n, std::int32_t dry_n, llama_sampler **temp);

// XTC over what the chain left (before temperature): with probability
// `probability` (one draw from `rng` every call), the tokens whose
// probability is >= `threshold`, all but the least likely of them, are
// removed. Sorts `arr` by logit (ties by id) when it acts.
void apply_xtc(llama_token_data_array &arr, float probability, float threshold, std::uint64_t &rng);

// Mirostat 2.0 over what the chain left (after temperature): tokens whose
// surprise -log2(p) exceeds `mu` go (the most likely stays; only the kept
// ones are sorted, by logit, ties by id), one is drawn
// from the rest renormalised, and mu moves by eta * (tau - its surprise).
// Returns the index drawn in `arr`.
std::size_t mirostat_select(llama_token_data_array &arr, float tau, float eta, float &mu, std::uint64_t &rng);

}  // namespace weft::detail
