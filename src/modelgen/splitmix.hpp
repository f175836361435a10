// splitmix64: tiny, seedable and identical on every platform, for the
// generated weights, corpus and training order. Internal.
#pragma once

#include <cmath>
#include <numbers>
#include <cstdint>
#include <string_view>
#include <vector>

namespace weft::detail {

struct SplitMix64 {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // In (0, 1), never 0 (safe under log()).
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
};

// The seed of a tensor's own stream: FNV-1a of its name over the seed.
inline std::uint64_t hash_name(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Normals (Box-Muller) of standard deviation `std` from the tensor's own
// stream, so a file's bytes do not depend on the order tensors are written.
inline void fill_normal(std::vector<float> &v, std::uint64_t seed, std::string_view name, double std) {
  SplitMix64 rng{hash_name(seed, name)};
  for (std::size_t i = 0; i < v.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(rng.uniform()));
    const double t = 2.0 * std::numbers::pi * rng.uniform();
    v[i] = static_cast<float>(r * std::cos(t) * std);
    if (i + 1 < v.size()) v[i + 1] = static_cast<float>(r * std::sin(t) * std);
  }
}

}  // namespace weft::detail
