// weft/types.hpp — small value types shared by the public headers.
// Plain values: no ownership, safe to copy and read from any thread.
#pragma once

#include <cstdint>

namespace weft {

// A token id of the model's vocabulary, in [0, Model::n_vocab()).
using Token = std::int32_t;

// What Conversation::tokens() holds at each position of image `id`
// (Conversation::images()): a negative value no vocabulary token has, the
// same for every position of one image and different between images.
constexpr Token image_token(std::uint64_t id) noexcept {
  return -1 - static_cast<Token>((id - 1) % 0x7FFFFFFEull);
}

}  // namespace weft
