// weft/memory_fit.hpp — choosing n_gpu_layers and n_ctx to fit the memory a
// game leaves for its model.
//
// The numbers are llama.cpp's own: the model is loaded without its weights
// and a context of the executor's shape made without its buffers
// (llama.cpp's `no_alloc` dry run, the same one its `--fit` uses), and the
// bytes each would allocate — weights, KV cache, compute buffers — are read
// per device. Nothing is allocated and the file's tensors are not read, so a
// fit costs milliseconds per configuration tried: up to n_layer + 2 layer
// counts for each of about log2(n_ctx / 256) + 1 cell counts (tiny: 2 to 6).
// Thread-safety: free functions, callable from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/executor.hpp"
#include "weft/export.hpp"
#include "weft/model.hpp"

namespace weft {

// What the game leaves to weft, in bytes.
struct MemoryBudget {
  // GPU memory (VRAM) for the model's offloaded layers, their KV cache and
  // the GPU's compute buffers. Even n_gpu_layers 0 needs some with a GPU
  // present: llama.cpp keeps a device compute buffer that copies weights for
  // a large batch's matrix products. Ignored when weft was built without a
  // GPU backend or none is present.
  std::uint64_t device_bytes = 0;
  // Host memory (RAM) for the layers left on the CPU, their KV cache, the
  // CPU's compute buffers and the executor's spill RAM tier
  // (ExecutorParams::spill.ram_bytes, counted whole).
  std::uint64_t host_bytes = 0;
};

// Bytes of one side (device or host) of a configuration.
struct MemoryUse {
  std::uint64_t weights = 0;  // the model's tensors placed there
  std::uint64_t kv = 0;       // the KV cache (and a recurrent model's state)
  std::uint64_t compute = 0;  // llama.cpp's compute buffers for the shape
  std::uint64_t spill = 0;    // the spill RAM tier (host only)
  std::uint64_t total() const noexcept { return weights + kv + compute + spill; }
};

struct MemoryFitRequest {
  // The GGUF to fit. Required.
  std::string model_path;
  MemoryBudget budget;
  // The executor's shape: n_seq_max, n_batch, n_ubatch, kv_type, flash_attn
  // and spill.ram_bytes are kept as given; n_ctx is the most cells wanted,
  // and the fit may choose fewer (down to min_n_ctx). flash_attn automatic
  // counts the larger of the two kernels' needs.
  ExecutorParams executor;
  // The fewest KV cells acceptable. Default 256; in [16, executor.n_ctx].
  std::uint32_t min_n_ctx = 256;
};

struct MemoryFit {
  // Ready to use: model.path and model.n_gpu_layers (-1 when every layer,
  // the output layer included, is offloaded), executor = the request's with
  // n_ctx chosen.
  ModelParams model;
  ExecutorParams executor;
  std::int32_t n_layer = 0;           // the model's layers
  std::int32_t layers_on_device = 0;  // of n_layer + 1 (the output layer counts)
  std::string device;                 // the GPU's name; "" when none is used
  MemoryUse device_use, host_use;     // what llama.cpp's dry run allocates
  std::uint32_t configurations_tried = 0;
};

// The configuration with the most KV cells (up to request.executor.n_ctx, in
// steps of 256, llama.cpp's padding) and, for that n_ctx, the most layers on
// the GPU whose device bytes fit, if its host bytes fit too (n_batch and
// n_ubatch are capped at the n_ctx chosen). Throws Error:
// invalid_argument (no path, min_n_ctx outside [16, n_ctx], a bad executor
// shape as Executor would refuse it), not_found / corrupt (the model file),
// out_of_range when nothing fits: the message names the budget and, at
// min_n_ctx, the fewest device bytes and the fewest host bytes any layer
// count needs (each with its layer count and the other side's bytes).
WEFT_API MemoryFit fit_memory(const MemoryFitRequest &request);

// What one configuration needs: llama.cpp's dry run of Model::load with
// `n_gpu_layers` (-1 = all) and an Executor of `executor`'s shape (its
// n_ctx as given), per side. The same numbers fit_memory compares with the
// budget. Throws Error as fit_memory does for the path and the shape.
struct MemoryEstimate {
  MemoryUse device, host;
  std::string device_name;  // the GPU's; "" when nothing is on one
};
WEFT_API MemoryEstimate estimate_memory(const std::string &model_path, int n_gpu_layers,
                                        const ExecutorParams &executor);

// A GPU device llama.cpp sees, with its memory as the driver reports it
// (ggml_backend_dev_memory).
struct GpuDevice {
  std::string name;         // "Vulkan0"
  std::string description;  // "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::uint64_t free_bytes = 0, total_bytes = 0;
};
// Every GPU (and integrated GPU) device of this build; empty without a GPU
// backend or device.
WEFT_API std::vector<GpuDevice> gpu_devices();

}  // namespace weft
