// Writes a GGUF with seeded random weights (llama or a weft::ModelArch family). Internal:
// make_model() uses it for the random presets, train_npc_model() for the
// initial weights it then trains.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <ggml.h>
#include <gguf.h>

#include "core/file_io.hpp"
#include "weft/make_model.hpp"

namespace weft::detail {

struct GgufFree {
  void operator()(gguf_context *c) const { gguf_free(c); }
};
struct GgmlFree {
  void operator()(ggml_context *c) const { ggml_free(c); }
};
using GgufPtr = std::unique_ptr<gguf_context, GgufFree>;
using GgmlPtr = std::unique_ptr<ggml_context, GgmlFree>;

struct RandomModelSpec {
  ModelShape shape;
  WeightType type = WeightType::f32;
  std::string preset;  // recorded as weft.preset and in general.name
  std::uint64_t seed = 0;
  std::string out;     // written atomically
  std::string vocab;   // empty = default_vocab_path(), unless fitted_vocab
  // Write the npc corpus's fitted vocabulary (npc_vocab.hpp) instead of
  // copying a tokenizer from `vocab`.
  bool fitted_vocab = false;
  std::function<void(float)> on_progress;
  // Std of token_embd and of attn_k/attn_v; 0 = the preset default 0.02.
  float std_embd = 0;
  float std_kv = 0;
  ModelArch arch = ModelArch::llama;
  int sliding_window = 0;  // gemma3's (> 0); ignored by the other arches
  bool encoder = false;    // an embedding model: non-causal, mean pooling (llama)
};

void write_random_model(const RandomModelSpec &spec);

// A GGUF streamed into `file`: the metadata of `g` first, then every tensor's
// bytes in `g`'s order, each padded to its alignment.
void write_gguf_meta(TempFile &file, const gguf_context *g);
void write_gguf_tensor(TempFile &file, const gguf_context *g, const void *data, std::size_t n);

}  // namespace weft::detail
