// ExecutorParams::kv_type as llama.cpp takes it. Internal.
#pragma once

#include <ggml.h>
#include <llama.h>

#include <cstdlib>
#include <string>

#include "weft/executor.hpp"

namespace weft::detail {

inline ggml_type to_ggml(KvType t) {
  switch (t) {
    case KvType::f32: return GGML_TYPE_F32;
    case KvType::q8_0: return GGML_TYPE_Q8_0;
    case KvType::bf16: return GGML_TYPE_BF16;
    case KvType::q4_0: return GGML_TYPE_Q4_0;
    case KvType::q4_1: return GGML_TYPE_Q4_1;
    case KvType::q5_0: return GGML_TYPE_Q5_0;
    case KvType::q5_1: return GGML_TYPE_Q5_1;
    case KvType::iq4_nl: return GGML_TYPE_IQ4_NL;
    case KvType::f16: break;
  }
  return GGML_TYPE_F16;
}

// Quantised in blocks: flash attention only, heads a multiple of the block wide.
inline bool kv_quantised(KvType t) { return ggml_is_quantized(to_ggml(t)); }

inline const char *kv_type_name(KvType t) { return ggml_type_name(to_ggml(t)); }

// The width of the model's attention heads (keys): the GGUF's
// <arch>.attention.key_length, else n_embd / n_head.
inline int head_width(const llama_model *m) {
  char arch[64], value[32];
  if (llama_model_meta_val_str(m, "general.architecture", arch, sizeof arch) > 0) {
    const std::string key = std::string(arch) + ".attention.key_length";
    if (llama_model_meta_val_str(m, key.c_str(), value, sizeof value) > 0) return std::atoi(value);
  }
  const int heads = llama_model_n_head(m);
  return heads > 0 ? llama_model_n_embd(m) / heads : 0;
}

}  // namespace weft::detail
