// Reading and copying GGUF metadata keys without llama.cpp's aborts: the
// gguf_get_val_* accessors abort on a type mismatch, so every read checks
// the key's type first. Internal to the model generators.
#pragma once

#include <cstdint>
#include <string>

struct gguf_context;

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

}  // namespace weft::detail
