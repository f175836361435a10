// The layout of V in a sequence's KV data (llama_state_seq_get_data_ext,
// flags 0): llama.cpp stores V transposed without flash attention and by
// rows with it, and refuses data of the other layout. weft chooses the
// kernel per machine and shape (FlashAttention::automatic), so a
// conversation saved by one executor may be loaded by another that chose
// differently: these convert between the two.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace weft::detail {

// Whether `data`'s V is stored transposed; nullopt if it holds no cells or
// does not parse as the pinned llama.cpp's single-stream sequence data.
std::optional<bool> v_transposed(std::span<const std::uint8_t> data);

// `data` with V in the other layout (same size, same K and cell metadata),
// or nullopt where it does not parse or V is quantised (then only flash
// attention can hold it, and no conversion is needed or possible).
std::optional<std::vector<std::uint8_t>> flip_v_layout(std::span<const std::uint8_t> data);

// `data` as a context whose V layout is `transposed` reads it: `data`
// itself, or its flipped copy in `scratch`. Unknown layouts pass as they are.
std::span<const std::uint8_t> in_v_layout(std::span<const std::uint8_t> data, std::optional<bool> transposed,
                                          std::vector<std::uint8_t> &scratch);

}  // namespace weft::detail
