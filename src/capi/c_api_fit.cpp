// The C ABI, memory fitting (weft/c/fit.h): weft::fit_memory.
#include <fmt/format.h>

#include "capi/c_api_internal.hpp"
#include "weft/memory_fit.hpp"

using namespace weft::capi;

namespace {

weft_fit_params fit_defaults() {
  const weft::ExecutorParams e;
  weft_fit_params d{};
  d.struct_size = sizeof d;
  d.device_bytes = 0;
  d.host_bytes = 0;
  d.spill_ram_bytes = e.spill.ram_bytes;
  d.n_ctx = e.n_ctx;
  d.min_n_ctx = weft::MemoryFitRequest{}.min_n_ctx;
  d.n_batch = e.n_batch;
  d.n_ubatch = e.n_ubatch;
  d.n_seq_max = e.n_seq_max;
  d.kv_type = WEFT_KV_F16;
  d.flash_attn = WEFT_FLASH_ATTN_AUTO;
  return d;
}

std::int32_t checked_enum(std::int32_t value, std::int32_t last, const char *field, const char *type) {
  if (value < 0 || value > last) fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("{} = {} is not a {}", field, value, type));
  return value;
}

weft_fit_bytes bytes_of(const weft::MemoryUse &u) { return {u.weights, u.kv, u.compute, u.spill, u.total()}; }

}  // namespace

extern "C" {

weft_status weft_fit_params_init(weft_fit_params *params, size_t struct_size) {
  return guarded(__func__, [&] { init_struct(params, struct_size, "weft_fit_params", fit_defaults(), {sizeof(weft_fit_params)}); });
}

weft_status weft_fit_choose(const char *model_path, const weft_fit_params *params, weft_fit_result *out) {
  return guarded(__func__, [&] {
    need(out, "out");
    check_struct_size("weft_fit_result", out->struct_size, {sizeof(weft_fit_result)});  // before the dry runs
    need(model_path, "model_path");
    weft_fit_params p = fit_defaults();
    if (params != nullptr) read_struct(params, "weft_fit_params", p, {sizeof(weft_fit_params)});
    weft::MemoryFitRequest r;
    r.model_path = model_path;  // bytes as the OS takes them, as weft_model_load
    r.budget = {p.device_bytes, p.host_bytes};
    r.executor.spill.ram_bytes = p.spill_ram_bytes;
    r.executor.n_ctx = p.n_ctx;
    r.executor.n_batch = p.n_batch;
    r.executor.n_ubatch = p.n_ubatch;
    r.executor.n_seq_max = p.n_seq_max;
    r.executor.kv_type = static_cast<weft::KvType>(
        checked_enum(p.kv_type, WEFT_KV_IQ4_NL, "weft_fit_params.kv_type", "weft_kv_type"));
    r.executor.flash_attn = static_cast<weft::FlashAttention>(
        checked_enum(p.flash_attn, WEFT_FLASH_ATTN_DISABLED, "weft_fit_params.flash_attn", "weft_flash_attn"));
    r.min_n_ctx = p.min_n_ctx;
    const weft::MemoryFit fit = weft::fit_memory(r);
    weft_fit_result res{};
    res.n_gpu_layers = fit.model.n_gpu_layers;
    res.n_ctx = fit.executor.n_ctx;
    res.n_batch = fit.executor.n_batch;
    res.n_layer = fit.n_layer;
    res.layers_on_device = fit.layers_on_device;
    res.device = bytes_of(fit.device_use);
    res.host = bytes_of(fit.host_use);
    write_struct(out, "weft_fit_result", res, {sizeof(weft_fit_result)});
  });
}

}  // extern "C"
