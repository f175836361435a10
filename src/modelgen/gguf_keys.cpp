#include "modelgen/gguf_keys.hpp"

#include <ggml.h>
#include <gguf.h>

#include <cstring>

#include <fmt/format.h>

#include <vector>

#include "core/internal.hpp"

namespace weft::detail {

std::string gguf_str(const gguf_context *g, const char *key) {
  const int64_t id = gguf_find_key(g, key);
  if (id < 0 || gguf_get_kv_type(g, id) != GGUF_TYPE_STRING) return {};
  return gguf_get_val_str(g, id);
}

std::int64_t gguf_int(const gguf_context *g, const std::string &key) {
  const int64_t id = gguf_find_key(g, key.c_str());
  if (id < 0) return -1;
  switch (gguf_get_kv_type(g, id)) {
    case GGUF_TYPE_UINT8: return gguf_get_val_u8(g, id);
    case GGUF_TYPE_INT8: return gguf_get_val_i8(g, id);
    case GGUF_TYPE_UINT16: return gguf_get_val_u16(g, id);
    case GGUF_TYPE_INT16: return gguf_get_val_i16(g, id);
    case GGUF_TYPE_UINT32: return gguf_get_val_u32(g, id);
    case GGUF_TYPE_INT32: return gguf_get_val_i32(g, id);
    case GGUF_TYPE_UINT64: return static_cast<int64_t>(gguf_get_val_u64(g, id));
    case GGUF_TYPE_INT64: return gguf_get_val_i64(g, id);
    default: return -1;
  }
}

void gguf_copy_key(gguf_context *dst, const char *name, const gguf_context *src, std::int64_t i, const char *what) {
  switch (const gguf_type type = gguf_get_kv_type(src, i)) {
    case GGUF_TYPE_UINT8: gguf_set_val_u8(dst, name, gguf_get_val_u8(src, i)); break;
    case GGUF_TYPE_INT8: gguf_set_val_i8(dst, name, gguf_get_val_i8(src, i)); break;
    case GGUF_TYPE_UINT16: gguf_set_val_u16(dst, name, gguf_get_val_u16(src, i)); break;
    case GGUF_TYPE_INT16: gguf_set_val_i16(dst, name, gguf_get_val_i16(src, i)); break;
    case GGUF_TYPE_UINT32: gguf_set_val_u32(dst, name, gguf_get_val_u32(src, i)); break;
    case GGUF_TYPE_INT32: gguf_set_val_i32(dst, name, gguf_get_val_i32(src, i)); break;
    case GGUF_TYPE_FLOAT32: gguf_set_val_f32(dst, name, gguf_get_val_f32(src, i)); break;
    case GGUF_TYPE_UINT64: gguf_set_val_u64(dst, name, gguf_get_val_u64(src, i)); break;
    case GGUF_TYPE_INT64: gguf_set_val_i64(dst, name, gguf_get_val_i64(src, i)); break;
    case GGUF_TYPE_FLOAT64: gguf_set_val_f64(dst, name, gguf_get_val_f64(src, i)); break;
    case GGUF_TYPE_BOOL: gguf_set_val_bool(dst, name, gguf_get_val_bool(src, i)); break;
    case GGUF_TYPE_STRING: gguf_set_val_str(dst, name, gguf_get_val_str(src, i)); break;
    case GGUF_TYPE_ARRAY: {
      const gguf_type at = gguf_get_arr_type(src, i);
      const std::size_t n = gguf_get_arr_n(src, i);
      if (at == GGUF_TYPE_STRING) {
        std::vector<const char *> strs(n);
        for (std::size_t j = 0; j < n; ++j) strs[j] = gguf_get_arr_str(src, i, j);
        gguf_set_arr_str(dst, name, strs.data(), n);
      } else {
        gguf_set_arr_data(dst, name, at, gguf_get_arr_data(src, i), n);
      }
      break;
    }
    default: fail(Errc::corrupt, fmt::format("{} '{}' has unknown type {}", what, name, int(type)));
  }
}

double rows_sum_squares(const ggml_tensor *t, const void *data, std::int64_t rows) {
  const int64_t ne0 = t->ne[0];
  const std::size_t row_bytes = ggml_row_size(t->type, ne0);
  const auto *traits = ggml_get_type_traits(t->type);
  std::vector<float> row(static_cast<std::size_t>(ne0));
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const char *src = static_cast<const char *>(data) + static_cast<std::size_t>(r) * row_bytes;
    if (t->type == GGML_TYPE_F32) std::memcpy(row.data(), src, row_bytes);
    else traits->to_float(src, row.data(), ne0);
    for (float x : row) sum += double(x) * double(x);
  }
  return sum;
}

}  // namespace weft::detail
