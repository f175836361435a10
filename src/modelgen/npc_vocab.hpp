// A vocabulary fitted to the npc corpus, in llama.cpp's SPM format
// (tokenizer.ggml.model "llama"). Internal to weft_modelgen.
//
// llama.cpp's SPM tokenizer starts from single characters and merges an
// adjacent pair only when the concatenation is itself a token, so each corpus
// word ("▁merchant") comes with the chain of its prefixes ("▁m", "▁me", ...).
// The 256 byte tokens <0x00>..<0xFF> and <unk>, <s>, </s> keep every text
// representable. add_space_prefix is off: a prompt that starts a line
// ("Player: ...") then tokenizes as the same line did in the training text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct gguf_context;

namespace weft::detail {

struct FittedVocab {
  std::vector<std::string> tokens;  // "▁" (U+2581) stands for a space, as in SPM
  std::vector<float> scores;        // merge priority: higher merges first
  std::vector<std::int32_t> types;  // llama_token_type: 1 normal, 2 unknown, 3 control, 6 byte
};

// The npc corpus's vocabulary: same tokens on every call and platform (built
// from the grammar's tables and a fixed corpus sample). Thread-safe.
const FittedVocab &npc_fitted_vocab();

// Sets every tokenizer.* key of a llama-architecture GGUF for `v`.
void set_fitted_tokenizer(gguf_context *g, const FittedVocab &v);

}  // namespace weft::detail
