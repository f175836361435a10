// What a Memory handle names (weft/memory.hpp). Internal.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "weft/memory.hpp"

namespace weft::detail {

struct MemoryState {
  struct Entry {
    std::uint64_t id = 0;
    std::string text, metadata;
    std::vector<float> vector;  // empty until embedded
    Embedding pending;          // its queued embedding (an empty handle when none)
    bool queued = false;
  };
  mutable std::mutex mu;
  std::uint64_t next_id = 1;
  std::uint32_t dims = 0;
  std::uint64_t source = 0;    // the embedder's identity (embedder_identity); 0: none yet
  std::vector<Entry> entries;  // ascending id

  // Moves the vectors that arrived into their entries (under mu).
  void settle_locked();
  // Exact top-k by cosine similarity (under mu, settled).
  std::vector<MemoryHit> search_locked(std::span<const float> query, std::size_t k) const;
};

// A query being embedded (MemorySearch).
struct MemoryQuery {
  std::shared_ptr<MemoryState> store;
  Embedding query;
  std::size_t k = 0;
};

// Who makes an executor's vectors: its embedding model's fingerprint, the
// pooling and normalisation. Throws Errc::invalid_argument without an embedder.
std::uint64_t embedder_identity(const Executor &executor);

}  // namespace weft::detail
