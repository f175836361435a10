// Misuse and damaged input are typed errors that say what is wrong — never a
// crash or a misleading message (issue 12, items 7-10).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "common.hpp"
#include "reference.hpp"
#include "exec/test_access.hpp"
#include "state/state_codec.hpp"
#include "weft/executor.hpp"

using weft::Errc;
using weft_test::throws_weft;

namespace {

weft::ExecutorParams params() { return {.n_ctx = 512, .n_batch = 64, .n_seq_max = 4, .n_threads = 2}; }

std::vector<weft::Token> tokens(int n) {
  std::vector<weft::Token> t;
  for (int i = 0; i < n; ++i) t.push_back(100 + i);
  return t;
}

void fix_crc(std::vector<std::uint8_t> &b) {
  const auto crc = weft::detail::crc32(std::span(b).first(b.size() - 4));
  std::memcpy(b.data() + b.size() - 4, &crc, 4);
}

// A valid conversation record and a snapshot holding it (pure codec, no model).
std::vector<std::uint8_t> conv_blob() {
  weft::detail::ConvRecord r;
  r.queue = tokens(5);
  return weft::detail::encode_conversation(r, 0, 32000);
}
std::vector<std::uint8_t> snap_blob() { return weft::detail::encode_snapshot({{7, conv_blob()}}, 0); }

using Decode = void (*)(const std::vector<std::uint8_t> &);
void decode_conv(const std::vector<std::uint8_t> &b) { (void)weft::detail::decode_conversation(b, 0, 32000, 4096); }
void decode_snap(const std::vector<std::uint8_t> &b) { (void)weft::detail::decode_snapshot(b, 0); }
std::vector<std::pair<std::vector<std::uint8_t>, Decode>> blobs() {
  return {{conv_blob(), decode_conv}, {snap_blob(), decode_snap}};
}

}  // namespace

// Item 7: a moved-from Executor throws Errc::disposed from every member.
TEST(MovedFromExecutor, EveryMemberThrowsDisposed) {
  weft::Executor a(weft_test::tiny(), params());
  weft::Executor b(std::move(a));
  const std::string moved = "the executor was moved from";
  const std::vector<std::uint8_t> none;
  const auto dir = weft_test::temp_dir("moved-from");
  const auto file = (dir / "all.weft").string();
  EXPECT_TRUE(throws_weft([&] { (void)a.step(); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.step({.max_tokens = 0}); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.stats(); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.cells_free(); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.model(); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.params(); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { a.start(); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.running(); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.poll_events(); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.load(none); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.load(file); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.save_all(); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { a.save_all(file); }, Errc::disposed, moved));
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_TRUE(throws_weft([&] { (void)a.load_all(none); }, Errc::disposed, moved));
  EXPECT_TRUE(throws_weft([&] { (void)a.load_all(file); }, Errc::disposed, moved));
  EXPECT_NO_THROW(a.stop());  // a no-op, as the destructor is
  EXPECT_TRUE(weft::detail::TestAccess::moved_from(a));

  // The executor it moved into works; assigning one revives a moved-from one.
  auto c = b.create();
  c.prompt(tokens(10));
  EXPECT_EQ(b.step().tokens_decoded, 10u);
  a = std::move(b);
  EXPECT_EQ(a.stats().tokens_decoded, 10u);
  EXPECT_TRUE(throws_weft([&] { (void)b.stats(); }, Errc::disposed, moved));
  c.prompt(tokens(3));
  EXPECT_EQ(a.step().tokens_decoded, 3u);
}

TEST(MovedFromExecutor, CreateThrowsDisposed) {
  weft::Executor a(weft_test::tiny(), params());
  weft::Executor b(std::move(a));
  EXPECT_TRUE(throws_weft([&] { (void)a.create(); }, Errc::disposed, "the executor was moved from"));
  EXPECT_NO_THROW((void)b.create());
}

// Item 8: max_tokens = 0 means n_batch in C++ as in the C ABI and C#.
TEST(StepBudgetZero, MeansNBatchForStepsAndTheWorker) {
  for (std::optional<std::uint32_t> max : {std::optional<std::uint32_t>{}, std::optional<std::uint32_t>{0u},
                                           std::optional<std::uint32_t>{64u}}) {
    weft::Executor ex(weft_test::tiny(), params());
    auto c = ex.create();
    c.prompt(tokens(100));
    EXPECT_EQ(ex.step({.max_tokens = max}).tokens_decoded, 64u) << (max ? static_cast<int>(*max) : -1);
  }
  weft::Executor ex(weft_test::tiny(), params());
  EXPECT_TRUE(throws_weft([&] { ex.step({.max_tokens = 65}); }, Errc::invalid_argument, "n_batch = 64"));
  EXPECT_TRUE(throws_weft([&] { ex.start({.budget = {.max_tokens = 65}}); }, Errc::invalid_argument, "n_batch = 64"));
  auto c = ex.create();
  c.prompt(tokens(100));
  ASSERT_NO_THROW(ex.start({.budget = {.max_tokens = 0}, .idle_wait = std::chrono::milliseconds(5)}));
  const auto t0 = std::chrono::steady_clock::now();
  while (ex.stats().queued_tokens > 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ex.stop();
  EXPECT_EQ(ex.stats().tokens_decoded, 100u);
}

// Item 9: a directory is named as one, not as a path that "does not exist".
TEST(ModelLoad, DirectoryIsNamedAsADirectory) {
  const auto dir = weft_test::temp_dir("model-dir");
  EXPECT_TRUE(throws_weft([&] { (void)weft::Model::load({.path = dir.string()}); }, Errc::invalid_argument,
                          "'" + dir.string() + "' is a directory"));
  EXPECT_TRUE(throws_weft([&] { (void)weft::Model::load({.path = (dir / "none.gguf").string()}); }, Errc::not_found,
                          "none.gguf' does not exist"));
  // State files read the same way.
  weft::Executor ex(weft_test::tiny(), params());
  EXPECT_TRUE(throws_weft([&] { (void)ex.load(dir.string()); }, Errc::invalid_argument, "is a directory"));
  EXPECT_TRUE(throws_weft([&] { (void)ex.load_all(dir.string()); }, Errc::invalid_argument, "is a directory"));
}

// Item 10: damaged version bytes are corruption (the CRC is checked first);
// an intact state of another version is incompatible.
TEST(StateVersion, DamagedVersionBytesAreCorrupt) {
  for (auto [blob, decode] : blobs()) {
    ASSERT_NO_THROW(decode(blob));
    for (std::size_t byte = 8; byte < 12; ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        auto bad = blob;
        bad[byte] ^= static_cast<std::uint8_t>(1u << bit);
        EXPECT_TRUE(throws_weft([&] { decode(bad); }, Errc::corrupt, "checksum mismatch")) << byte << ":" << bit;
      }
    }
  }
}

TEST(StateVersion, AnotherVersionWithAValidCrcIsIncompatible) {
  for (auto [blob, decode] : blobs()) {
    for (std::uint32_t v : {0u, weft::detail::kStateVersion + 1, 0x100u, 0xFFFFFFFFu}) {
      auto other = blob;
      std::memcpy(other.data() + 8, &v, 4);
      fix_crc(other);
      EXPECT_TRUE(throws_weft([&] { decode(other); }, Errc::incompatible, "format version " + std::to_string(v)))
          << v;
    }
  }
}

TEST(StateVersion, ThroughTheExecutor) {
  weft::Executor ex(weft_test::tiny(), params());
  auto c = ex.create();
  c.prompt(tokens(8));
  (void)ex.step();
  auto blob = c.save();
  blob[9] ^= 0x40;  // version 5 -> 0x4005
  EXPECT_TRUE(throws_weft([&] { (void)ex.load(blob); }, Errc::corrupt, "checksum mismatch"));
  fix_crc(blob);
  EXPECT_TRUE(throws_weft([&] { (void)ex.load(blob); }, Errc::incompatible, "format version 16389"));
  auto snap = ex.save_all();
  snap[8] ^= 0x02;  // version 5 -> 7
  EXPECT_TRUE(throws_weft([&] { (void)ex.load_all(snap); }, Errc::corrupt, "checksum mismatch"));
  EXPECT_EQ(ex.stats().conversations, 1u);
}

// Version 4 (before M-RoPE images) differs only in each image's grid
// width: without images its bytes are version 5's. Version 3 (before images)
// had no image fields, version 2 (before adapters) no adapter fields either,
// version 1 (before prefix reuse) no kv_exact / kv_from either: all still
// read. (tests/exec/media/test_images_mrope.cpp loads a version 4 image.)
TEST(StateVersion, VersionsOneToFourStillLoad) {
  weft::Executor ex(weft_test::tiny(), params());
  auto c = ex.create();
  const auto toks = tokens(40);
  c.prompt(toks);
  (void)ex.step();
  auto v5 = c.save();
  const std::size_t kv_bytes = [&] {
    std::uint64_t n;
    // kv size sits before the KV data and the CRC; the KV data is the rest.
    for (std::size_t at = 12; at + 12 <= v5.size(); ++at) {
      std::memcpy(&n, v5.data() + at, 8);
      if (at + 8 + n + 4 == v5.size()) return static_cast<std::size_t>(n);
    }
    return std::size_t{0};
  }();
  ASSERT_GT(kv_bytes, 0u);
  const std::size_t kv_size_at = v5.size() - 4 - kv_bytes - 8;
  // Without images, version 4's image fields are 16 bytes: projector
  // fingerprint, n_embd, no images. Before them, without adapters, version
  // 3's adapter fields are 16 bytes: no settings, current -1, adapter end,
  // no spans; before those kv_exact and kv_from.
  for (std::uint8_t version : {std::uint8_t{4}, std::uint8_t{3}, std::uint8_t{2}, std::uint8_t{1}}) {
    SCOPED_TRACE(version);
    auto old = v5;
    const std::size_t cut = version == 4 ? 0 : version == 3 ? 16 : version == 2 ? 32 : 40;
    old.erase(old.begin() + static_cast<std::ptrdiff_t>(kv_size_at - cut),
              old.begin() + static_cast<std::ptrdiff_t>(kv_size_at));
    old[8] = version;
    fix_crc(old);
    auto back = ex.load(old);
    EXPECT_EQ(back.tokens(), toks);
    EXPECT_TRUE(back.adapters().empty());
    EXPECT_LT(weft_test::nmse(back.logits(), c.logits()), weft_test::logits_tolerance(weft_test::tiny()));
  }
}
