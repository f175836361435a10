#include "kv/prefix_index.hpp"

#include <algorithm>

namespace weft::detail {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  // splitmix64's finaliser over the running hash and the next token.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

std::uint64_t hash_block(std::uint64_t prev, std::span<const Token> block) {
  std::uint64_t h = prev;
  for (Token t : block) h = mix(h, static_cast<std::uint32_t>(t));
  return h;
}

}  // namespace

void PrefixIndex::unlink(std::uint64_t hash, int seq) {
  auto it = holders_.find(hash);
  if (it == holders_.end()) return;
  auto &v = it->second;
  v.erase(std::remove(v.begin(), v.end(), seq), v.end());
  if (v.empty()) holders_.erase(it);
  --n_blocks_;
}

void PrefixIndex::update(int seq, std::span<const Token> tokens, std::uint32_t from, std::uint64_t salt) {
  auto &chain = chains_[seq];
  const std::size_t keep = std::min<std::size_t>(from / kBlock, tokens.size() / kBlock);
  while (chain.size() > keep) {
    unlink(chain.back(), seq);
    chain.pop_back();
  }
  for (std::size_t b = chain.size(); b < tokens.size() / kBlock; ++b) {
    const std::uint64_t h = hash_block(b == 0 ? salt : chain.back(), tokens.subspan(b * kBlock, kBlock));
    chain.push_back(h);
    holders_[h].push_back(seq);
    ++n_blocks_;
  }
  if (chain.empty()) chains_.erase(seq);
}

void PrefixIndex::erase(int seq) {
  auto it = chains_.find(seq);
  if (it == chains_.end()) return;
  for (std::uint64_t h : it->second) unlink(h, seq);
  chains_.erase(it);
}

std::uint32_t PrefixIndex::lookup(std::span<const Token> tokens, std::vector<int> &out, std::uint64_t salt) const {
  out.clear();
  std::uint64_t h = salt;
  std::uint32_t blocks = 0;
  for (std::size_t b = 0; (b + 1) * kBlock <= tokens.size(); ++b) {
    h = hash_block(h, tokens.subspan(b * kBlock, kBlock));
    auto it = holders_.find(h);
    if (it == holders_.end()) break;
    out = it->second;
    blocks = static_cast<std::uint32_t>(b + 1);
  }
  return blocks;
}

}  // namespace weft::detail
