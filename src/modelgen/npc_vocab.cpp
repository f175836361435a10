// The npc corpus's fitted SPM vocabulary (npc_vocab.hpp).
#include "modelgen/npc_vocab.hpp"

#include <gguf.h>

#include <fmt/format.h>

#include <cctype>
#include <set>

#include "modelgen/npc_grammar.hpp"
#include "weft/train.hpp"

namespace weft::detail {
namespace {

constexpr const char *kSpace = "\xe2\x96\x81";  // U+2581, SPM's escaped space

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '\''; }

// Adds every run of word characters in `text` to `words`, with SPM's space
// mark when a space precedes it: "Player: I will" gives "Player", "▁I", "▁will".
void collect(const std::string &text, std::set<std::string> &words) {
  for (std::size_t i = 0; i < text.size();) {
    if (!word_char(text[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && word_char(text[j])) ++j;
    const bool spaced = i > 0 && text[i - 1] == ' ';
    words.insert((spaced ? std::string(kSpace) : std::string()) + text.substr(i, j - i));
    i = j;
  }
}

FittedVocab build() {
  std::set<std::string> words;
  // A fixed sample covers every sentence shape many times over; the tables
  // and numbers are added whole, so no rare slot value is left out.
  collect(make_npc_corpus({.seed = 0, .target_bytes = 400'000}), words);
  auto both = [&](const std::string &s) {
    collect(s, words);
    collect(" " + s, words);
  };
  for (const auto &r : npc::roles()) {
    both(r.title);
    both(r.place);
    for (const auto &g : r.goods) both(g.name);
    for (const char *w : r.work) both(w);
  }
  for (const auto *list : {&npc::kNames}) for (const char *n : *list) both(n);
  for (const char *p : npc::kPlaces) both(p);
  for (const char *c : npc::kCreatures) both(c);
  for (const char *t : npc::kTimes) both(t);
  for (const char *l : npc::kLost) both(l);
  for (int n = 0; n <= 100; ++n) both(std::to_string(n));

  FittedVocab v;
  auto add = [&](std::string t, std::int32_t type) {
    v.tokens.push_back(std::move(t));
    v.types.push_back(type);
    v.scores.push_back(-static_cast<float>(v.tokens.size()));
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 6);
  // Single characters: the space mark and printable ASCII, so any English
  // text tokenizes into characters at worst, not bytes.
  add(kSpace, 1);
  for (char c = '!'; c <= '~'; ++c) add(std::string(1, c), 1);
  // Each word's prefix chain, shortest first; a set keeps shared prefixes once.
  std::set<std::string> seen(v.tokens.begin(), v.tokens.end());
  for (const auto &w : words) {
    // Prefixes end on character boundaries; the space mark is 3 bytes.
    const std::size_t first = w.starts_with(kSpace) ? 4 : 2;
    for (std::size_t len = first; len <= w.size(); ++len) {
      std::string p = w.substr(0, len);
      if (seen.insert(p).second) add(std::move(p), 1);
    }
  }
  return v;
}

}  // namespace

const FittedVocab &npc_fitted_vocab() {
  static const FittedVocab v = build();
  return v;
}

void set_fitted_tokenizer(gguf_context *g, const FittedVocab &v) {
  std::vector<const char *> strs;
  strs.reserve(v.tokens.size());
  for (const auto &t : v.tokens) strs.push_back(t.c_str());
  gguf_set_val_str(g, "tokenizer.ggml.model", "llama");
  gguf_set_arr_str(g, "tokenizer.ggml.tokens", strs.data(), strs.size());
  gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.scores.data(), v.scores.size());
  gguf_set_arr_data(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.types.data(), v.types.size());
  gguf_set_val_u32(g, "tokenizer.ggml.unknown_token_id", 0);
  gguf_set_val_u32(g, "tokenizer.ggml.bos_token_id", 1);
  gguf_set_val_u32(g, "tokenizer.ggml.eos_token_id", 2);
  gguf_set_val_bool(g, "tokenizer.ggml.add_bos_token", true);
  gguf_set_val_bool(g, "tokenizer.ggml.add_eos_token", false);
  gguf_set_val_bool(g, "tokenizer.ggml.add_space_prefix", false);
}

}  // namespace weft::detail
