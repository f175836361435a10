// weft/executor_stats.hpp — what Executor::stats() reports, and the
// attention-kernel choices it names. Plain values: copy freely.
#pragma once

#include <cstdint>

namespace weft {

enum class FlashAttention { automatic, enabled, disabled };
// How the context's attention kernel was chosen (ExecutorStats).
enum class AttentionSource {
  asked,       // ExecutorParams::flash_attn was enabled or disabled
  gpu,         // automatic, layers on a GPU: left to llama.cpp
  kv_type,     // automatic, a quantised cache needs flash attention: left to llama.cpp
  measured,    // automatic: both kernels timed when this executor was made
  remembered,  // automatic: an earlier probe's timings (same model, machine, build, shape)
  fallback,    // automatic: the probe could not run (logged); flash attention off
  environment, // automatic, overridden by WEFT_FLASH_ATTN=on|off in the environment
};

struct ExecutorStats {
  std::uint32_t n_ctx = 0;
  std::uint32_t cells_used = 0;   // distinct KV cells in use (shared prefixes once)
  std::uint32_t cells_free = 0;
  std::uint32_t n_seq_max = 0;
  std::uint32_t slots_used = 0;
  std::uint32_t conversations = 0;
  std::uint32_t generating = 0;
  std::uint64_t queued_tokens = 0;
  std::uint64_t steps = 0;
  std::uint64_t tokens_decoded = 0;
  std::uint64_t tokens_sampled = 0;
  // Speculative decoding: draft tokens verified (counted in tokens_decoded)
  // and of those kept (counted in tokens_sampled).
  std::uint64_t tokens_drafted = 0;
  std::uint64_t drafts_accepted = 0;
  // Drafter::model: tokens decoded in the draft model's context (catching
  // conversations up and drafting) and the seconds that took.
  std::uint64_t draft_model_tokens = 0;
  double draft_model_seconds = 0;
  std::uint64_t decode_failures = 0;
  std::uint64_t deadline_stops = 0;  // steps cut short by a hard deadline
  std::uint64_t worker_errors = 0;   // worker steps that threw (a weft bug; it carried on)
  // Residency: resident ones hold a slot (or have nothing decoded); parked
  // ones keep their KV data in RAM, on disk, or only as tokens (recompute).
  std::uint32_t resident = 0;
  std::uint32_t parked_ram = 0;
  std::uint32_t parked_disk = 0;
  std::uint32_t parked_recompute = 0;
  std::uint64_t ram_bytes = 0;   // parked KV data in RAM (shared by forks once)
  std::uint64_t disk_bytes = 0;
  std::uint64_t parks = 0;       // conversations parked so far
  std::uint64_t restores = 0;    // restored from RAM or disk
  std::uint64_t recomputes = 0;  // re-decoded from tokens instead
  // Conversations decoded again from their start because the model's memory
  // could not be cut or shared where an operation asked (a recurrent or
  // hybrid model's state; a sliding window whose cells llama.cpp reused:
  // docs/EXECUTOR.md, "Model families"), and the positions decoded again
  // (from the start, or from a recurrent model's checkpoint).
  std::uint64_t redecodes = 0;
  std::uint64_t redecode_tokens = 0;
  double park_ms = 0;            // total time spent parking
  double restore_ms = 0;         // total time spent restoring
  std::uint64_t events_dropped = 0;
  // Prefix reuse: input tokens shared from the cache instead of decoded;
  // lookups that found a prefix (of which in the prefix cache) or none;
  // prefix cache entries evicted; cells the prefix cache holds (counted in
  // cells_free); positions held beyond the cells used (what sharing saves,
  // forks included); prefixes pinned.
  std::uint64_t prefix_tokens_reused = 0;
  std::uint64_t prefix_hits = 0;
  std::uint64_t prefix_cache_hits = 0;
  std::uint64_t prefix_misses = 0;
  std::uint64_t prefix_evictions = 0;
  std::uint32_t prefix_cache_cells = 0;
  std::uint64_t cells_saved = 0;
  std::uint32_t pinned_prefixes = 0;
  // Adapters: times a step switched the context's adapter setting (each a
  // llama_decode of its own, after which llama.cpp re-reserves its graph),
  // and what the cost model has learnt a switch adds to that decode.
  std::uint64_t adapter_switches = 0;
  double adapter_switch_ms = 0;
  // Images (ExecutorParams::projector): encoded so far by the executor's
  // encoder (its thread, or encode_images() callers) and its total time
  // on them (never inside a step);
  // embeddings batches decoded by steps and their total llama_decode time.
  std::uint64_t images_encoded = 0;
  double image_encode_ms = 0;
  std::uint64_t image_batches = 0;
  double image_decode_ms = 0;
  // Images queued for the encoder or being encoded now (what
  // encode_images() would take under ImageEncoding::caller).
  std::uint32_t images_pending = 0;
  // Embeddings (ExecutorParams::embedder): texts embedded, their tokens,
  // the llama_decode calls and time they took, and texts queued now.
  std::uint64_t texts_embedded = 0;
  std::uint64_t embed_tokens = 0;
  std::uint64_t embed_decodes = 0;
  double embed_ms = 0;
  std::uint32_t embed_pending = 0;
  bool worker_running = false;
  // Over the last 1024 steps that did work.
  double step_ms_p50 = 0;
  double step_ms_p99 = 0;
  double decode_ms_p50 = 0;
  // The cost model's prediction for one token at depth 0, and its samples.
  double predicted_ms_per_token = 0;
  std::uint64_t cost_model_samples = 0;
  // The attention kernel the context uses: enabled or disabled, or
  // automatic where llama.cpp decided (layers on a GPU, a q8_0 cache); how
  // it was chosen; and for a probe (measured or remembered) one generation
  // step plus one prompt chunk at its shape with each kernel, the fastest of
  // three rounds, and that shape (conversations x cells each).
  FlashAttention flash_attn = FlashAttention::disabled;
  AttentionSource flash_attn_source = AttentionSource::asked;
  double flash_attn_probe_ms = 0;
  double plain_attn_probe_ms = 0;
  std::uint32_t attn_probe_seqs = 0;
  std::uint32_t attn_probe_depth = 0;
};

}  // namespace weft
