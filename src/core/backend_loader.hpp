// Loads ggml's CPU backend once per process (weft/backend.hpp says which).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/backend.hpp"

namespace weft::detail {

// The backend loaded on the first call, or the Error that loading gave, the
// same for every later caller. Called by ensure_backend() before llama.cpp's
// own initialisation (a fixed build's ISA check must come first). Thread-safe.
const CpuBackend &loaded_cpu_backend();

// The names in `required` ("avx2,fma,...", as WEFT_CPU_REQUIRES lists what a
// fixed build of llama.cpp uses) for which `has` is false, in order.
std::vector<std::string> missing_cpu_features(std::string_view required,
                                              const std::function<bool(std::string_view)> &has);

// Whether the loaded CPU backend reports `feature` ("AMX_INT8", ...) in its
// features list: what it was compiled for (-march=native, or the variant),
// the same in a static and a portable build. False before it is loaded.
bool cpu_backend_has(const char *feature);

}  // namespace weft::detail
