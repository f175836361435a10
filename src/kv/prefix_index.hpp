// PrefixIndex: which sequences hold which token prefixes, by block hashes.
//
// A sequence registers the tokens of its exact prefix (positions whose KV is
// what decoding those tokens from position 0 gives: no context shift in
// between). The index keeps one chained hash per whole block of kBlock
// tokens — block b's hash covers tokens [0, (b + 1) * kBlock) — so a lookup
// walks a query's blocks and stops at the first hash nobody holds, as vLLM's
// automatic prefix caching does. Matches are verified token by token by the
// caller (a hash collision costs a comparison, never a wrong answer).
//
// Updates are incremental: a sequence that grows hashes only its new blocks,
// one that shrinks drops its last ones. Not thread-safe: KvManager guards it.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "weft/types.hpp"

namespace weft::detail {

class PrefixIndex {
 public:
  static constexpr std::uint32_t kBlock = 16;

  // `seq` now holds exactly `tokens` as its exact prefix, decoded under the
  // adapter setting `salt` (0: the base model; chains of different salts
  // never meet); positions from `from` on may have changed since its last
  // update (from 0 when its salt changed).
  void update(int seq, std::span<const Token> tokens, std::uint32_t from, std::uint64_t salt = 0);
  void erase(int seq);
  // Sequences that hold the most whole blocks of `tokens` (at least one),
  // into `out` (cleared first); returns that block count.
  std::uint32_t lookup(std::span<const Token> tokens, std::vector<int> &out, std::uint64_t salt = 0) const;
  // Blocks registered, over all sequences (for tests and stats).
  std::size_t size() const noexcept { return n_blocks_; }

 private:
  void unlink(std::uint64_t hash, int seq);

  std::unordered_map<int, std::vector<std::uint64_t>> chains_;   // seq -> its block hashes
  std::unordered_map<std::uint64_t, std::vector<int>> holders_;  // hash -> seqs
  std::size_t n_blocks_ = 0;
};

}  // namespace weft::detail
