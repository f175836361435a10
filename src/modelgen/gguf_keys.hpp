// Reading and copying GGUF metadata keys without llama.cpp's aborts: the
// gguf_get_val_* accessors abort on a type mismatch, so every read checks
// the key's type first. Internal to the model generators.
#pragma once

#include <cstdint>
#include <string>

struct gguf_context;
struct ggml_tensor;

namespace weft::detail {

// A string key; empty when absent or not a string.
std::string gguf_str(const gguf_context *g, const char *key);
// An integer key of any integer type; -1 when absent or not an integer.
std::int64_t gguf_int(const gguf_context *g, const std::string &key);

// Copies key `i` of `src` (any type, arrays included) into `dst` under
// `name`. Throws Errc::corrupt naming `what` and the key for a type this
// gguf does not know.
void gguf_copy_key(gguf_context *dst, const char *name, const gguf_context *src, std::int64_t i,
                   const char *what = "key");

// Sum of squares of the first `rows` rows of `t`'s values in `data` (its
// bytes as stored), dequantized row by row with ggml's converters. The
// caller checks that the type converts (f32, or a to_float in its traits).
double rows_sum_squares(const ggml_tensor *t, const void *data, std::int64_t rows);

}  // namespace weft::detail
