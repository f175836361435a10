// Vector scans over a logits array for the sampler's fast paths
// (sampling.cpp): the maximum (and whether a NaN is there) and the first
// index of a value. Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>

namespace weft::detail {

#if defined(__GNUC__) || defined(__clang__)
using F32x4 = float __attribute__((vector_size(16)));
using I32x4 = std::int32_t __attribute__((vector_size(16)));

// p[0, 16) as four vectors (unaligned loads).
inline void load16(const float *p, F32x4 &a, F32x4 &b, F32x4 &c, F32x4 &d) {
  std::memcpy(&a, p, sizeof(F32x4));
  std::memcpy(&b, p + 4, sizeof(F32x4));
  std::memcpy(&c, p + 8, sizeof(F32x4));
  std::memcpy(&d, p + 12, sizeof(F32x4));
}
#endif

// The maximum of p[0, n) and whether any entry is NaN. `l > m ? l : m` never
// picks a NaN and is exactly one SIMD max instruction, so with GCC/Clang
// vector types the loop runs 16 floats per iteration in 4 independent lanes
// (a scalar running maximum is one serial chain: ~4 cycles a logit).
inline float max_of(const float *p, std::size_t n, bool &nan) {
  float max_logit = -INFINITY;
  std::size_t i = 0;
#if defined(__GNUC__) || defined(__clang__)
  const F32x4 lo = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  F32x4 m0 = lo, m1 = lo, m2 = lo, m3 = lo;
  I32x4 bad = {0, 0, 0, 0};
  for (; i + 16 <= n; i += 16) {
    F32x4 a, b, c, d;
    load16(p + i, a, b, c, d);
    bad |= (a != a) | (b != b) | (c != c) | (d != d);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
    m2 = c > m2 ? c : m2;
    m3 = d > m3 ? d : m3;
  }
  m0 = m1 > m0 ? m1 : m0;
  m2 = m3 > m2 ? m3 : m2;
  m0 = m2 > m0 ? m2 : m0;
  for (int k = 0; k < 4; ++k) {
    nan |= bad[k] != 0;
    max_logit = m0[k] > max_logit ? m0[k] : max_logit;
  }
#endif
  for (; i < n; ++i) {
    nan |= p[i] != p[i];
    max_logit = p[i] > max_logit ? p[i] : max_logit;
  }
  return max_logit;
}

// The first index i with p[i] == m (m is in p), 16 at a time: a vector
// compare per block (equal entries are rare), then the block scanned.
inline std::size_t find_first(const float *p, std::size_t n, float m) {
  std::size_t i = 0;
#if defined(__GNUC__) || defined(__clang__)
  const F32x4 mv = {m, m, m, m};
  for (; i + 16 <= n; i += 16) {
    F32x4 a, b, c, d;
    load16(p + i, a, b, c, d);
    const I32x4 hit = (a == mv) | (b == mv) | (c == mv) | (d == mv);
    std::uint64_t h[2];
    std::memcpy(h, &hit, sizeof(h));
    if ((h[0] | h[1]) != 0) break;
  }
#endif
  while (!(p[i] == m)) ++i;
  return i;
}

}  // namespace weft::detail
