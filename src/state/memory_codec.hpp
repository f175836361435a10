// A Memory store's bytes (weft/memory.hpp): its entries, ids and the
// embedder its vectors came from. Internal; pure: no llama.cpp calls.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace weft::detail {

inline constexpr std::uint32_t kMemoryVersion = 1;
inline constexpr std::uint32_t kMaxMemoryEntries = 1u << 24;
inline constexpr std::uint32_t kMaxMemoryDims = 1u << 16;
// A conversation state's memory (state version 14) is bounded by this.
inline constexpr std::uint64_t kMaxMemoryBytes = 1ull << 32;

struct MemoryRecord {
  std::uint64_t next_id = 1;
  std::uint64_t source = 0;  // the embedder's identity; 0: none yet
  std::uint32_t dims = 0;
  struct Entry {
    std::uint64_t id = 0;
    std::string text, metadata;
    std::vector<float> vector;  // empty or dims floats
  };
  std::vector<Entry> entries;  // ascending id
};

std::vector<std::uint8_t> encode_memory(const MemoryRecord &r);
// Throws Errc::corrupt (magic, checksum, truncation, bounds, ids out of
// order, a vector of another width, a non-finite float) and
// Errc::incompatible (an intact store of another format version).
MemoryRecord decode_memory(std::span<const std::uint8_t> bytes);

}  // namespace weft::detail
