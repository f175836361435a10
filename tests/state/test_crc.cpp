// The state format's CRC-32: the standard check value, and the same result as
// a bytewise reference at every length and alignment.
#include <gtest/gtest.h>

#include <random>
#include <string_view>
#include <vector>

#include "state/state_codec.hpp"

namespace {

std::uint32_t bytewise(std::span<const std::uint8_t> bytes) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::uint8_t b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

}  // namespace

TEST(Crc32, MatchesTheStandardAndABytewiseReference) {
  constexpr std::string_view check = "123456789";
  EXPECT_EQ(weft::detail::crc32({reinterpret_cast<const std::uint8_t *>(check.data()), check.size()}), 0xCBF43926u);
  EXPECT_EQ(weft::detail::crc32({}), 0u);
  std::mt19937 rng(5);
  std::vector<std::uint8_t> buf(300);
  for (auto &b : buf) b = static_cast<std::uint8_t>(rng());
  for (std::size_t offset = 0; offset < 9; ++offset) {
    for (std::size_t n = 0; n + offset <= buf.size(); n += 7) {
      const auto s = std::span(buf).subspan(offset, n);
      ASSERT_EQ(weft::detail::crc32(s), bytewise(s)) << "offset " << offset << " length " << n;
    }
  }
}
