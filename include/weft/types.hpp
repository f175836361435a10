// weft/types.hpp — small value types shared by the public headers.
// Plain values: no ownership, safe to copy and read from any thread.
#pragma once

#include <cstdint>

namespace weft {

// A token id of the model's vocabulary, in [0, Model::n_vocab()).
using Token = std::int32_t;

}  // namespace weft
