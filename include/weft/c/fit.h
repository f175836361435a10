// weft/c/fit.h — choosing n_gpu_layers and n_ctx for the memory a game
// leaves for its model (weft::fit_memory, weft/memory_fit.hpp).
//
// Part of weft.h (include that one; the rules it states apply here).
#ifndef WEFT_C_FIT_H
#define WEFT_C_FIT_H

#include "weft/c/common.h"
#include "weft/c/errors.h"

WEFT_BEGIN_DECL

// The budget and the executor's shape. weft_fit_params_init fills the
// defaults.
typedef struct weft_fit_params {
  size_t struct_size;
  uint64_t device_bytes;     // GPU memory left for the model. Default 0
  uint64_t host_bytes;       // RAM left for it, the spill RAM tier included. Default 0
  uint64_t spill_ram_bytes;  // the executor's spill RAM tier, counted in host_bytes. Default 1 GiB
  uint32_t n_ctx;            // the most KV cells wanted. Default 4096
  uint32_t min_n_ctx;        // the fewest acceptable, in [16, n_ctx]. Default 256
  uint32_t n_batch;          // as weft_executor_params. Default 512
  uint32_t n_ubatch;         // 0 = n_batch. Default 0
  uint32_t n_seq_max;        // [1, 256]. Default 16
  int32_t kv_type;           // a weft_kv_type. Default WEFT_KV_F16
  int32_t flash_attn;        // a weft_flash_attn; AUTO counts the larger kernel. Default WEFT_FLASH_ATTN_AUTO
} weft_fit_params;

// Bytes of one side of the chosen configuration (llama.cpp's dry run).
typedef struct weft_fit_bytes {
  uint64_t weights, kv, compute, spill, total;
} weft_fit_bytes;

typedef struct weft_fit_result {
  size_t struct_size;
  int32_t n_gpu_layers;      // for weft_model_params.n_gpu_layers; -1 = every layer
  uint32_t n_ctx;            // for weft_executor_params.n_ctx
  uint32_t n_batch;          // for weft_executor_params.n_batch (<= n_ctx)
  int32_t n_layer;           // the model's layers
  int32_t layers_on_device;  // of n_layer + 1 (the output layer counts)
  weft_fit_bytes device, host;
} weft_fit_result;

WEFT_C_API weft_status weft_fit_params_init(weft_fit_params *params, size_t struct_size);

// The configuration with the most KV cells (up to n_ctx) and, for those, the
// most layers on the GPU whose device and host bytes both fit. `model_path`
// NUL-terminated; `params` NULL = defaults (a zero budget: nothing fits).
// `out->struct_size` must be set. WEFT_ERR_OUT_OF_RANGE when nothing fits
// (weft_last_error names the least bytes needed and the budget),
// WEFT_ERR_INVALID_ARGUMENT for a bad shape, WEFT_ERR_NOT_FOUND /
// WEFT_ERR_CORRUPT for the file.
WEFT_C_API weft_status weft_fit_choose(const char *model_path, const weft_fit_params *params, weft_fit_result *out);

WEFT_END_DECL

#endif  // WEFT_C_FIT_H
