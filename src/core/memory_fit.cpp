// fit_memory: n_gpu_layers and n_ctx for a byte budget, from llama.cpp's
// dry run (no_alloc model and context, llama_get_memory_breakdown).
#include "weft/memory_fit.hpp"

#include <fmt/format.h>
#include <ggml-backend.h>
#include <llama.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "core/backend_loader.hpp"
#include "core/internal.hpp"
#include "exec/kv_type.hpp"
#ifdef WEFT_HAVE_LLAMA_EXT
#include "llama-ext.h"  // llama_get_memory_breakdown: llama.cpp's staging API, as its --fit uses
#endif

namespace weft {

std::vector<GpuDevice> gpu_devices() {
  detail::ensure_backend();
  std::vector<GpuDevice> out;
  for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t dev = ggml_backend_dev_get(i);
    const auto type = ggml_backend_dev_type(dev);
    if (type != GGML_BACKEND_DEVICE_TYPE_GPU && type != GGML_BACKEND_DEVICE_TYPE_IGPU) continue;
    std::size_t free = 0, total = 0;
    ggml_backend_dev_memory(dev, &free, &total);
    out.push_back({ggml_backend_dev_name(dev), ggml_backend_dev_description(dev), free, total});
  }
  return out;
}

#ifndef WEFT_HAVE_LLAMA_EXT

namespace {
[[noreturn]] void no_breakdown() {
  detail::fail(Errc::backend, "weft was built against an installed llama.cpp (WEFT_LLAMA_PREFIX) without its source "
                              "tree, whose src/llama-ext.h declares the memory breakdown fit_memory reads");
}
}  // namespace

MemoryFit fit_memory(const MemoryFitRequest &) { no_breakdown(); }
MemoryEstimate estimate_memory(const std::string &, int, const ExecutorParams &) { no_breakdown(); }

#else

namespace {

struct Use {
  MemoryUse device, host;
  std::string device_name;
};

using ModelPtr = std::unique_ptr<llama_model, decltype(&llama_model_free)>;

// The dry runs of one request: models by n_gpu_layers, each read once.
class DryRun {
 public:
  DryRun(const std::string &path, const ExecutorParams &executor) : path_(path), p_(executor) {}

  const llama_model *model(int ngl) {
    auto it = models_.find(ngl);
    if (it != models_.end()) return it->second.get();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = ngl;
    mp.no_alloc = true;  // metadata only; allocations are simulated
    mp.load_mode = LLAMA_LOAD_MODE_NONE;
    if (detail::cpu_backend_has("AMX_INT8")) mp.use_extra_bufts = false;  // as Model::load
    detail::take_llama_error();
    llama_model *m = llama_model_load_from_file(path_.c_str(), mp);
    if (m == nullptr) {
      detail::fail(Errc::corrupt, fmt::format("llama.cpp could not read model '{}': {}", path_,
                                              detail::take_llama_error()));
    }
    return models_.emplace(ngl, ModelPtr(m, &llama_model_free)).first->second.get();
  }

  // What Executor's context of n_ctx cells allocates with ngl layers offloaded.
  Use measure(int ngl, std::uint32_t n_ctx) {
    ++tried_;
    const auto &p = p_;
    Use out;
    std::vector<llama_flash_attn_type> kernels;
    if (p.flash_attn == FlashAttention::enabled || detail::kv_quantised(p.kv_type)) {
      kernels = {LLAMA_FLASH_ATTN_TYPE_ENABLED};
    } else if (p.flash_attn == FlashAttention::disabled) {
      kernels = {LLAMA_FLASH_ATTN_TYPE_DISABLED};
    } else {
      kernels = {LLAMA_FLASH_ATTN_TYPE_DISABLED, LLAMA_FLASH_ATTN_TYPE_ENABLED};  // automatic: the larger
    }
    const llama_model *m = model(ngl);
    for (const auto fa : kernels) {
      const Use u = measure_one(m, n_ctx, fa);
      auto up = [](MemoryUse &a, const MemoryUse &b) {
        a.weights = std::max(a.weights, b.weights);
        a.kv = std::max(a.kv, b.kv);
        a.compute = std::max(a.compute, b.compute);
      };
      up(out.device, u.device);
      up(out.host, u.host);
      if (!u.device_name.empty()) out.device_name = u.device_name;
    }
    out.host.spill = p.spill.ram_bytes;
    return out;
  }

  std::uint32_t tried() const { return tried_; }

 private:
  Use measure_one(const llama_model *m, std::uint32_t n_ctx, llama_flash_attn_type fa) {
    const auto &p = p_;
    // The context Executor makes (src/exec/executor.cpp), with the batch
    // bounded by the cells as Executor requires.
    auto cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = std::min(p.n_batch, n_ctx);
    cp.n_ubatch = std::min(p.n_ubatch == 0 ? p.n_batch : p.n_ubatch, cp.n_batch);
    const bool spare_seq = p.n_seq_max < llama_max_parallel_sequences() && cp.n_batch > p.n_seq_max;
    cp.n_seq_max = p.n_seq_max + (spare_seq ? 1 : 0);
    cp.kv_unified = true;
    cp.swa_full = true;
    cp.type_k = detail::to_ggml(p.kv_type);
    cp.type_v = detail::to_ggml(p.kv_type);
    cp.flash_attn_type = fa;
    cp.no_perf = true;
    detail::take_llama_error();
    llama_context *ctx = llama_init_from_model(const_cast<llama_model *>(m), cp);
    if (ctx == nullptr) {
      detail::fail(Errc::backend, fmt::format("llama.cpp could not plan a context (n_ctx {}, n_batch {}, n_seq_max "
                                              "{}): {}",
                                              n_ctx, cp.n_batch, p.n_seq_max, detail::take_llama_error()));
    }
    Use out;
    for (const auto &[buft, mb] : llama_get_memory_breakdown(ctx)) {
      MemoryUse &side = ggml_backend_buft_is_host(buft) ? out.host : out.device;
      side.weights += mb.model;
      side.kv += mb.context;
      side.compute += mb.compute;
      if (!ggml_backend_buft_is_host(buft)) {
        if (ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft)) out.device_name = ggml_backend_dev_description(dev);
      }
    }
    // llama.cpp's output buffer (host, outside the breakdown): the logits of
    // one token per conversation a step. It grows when a step asks for more.
    out.host.compute += static_cast<std::uint64_t>(cp.n_seq_max) * static_cast<std::uint64_t>(
                            llama_vocab_n_tokens(llama_model_get_vocab(m))) * sizeof(float);
    llama_free(ctx);
    return out;
  }

  const std::string &path_;
  const ExecutorParams &p_;
  std::map<int, ModelPtr> models_;
  std::uint32_t tried_ = 0;
};

bool fits(const MemoryUse &use, std::uint64_t budget) { return use.total() <= budget; }


void check_shape(const std::string &path, const ExecutorParams &p, const char *name) {
  if (path.empty()) detail::fail(Errc::invalid_argument, fmt::format("{}: the model path is empty", name));
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) detail::fail(Errc::not_found, fmt::format("no model file '{}'", path));
  if (p.n_ctx < 16) {
    detail::fail(Errc::invalid_argument, fmt::format("{}: executor.n_ctx = {} (expected >= 16)", name, p.n_ctx));
  }
  if (p.n_seq_max < 1 || p.n_seq_max > 256 || p.n_batch < p.n_seq_max) {
    detail::fail(Errc::invalid_argument, fmt::format("{}: executor.n_seq_max = {} (expected in [1, 256]) with "
                                                     "n_batch = {} (expected >= n_seq_max)",
                                                     name, p.n_seq_max, p.n_batch));
  }
}

}  // namespace

MemoryEstimate estimate_memory(const std::string &model_path, int n_gpu_layers, const ExecutorParams &executor) {
  detail::ensure_backend();
  check_shape(model_path, executor, "estimate_memory");
  DryRun run(model_path, executor);
  const int n_layer = llama_model_n_layer(run.model(0));
  const Use u = run.measure(n_gpu_layers < 0 || n_gpu_layers > n_layer ? n_layer + 1 : n_gpu_layers, executor.n_ctx);
  return {u.device, u.host, u.device.total() > 0 ? u.device_name : ""};
}

MemoryFit fit_memory(const MemoryFitRequest &r) {
  detail::ensure_backend();
  const auto &p = r.executor;
  check_shape(r.model_path, p, "MemoryFitRequest");
  if (r.min_n_ctx < 16 || r.min_n_ctx > p.n_ctx) {
    detail::fail(Errc::invalid_argument, fmt::format("MemoryFitRequest.min_n_ctx = {} (expected in [16, {}])",
                                                     r.min_n_ctx, p.n_ctx));
  }
  DryRun run(r.model_path, p);
  const int n_layer = llama_model_n_layer(run.model(0));
  const bool gpu = llama_supports_gpu_offload() && !gpu_devices().empty();
  const int ngl_max = gpu ? n_layer + 1 : 0;  // n_layer + 1: the output layer too

  // n_ctx candidates: min_n_ctx, then multiples of 256 (llama.cpp's padding) up to n_ctx.
  std::vector<std::uint32_t> ctxs{r.min_n_ctx};
  for (std::uint32_t c = (r.min_n_ctx / 256 + 1) * 256; c < p.n_ctx; c += 256) ctxs.push_back(c);
  if (p.n_ctx > r.min_n_ctx) ctxs.push_back(p.n_ctx);

  struct Choice {
    int ngl = -1;
    Use use;
  };
  // For one n_ctx: the most layers whose device bytes fit, then the host
  // must fit too (fewer layers only move more onto the host). The device's
  // bytes are not monotone in the layers: with none offloaded llama.cpp
  // still keeps a device compute buffer large enough to copy weights for a
  // large batch's products, so every count is tried, most first.
  auto best_for = [&](std::uint32_t n_ctx) {
    Choice c;
    for (int ngl = ngl_max; ngl >= 0; --ngl) {
      Use u = run.measure(ngl, n_ctx);
      if (!fits(u.device, r.budget.device_bytes)) continue;
      if (fits(u.host, r.budget.host_bytes)) {
        c.ngl = ngl;
        c.use = u;
      }
      break;
    }
    return c;
  };

  Choice found;
  std::uint32_t found_ctx = 0;
  std::size_t lo = 0, hi = ctxs.size();  // ctxs[0, lo) fit; ctxs[hi, end) do not
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    Choice c = best_for(ctxs[mid]);
    if (c.ngl >= 0) {
      found = c;
      found_ctx = ctxs[mid];
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (found.ngl < 0) {
    // The least each side needs at min_n_ctx, over every layer count.
    int dev_ngl = 0, host_ngl = 0;
    Use dev_least = run.measure(0, r.min_n_ctx), host_least = dev_least;
    for (int ngl = 1; ngl <= ngl_max; ++ngl) {
      const Use u = run.measure(ngl, r.min_n_ctx);
      if (u.device.total() < dev_least.device.total()) {
        dev_least = u;
        dev_ngl = ngl;
      }
      if (u.host.total() < host_least.host.total()) {
        host_least = u;
        host_ngl = ngl;
      }
    }
    detail::fail(Errc::out_of_range,
                 fmt::format("no configuration of '{}' fits the budget of {} device bytes and {} host bytes: at "
                             "min_n_ctx = {}, the fewest device bytes are {} (n_gpu_layers {}, with {} host bytes) "
                             "and the fewest host bytes {} (n_gpu_layers {}, with {} device bytes); the spill RAM "
                             "tier's {} bytes included",
                             r.model_path, r.budget.device_bytes, r.budget.host_bytes, r.min_n_ctx,
                             dev_least.device.total(), dev_ngl, dev_least.host.total(), host_least.host.total(),
                             host_ngl, host_least.device.total(), p.spill.ram_bytes));
  }
  MemoryFit out;
  out.model.path = r.model_path;
  out.model.n_gpu_layers = found.ngl == n_layer + 1 ? -1 : found.ngl;
  out.executor = p;
  out.executor.n_ctx = found_ctx;
  out.executor.n_batch = std::min(p.n_batch, found_ctx);
  if (out.executor.n_ubatch > out.executor.n_batch) out.executor.n_ubatch = out.executor.n_batch;
  out.n_layer = n_layer;
  out.layers_on_device = found.ngl;
  out.device = found.use.device.total() > 0 ? found.use.device_name : "";
  out.device_use = found.use.device;
  out.host_use = found.use.host;
  out.configurations_tried = run.tried();
  return out;
}

#endif

}  // namespace weft
