// Which attention kernel a context gets under FlashAttention::automatic:
// measured on this machine, with this model, at the executor's shape.
#pragma once

#include <llama.h>

#include <cstdint>
#include <string>

#include "weft/executor.hpp"

namespace weft::detail {

// The two decodes a probe times, with each kernel: one generation step (a
// token for each of `seqs` conversations at `depth`) and one prompt chunk of
// one of them, beside the others' cells.
struct ProbeShape {
  std::uint32_t seqs = 0;
  std::uint32_t depth = 0;
  std::uint32_t chunk = 0;
};

struct AttentionChoice {
  llama_flash_attn_type type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  FlashAttention reported = FlashAttention::disabled;  // enabled/disabled; automatic = left to llama.cpp
  AttentionSource source = AttentionSource::asked;
  ProbeShape shape;
  // One generation step plus one prompt chunk, fastest of the probe's
  // rounds, with and without flash attention (0 unless measured or cached).
  double flash_ms = 0, plain_ms = 0;
};

// Plain attention is taken only when the probe finds it faster by more than
// this. Closer than that, repeated probes of one shape disagree (from 6%
// one way to 5% the other: 1 conversation of small on an AMD EPYC, 2
// threads), while llama-batched-bench at that shape has flash attention 16%
// ahead on prompts; a CPU where plain attention wins does so by several times.
inline constexpr double kPlainAttentionMargin = 1.10;
inline bool flash_attention_chosen(double flash_ms, double plain_ms) {
  return flash_ms <= plain_ms * kPlainAttentionMargin;
}

// The probe's shape for an executor: its n_seq_max conversations, as deep
// as an equal share of the cache allows (capped so the probe stays short).
ProbeShape probe_shape(const ExecutorParams &p);

// Resolves ExecutorParams::flash_attn. Explicit settings pass through; with
// layers on a GPU or a q8_0 cache llama.cpp decides; otherwise both kernels
// are timed on scratch contexts (once per model, machine, build and shape:
// remembered in the process and in ExecutorParams::tuning_cache_dir). A
// probe that cannot run (no memory for a scratch context) falls back to
// flash attention off and says so in the log.
AttentionChoice choose_attention(const Model &model, const ExecutorParams &p, int threads);

// Tests: forget this process's probe results (the cache file stays); set
// the round-to-round spread beyond which a result is not kept on disk
// (<= 0: the default, 1.5).
void forget_attention_probes();
void set_attention_probe_spread(double spread);

}  // namespace weft::detail
