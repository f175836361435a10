// weft/train.hpp — the `npc` model: a seeded procedural corpus of NPC
// dialogue and a small llama-architecture model trained on it on the CPU with
// a training graph of weft's own (ggml + ggml-opt) in which every tensor
// trains, written as a GGUF that stock llama.cpp loads.
//
// No trained weights can be downloaded where weft is built, and random
// weights print gibberish; this gives the demo a model that speaks in the
// corpus's style after a few minutes of training on 2 cores. The npc-draft
// preset (npc_train_params(ModelPreset::npc_draft)) is a smaller model with
// the same vocabulary, trained on the same corpus: a drafter for speculative
// decoding with npc.
//
// Thread-safety: every function is reentrant; calls on different output paths
// may run concurrently (each trains its own model and context). Callbacks run
// on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "weft/export.hpp"
#include "weft/make_model.hpp"

namespace weft {

struct CorpusParams {
  std::uint64_t seed = 0;                 // default 0; same seed, same text
  std::size_t target_bytes = 300'000;     // default 300 KB; 1 .. 1 GiB
};

// Dialogues, each a header line ("Brenna is the blacksmith of Eldermoor."),
// alternating "Player: ..." / "<Name>: ..." lines, and a blank line. Pure and
// deterministic: same params, same text on every platform. Stops at the first
// dialogue that reaches target_bytes. Throws Errc::invalid_argument.
WEFT_API std::vector<std::string> make_npc_dialogues(const CorpusParams &params);
// The dialogues concatenated.
WEFT_API std::string make_npc_corpus(const CorpusParams &params);

// The header line make_npc_dialogues starts a dialogue with, for prompting a
// trained model the way it was trained: "<name> is the <role> of Eldermoor.\n".
WEFT_API std::string npc_header(const std::string &name, const std::string &role);

struct TrainProgress {
  int epoch = 0;          // 0-based epoch in progress
  int epochs = 0;         // total epochs
  double fraction = 0;    // of the whole run, in [0, 1]
  double train_loss = 0;  // running mean over the epoch so far
  double train_accuracy = 0;
};

// The defaults are the npc preset's; npc_train_params(ModelPreset::npc_draft)
// gives the drafter's.
struct TrainParams {
  // What the file says it is (weft.preset, general.name, the cache key):
  // ModelPreset::npc or npc_draft (else Errc::invalid_argument). The shape is
  // the fields below, whatever the preset. Default npc.
  ModelPreset preset = ModelPreset::npc;
  CorpusParams corpus;      // default seed 0, 300 KB
  std::uint64_t seed = 0;   // weight initialisation and window order; default 0
  int n_layer = 4;          // default 4
  int n_embd = 128;         // default 128; n_head times an even head size
  int n_head = 4;           // default 4
  int n_ff = 384;           // default 384
  int n_ctx = 256;          // training window in tokens; default 256 (a multiple of 256: llama.cpp pads contexts)
  int n_batch = 256;        // tokens per optimizer step: 1 .. 64 whole windows of n_ctx, or a divisor of n_ctx
                            // (then sequences of n_batch tokens: less context); default 256
  int epochs = 14;          // default 14
  float lr = 2e-3f;         // peak AdamW learning rate; default 2e-3
  float lr_min = 2e-4f;     // end of the cosine decay; default 2e-4
  int warmup_steps = 50;    // linear warm-up, in optimizer steps; default 50
  float weight_decay = 0.0f;  // AdamW; default 0
  float eval_share = 0.05f;   // held-out share of dialogues, in (0, 0.5]; default 0.05
  // Initial std of token_embd and of attn_k/attn_v; default 0 = the
  // preset's 0.02, as every other matrix.
  float init_std_embd = 0.0f;
  float init_std_kv = 0.0f;
  int n_threads = 0;          // default 0 = all hardware threads
  // Output GGUF (f32). Required. Written atomically: nothing appears at
  // `out` unless training finished.
  std::string out;
  // GGUF to copy the tokenizer from. Default empty: a vocabulary fitted to
  // the corpus (its words, their SPM merge chains, the 256 byte tokens and
  // <unk> <s> </s>: ~2,000 tokens instead of llama's 32,000), written without
  // the SPM space prefix so that a prompt starting a line tokenizes as that
  // line did in training.
  std::string vocab;
  // Called after every 4 training windows (or every optimizer step, if it
  // takes more) and at the end of each epoch. Default none.
  std::function<void(const TrainProgress &)> on_progress;
  // Polled as often as on_progress is called; returning true stops training
  // with Errc::cancelled and writes nothing. Default none.
  std::function<bool()> cancel;
};

// A trained preset's TrainParams, seed 0 and no `out`: npc gives the defaults
// above; npc_draft gives 2 layers, 64 wide, 2 heads, FFN 192 (the same head
// size, context, schedule, corpus and vocabulary). Any other preset:
// Errc::invalid_argument. Pure.
WEFT_API TrainParams npc_train_params(ModelPreset preset);

struct TrainReport {
  double train_loss = 0;       // mean over the last epoch
  double train_accuracy = 0;   // next-token accuracy, last epoch
  double eval_loss_before = 0;       // held-out, untrained weights
  double eval_accuracy_before = 0;
  double eval_loss = 0;        // held-out, after training
  double eval_accuracy = 0;
  std::int64_t train_tokens = 0;  // per epoch
  std::int64_t eval_tokens = 0;
  std::int64_t optimizer_steps = 0;
  double seconds = 0;          // wall time of the whole call
};

// Generates the corpus, initialises the model, trains it and writes `out`.
// Throws Error: invalid_argument (a parameter outside its domain, named),
// not_found/corrupt (vocabulary), io (output not writable, disk full),
// cancelled; never leaves a partial file at `out`.
WEFT_API TrainReport train_npc_model(const TrainParams &params);

// A short hex key over everything that determines the trained weights
// (corpus, seed, shape, schedule, the vocabulary path when one is given,
// weft's corpus/trainer version), for caching trained models by content.
// Not n_threads: results do not depend on it. Pure.
WEFT_API std::string npc_model_key(const TrainParams &params);

}  // namespace weft
