// The conversation state format (docs/STATE_FORMAT.md): encode and decode,
// with every length bounded before it is trusted and a CRC-32 over it all.
// Pure: no llama.cpp calls, so it can be fuzzed on its own.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/sampling.hpp"
#include "weft/generation.hpp"
#include "weft/generation.hpp"
#include "weft/sampling.hpp"
#include "weft/types.hpp"

namespace weft::detail {

inline constexpr std::uint32_t kStateVersion = 15;  // the newest read
// Written unless the state needs a later version's field (a generation with
// ignore_eos: version 6; a sampler with a json_schema: version 7; one with a
// logit_bias: version 8; a generation recording logprobs: version 9; a sampler using typical_p, XTC, DRY or mirostat:
// version 10; a generation with tools: version 11; a sampler with banned_strings: version 12; a generation with tools
// in a format other than hermes: version 13; a conversation with a Memory: version 14), so such states stay
// readable by an older weft.
inline constexpr std::uint32_t kPlainStateVersion = 5;
inline constexpr std::uint32_t kOldestStateVersion = 1;  // still read
// Bounds checked before anything is allocated from a length field.
inline constexpr std::uint32_t kMaxTokens = 1u << 24;
inline constexpr std::uint32_t kMaxString = 1u << 20;
static_assert(kMaxString >= kMaxSamplerText, "every sampler text a sampler takes must fit a saved state");
inline constexpr std::uint32_t kMaxStops = 64;
inline constexpr std::uint64_t kMaxKvBytes = 1ull << 36;
inline constexpr std::uint32_t kMaxAdapterSettings = 4096;
inline constexpr std::uint32_t kMaxAdaptersPerSetting = 256;
inline constexpr std::uint32_t kMaxMedia = 4096;           // images in one conversation
inline constexpr std::uint32_t kMaxMediaEmbd = 1u << 16;   // floats per image embedding
inline constexpr std::uint64_t kMaxMediaSource = 1ull << 26;  // bytes of one image's source

// One adapter of a setting, named by its file's fingerprint (version 3).
struct AdapterRecord {
  std::uint64_t fingerprint = 0;
  std::string name;  // for error messages
  std::uint8_t kind = 0;  // AdapterKind
  float scale = 1.0f;
  std::int32_t layer_start = -1, layer_end = -1;
};

// One image of a conversation (version 4): where it sits, how it decodes,
// and what a decode needs: its embeddings once encoded, else its source
// (the file's bytes or raw RGB), to be encoded again on load.
struct MediaRecord {
  enum Form : std::uint8_t { embeddings = 0, file = 1, rgb = 2, pcm = 3 };
  std::uint64_t id = 0;  // as saved: the value its positions hold is image_token(id)
  std::uint32_t begin = 0, n_tokens = 0, n_pos = 0;
  std::uint32_t nx = 0;  // version 5: an M-RoPE image's grid width (MediaChunk::nx); 0 before
  bool audio = false;    // version 5: a clip of audio (source form pcm: its f32 samples)
  bool non_causal = false;
  Form form = embeddings;
  std::vector<float> embd;            // embeddings: n_tokens x n_embd
  std::vector<std::uint8_t> source;   // file bytes, width x height x 3 RGB, or f32 samples (pcm)
  std::uint32_t width = 0, height = 0;  // rgb only
};

struct GenRecord {
  std::uint32_t max_tokens = 0;
  bool ignore_eos = false;                        // version 6
  std::vector<std::string> stop;
  std::optional<SamplerParams> sampler;          // its own sampler, if any
  std::optional<Sampler::State> sampler_state;   // ...and where it stands
  std::vector<Token> tokens;                      // sampled so far
  std::string text;                               // released so far
  std::string stream_text;                        // the stream, held-back part included
  std::uint64_t stream_released = 0;
  bool logprobs = false;                          // version 9: GenerateParams::logprobs
  std::uint32_t top_logprobs = 0;                 // ...top_logprobs
  std::vector<TokenLogprob> logprob_entries;      // ...one per token of `tokens`
  bool tools = false;                             // version 11: sampled under tools_grammar()
  ToolFormat tool_format = ToolFormat::hermes;    // version 13: the call's format (hermes before)
  // Version 15: the speculative decoding it runs with (absent: the loading
  // executor's), and its drafts verified and kept so far.
  std::optional<SpeculativeParams> speculative;
  std::uint32_t drafted = 0, accepted = 0;
};

struct ConvRecord {
  std::vector<Token> history;  // decoded (the KV data covers exactly these)
  std::vector<Token> queue;    // queued input
  std::vector<float> logits;   // empty when none
  SamplerParams sampler_params;
  std::optional<Sampler::State> sampler_state;  // absent: never used yet
  std::int32_t priority = 0;
  bool gen_token_queued = false;
  std::optional<GenRecord> gen;
  std::vector<std::uint8_t> kv;  // the sequence's KV data (KvManager::export_kv)
  // Version 2. Leading positions whose KV is a fresh decode of the history
  // (shareable); the first position `kv` holds (the ones before are another
  // conversation's of the same snapshot, shared on load).
  std::uint32_t kv_exact = 0;
  std::uint32_t kv_from = 0;
  // Version 3: adapter settings (each a list; empty = the base model), the
  // current one (-1: none), and which one each position up to adapter_end
  // was decoded under: (first position, setting index or -1), in order.
  std::vector<std::vector<AdapterRecord>> adapter_settings;
  std::int32_t adapters_current = -1;
  std::uint32_t adapter_end = 0;
  std::vector<std::pair<std::uint32_t, std::int32_t>> adapter_spans;
  // Version 4: the images, by position, and the projector they were made
  // with (Projector fingerprint, floats per embedding); 0 / empty without.
  std::uint64_t projector_fingerprint = 0;
  std::uint32_t media_n_embd = 0;
  std::vector<MediaRecord> media;
  // Version 14: the conversation's Memory (Memory::save bytes); empty without.
  std::vector<std::uint8_t> memory;
};

std::vector<std::uint8_t> encode_conversation(const ConvRecord &r, std::uint64_t fingerprint, std::int32_t n_vocab);

// Throws Errc::corrupt (bad magic, checksum — checked before the version, so
// damaged version bytes are corrupt — truncation, a length past its bound, an
// id outside the vocabulary or an image position that does not match its
// image), Errc::incompatible (another format version in
// an intact file, another model), Errc::out_of_range (history + queue > n_ctx).
ConvRecord decode_conversation(std::span<const std::uint8_t> bytes, std::uint64_t fingerprint,
                               std::int32_t n_vocab, std::uint32_t n_ctx);

// Executor snapshots: a list of (id, conversation state) pairs.
std::vector<std::uint8_t> encode_snapshot(const std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> &convs,
                                          std::uint64_t fingerprint);
std::vector<std::pair<std::uint64_t, std::span<const std::uint8_t>>> decode_snapshot(
    std::span<const std::uint8_t> bytes, std::uint64_t fingerprint);

std::uint32_t crc32(std::span<const std::uint8_t> bytes);

}  // namespace weft::detail
