#include "attention_cli.hpp"

#include <fmt/format.h>

#include <map>

namespace weft_cli {

void add_flash_attn_option(CLI::App &cmd, weft::FlashAttention &out) {
  const std::map<std::string, weft::FlashAttention> names{
      {"auto", weft::FlashAttention::automatic}, {"on", weft::FlashAttention::enabled},
      {"off", weft::FlashAttention::disabled}};
  cmd.add_option("--flash-attn", out,
                 "Flash attention: auto (weft measures both kernels at this shape on the CPU), on or off")
      ->transform(CLI::CheckedTransformer(names, CLI::ignore_case))
      ->default_str(flash_attn_name(out));
}

void add_cache_type_option(CLI::App &cmd, weft::KvType &out) {
  using weft::KvType;
  const std::map<std::string, KvType> names{{"f16", KvType::f16},   {"f32", KvType::f32},   {"bf16", KvType::bf16},
                                            {"q8_0", KvType::q8_0}, {"q5_1", KvType::q5_1}, {"q5_0", KvType::q5_0},
                                            {"q4_1", KvType::q4_1}, {"q4_0", KvType::q4_0}, {"iq4_nl", KvType::iq4_nl}};
  cmd.add_option("--cache-type", out,
                 "KV cache type for keys and values: f16, f32, bf16, or q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl (these "
                 "need flash attention and heads a multiple of 32 wide)")
      ->transform(CLI::CheckedTransformer(names, CLI::ignore_case))
      ->default_str("f16");
}

const char *flash_attn_name(weft::FlashAttention f) {
  switch (f) {
    case weft::FlashAttention::enabled: return "on";
    case weft::FlashAttention::disabled: return "off";
    case weft::FlashAttention::automatic: break;
  }
  return "auto";
}

std::string describe_attention(const weft::ExecutorStats &s) {
  std::string why;
  switch (s.flash_attn_source) {
    case weft::AttentionSource::asked: why = "as asked"; break;
    case weft::AttentionSource::gpu: why = "layers on a GPU: llama.cpp decides"; break;
    case weft::AttentionSource::kv_type: why = "a quantised cache needs it: llama.cpp decides"; break;
    case weft::AttentionSource::fallback: why = "the probe could not run (see the log)"; break;
    case weft::AttentionSource::environment: why = "WEFT_FLASH_ATTN in the environment"; break;
    case weft::AttentionSource::measured:
    case weft::AttentionSource::remembered:
      why = fmt::format("{}: {:.2f} ms with it, {:.2f} ms without, {} conversations x {} cells",
                        s.flash_attn_source == weft::AttentionSource::measured ? "measured" : "remembered",
                        s.flash_attn_probe_ms, s.plain_attn_probe_ms, s.attn_probe_seqs, s.attn_probe_depth);
      break;
  }
  return fmt::format("flash attention {} ({})", flash_attn_name(s.flash_attn), why);
}

}  // namespace weft_cli
