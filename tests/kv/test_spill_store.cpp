// SpillStore (kv/spill_store): the RAM tier's buffers are reused.
#include <gtest/gtest.h>

#include <cstdint>

#include "kv/spill_store.hpp"

TEST(SpillStore, ReleasedRamBuffersAreReusedByTheNextPark) {
  using weft::detail::SpillStore;
  using weft::detail::Tier;
  SpillStore store({.ram_bytes = std::uint64_t{64} << 20});
  auto b = store.buffer(1000);
  ASSERT_EQ(b.size(), 1000u);
  EXPECT_GE(b.capacity(), 2000u);  // room for the conversation to grow
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 7);
  const std::uint8_t *data = b.data();
  auto blob = store.put(std::move(b), 1);
  ASSERT_NE(blob, nullptr);
  ASSERT_EQ(blob->tier(), Tier::ram);
  EXPECT_EQ(blob->ram().data(), data);  // no copy into the store
  EXPECT_EQ(blob->ram().size(), 1000u);
  EXPECT_EQ(blob->ram()[999], static_cast<std::uint8_t>(999 * 7));
  EXPECT_EQ(store.counters().ram_bytes.load(), 1000u);
  blob.reset();
  EXPECT_EQ(store.counters().ram_bytes.load(), 0u);
  auto again = store.buffer(1500);  // a longer blob fits the released buffer's capacity
  EXPECT_EQ(again.data(), data);
  EXPECT_EQ(again.size(), 1500u);
  auto fresh = store.buffer(1000);  // the pool is empty now
  EXPECT_NE(fresh.data(), data);
  store.recycle(std::move(again));
  store.recycle(std::move(fresh));
  EXPECT_EQ(store.buffer(5000).size(), 5000u);  // too big for either: new
}
