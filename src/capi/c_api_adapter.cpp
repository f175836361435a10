// The C ABI, part 5: LoRA adapters and control vectors (weft/c/adapter.h).
#include <fmt/format.h>

#include <cstddef>
#include <vector>

#include "capi/c_api_internal.hpp"

namespace weft::capi {
namespace {

static_assert(WEFT_ADAPTER_LORA == static_cast<int>(AdapterKind::lora));
static_assert(WEFT_ADAPTER_CONTROL_VECTOR == static_cast<int>(AdapterKind::control_vector));

// Sizes of every released weft_adapter_use (an array's element size is its
// first element's struct_size, so it must be one of these).
const std::initializer_list<std::size_t> kAdapterUseSizes = {sizeof(weft_adapter_use)};

std::shared_ptr<Adapter> adapter_of(const weft_adapter *a) { return get<Adapter>(a, Kind::adapter); }

weft_adapter_use use_defaults() {
  const AdapterUse d;
  weft_adapter_use u{};
  u.struct_size = sizeof u;
  u.adapter = nullptr;
  u.scale = d.scale;
  u.layer_start = d.layer_start;
  u.layer_end = d.layer_end;
  return u;
}

// The struct_size at the start of an array element (which may be an older,
// smaller weft_adapter_use than ours: read it as bytes).
std::size_t struct_size_at(const void *element) {
  std::size_t size = 0;
  std::memcpy(&size, element, sizeof size);
  return size;
}

}  // namespace
}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

const char *weft_adapter_kind_name(int32_t kind) {
  if (kind < WEFT_ADAPTER_LORA || kind > WEFT_ADAPTER_CONTROL_VECTOR) return "unknown";
  return weft::adapter_kind_name(static_cast<weft::AdapterKind>(kind));
}

weft_status weft_model_load_adapter(const weft_model *model, const char *path, weft_adapter **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto m = get<weft::Model>(model, Kind::model);
    need(path, "path");  // bytes as the OS takes them: no UTF-8 check
    auto a = std::make_shared<weft::Adapter>(m->load_adapter(path));
    *out = make_handle<weft_adapter>(Kind::adapter, std::move(a));
  });
}

weft_status weft_adapter_free(weft_adapter *adapter) { return free_handle(__func__, adapter, Kind::adapter); }

weft_status weft_adapter_get_kind(const weft_adapter *adapter, int32_t *out) {
  return guarded(__func__, [&] {
    auto a = adapter_of(adapter);
    need(out, "out");
    *out = static_cast<int32_t>(a->kind());
  });
}

weft_status weft_adapter_name(const weft_adapter *adapter, char *buf, size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] { copy_text_out(adapter_of(adapter)->name(), buf, capacity, out_len); });
}

weft_status weft_adapter_path(const weft_adapter *adapter, char *buf, size_t capacity, size_t *out_len) {
  return guarded(__func__, [&] { copy_text_out(adapter_of(adapter)->path(), buf, capacity, out_len); });
}

weft_status weft_adapter_fingerprint(const weft_adapter *adapter, uint64_t *out) {
  return guarded(__func__, [&] {
    auto a = adapter_of(adapter);
    need(out, "out");
    *out = a->fingerprint();
  });
}

weft_status weft_adapter_n_layers(const weft_adapter *adapter, int32_t *out) {
  return guarded(__func__, [&] {
    auto a = adapter_of(adapter);
    need(out, "out");
    *out = a->n_layers();
  });
}

weft_status weft_adapter_use_init(weft_adapter_use *use, size_t struct_size) {
  return guarded(__func__, [&] { init_struct(use, struct_size, "weft_adapter_use", use_defaults(), kAdapterUseSizes); });
}

weft_status weft_conversation_set_adapters(weft_conversation *conversation, const weft_adapter_use *uses, size_t n) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    std::vector<weft::AdapterUse> list;
    if (n > 0) {
      need(uses, "uses");
      const std::size_t stride = struct_size_at(uses);
      check_struct_size("weft_adapter_use", stride, kAdapterUseSizes);
      list.reserve(n);
      const auto *bytes = reinterpret_cast<const unsigned char *>(uses);
      for (std::size_t i = 0; i < n; ++i) {
        const unsigned char *element = bytes + i * stride;
        const std::size_t size = struct_size_at(element);
        if (size != stride) {
          fail(WEFT_ERR_STRUCT_SIZE, fmt::format("uses[{}].struct_size = {} differs from uses[0].struct_size = {}: "
                                                 "every element of the array must have the same size",
                                                 i, size, stride));
        }
        weft_adapter_use u = use_defaults();
        std::memcpy(static_cast<void *>(&u), element, stride);
        if (u.adapter == nullptr) fail(WEFT_ERR_NULL_ARG, fmt::format("uses[{}].adapter is NULL", i));
        std::shared_ptr<weft::Adapter> a;
        try {
          a = get<weft::Adapter>(u.adapter, Kind::adapter);
        } catch (const CError &e) {
          fail(e.status(), fmt::format("uses[{}].adapter: {}", i, e.what()));
        }
        list.push_back({.adapter = *a, .scale = u.scale, .layer_start = u.layer_start, .layer_end = u.layer_end});
      }
    }
    c->set_adapters(std::span<const weft::AdapterUse>(list));
  });
}

weft_status weft_conversation_adapters(const weft_conversation *conversation, weft_adapter_use *uses, size_t capacity,
                                       size_t *out_n) {
  return guarded(__func__, [&] {
    auto c = conv_of(conversation);
    need(out_n, "out_n");
    const std::vector<weft::AdapterUse> list = c->adapters();
    *out_n = list.size();
    if (capacity < list.size()) {
      fail(WEFT_ERR_BUFFER_TOO_SMALL, fmt::format("the output needs {} elements, capacity is {}", list.size(), capacity));
    }
    if (list.empty()) return;
    need(uses, "uses");
    const std::size_t stride = struct_size_at(uses);
    check_struct_size("weft_adapter_use", stride, kAdapterUseSizes);
    // Every handle first, so a failure leaves the caller nothing to free.
    std::vector<weft_adapter *> handles;
    handles.reserve(list.size());
    try {
      for (const auto &u : list) {
        handles.push_back(make_handle<weft_adapter>(Kind::adapter, std::make_shared<weft::Adapter>(u.adapter)));
      }
    } catch (...) {
      for (auto *h : handles) remove_handle_quietly(h, Kind::adapter);
      throw;
    }
    auto *bytes = reinterpret_cast<unsigned char *>(uses);
    for (std::size_t i = 0; i < list.size(); ++i) {
      weft_adapter_use u{};
      u.struct_size = stride;
      u.adapter = handles[i];
      u.scale = list[i].scale;
      u.layer_start = list[i].layer_start;
      u.layer_end = list[i].layer_end;
      std::memcpy(bytes + i * stride, &u, stride);
    }
  });
}

}  // extern "C"
