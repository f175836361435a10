// weft serve's API keys (tools/weft/serve/keys.cpp): SHA-256 against FIPS
// 180-4's vectors and Python's hashlib, the Bearer header, key files and
// their reload, and what each key may see.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "serve/keys.hpp"
#include "weft/error.hpp"

namespace {

using namespace weft_cli::serve;

std::string hex(const Digest &d) {
  std::string s;
  for (const auto b : d) {
    const char *x = "0123456789abcdef";
    s += x[b >> 4];
    s += x[b & 15];
  }
  return s;
}

TEST(ServeKeys, Sha256Vectors) {
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Around the padding's one-or-two-block edge (hashlib).
  EXPECT_EQ(hex(sha256(std::string(55, 'a'))), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(hex(sha256(std::string(56, 'a'))), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(hex(sha256(std::string(64, 'a'))), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  EXPECT_EQ(hex(sha256(std::string(119, 'a'))), "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb");
  EXPECT_EQ(key_id("key-alice-0123456789"), "f82ed249117cbb38d189bb742ad45f93");
}

TEST(ServeKeys, BearerHeader) {
  EXPECT_EQ(bearer_token("Bearer abc"), "abc");
  EXPECT_EQ(bearer_token("bearer   abc  "), "abc");
  EXPECT_EQ(bearer_token("BEARER abc"), "abc");
  EXPECT_EQ(bearer_token("Basic abc"), "");
  EXPECT_EQ(bearer_token("Bearer"), "");
  EXPECT_EQ(bearer_token(""), "");
}

TEST(ServeKeys, WithoutKeysEveryoneIsAnAdminWithNoId) {
  const KeyRing ring(KeyOptions{});
  EXPECT_FALSE(ring.enabled());
  const auto k = ring.check("");
  EXPECT_EQ(k.verdict, KeyVerdict::ok);
  EXPECT_TRUE(k.caller.admin);
  EXPECT_EQ(k.caller.key_id, "");
  EXPECT_TRUE(k.caller.may_use(""));
}

TEST(ServeKeys, EachKeySeesItsOwnAdminsSeeAll) {
  const KeyRing ring(KeyOptions{.api_keys = {"key-alice-0123456789", "key-bob-0123456789ab"},
                                .admin_keys = {"key-admin-0123456789"}});
  EXPECT_TRUE(ring.enabled());
  EXPECT_EQ(ring.size(), 3u);
  EXPECT_EQ(ring.admins(), 1u);
  EXPECT_EQ(ring.check("").verdict, KeyVerdict::missing);
  EXPECT_EQ(ring.check("Bearer key-alice-012345678X").verdict, KeyVerdict::wrong);
  EXPECT_EQ(ring.check("Bearer key-alice-0123456789x").verdict, KeyVerdict::wrong);
  const auto a = ring.check("Bearer key-alice-0123456789");
  const auto b = ring.check("Bearer key-bob-0123456789ab");
  const auto admin = ring.check("Bearer key-admin-0123456789");
  ASSERT_EQ(a.verdict, KeyVerdict::ok);
  ASSERT_EQ(b.verdict, KeyVerdict::ok);
  ASSERT_EQ(admin.verdict, KeyVerdict::ok);
  EXPECT_EQ(a.caller.key_id, key_id("key-alice-0123456789"));
  EXPECT_FALSE(a.caller.admin);
  EXPECT_TRUE(admin.caller.admin);
  EXPECT_TRUE(a.caller.may_use(a.caller.key_id));
  EXPECT_FALSE(a.caller.may_use(b.caller.key_id));
  EXPECT_FALSE(a.caller.may_use(""));  // made without keys: admins only
  EXPECT_TRUE(admin.caller.may_use(a.caller.key_id));
  EXPECT_TRUE(admin.caller.may_use(""));
}

TEST(ServeKeys, BadKeysAreRefusedWithoutBeingEchoed) {
  try {
    KeyRing ring(KeyOptions{.api_keys = {"key-alice-0123456789", "short-secret"}});
    FAIL() << "a 12-character key was taken";
  } catch (const weft::Error &e) {
    EXPECT_EQ(e.code(), weft::Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("--api-key #2: the key is 12 characters; keys are 16-512"), std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("short-secret"), std::string::npos);
  }
  EXPECT_THROW(KeyRing(KeyOptions{.admin_keys = {"key with a space in it"}}), weft::Error);
  EXPECT_THROW(KeyRing(KeyOptions{.metrics_key = std::string(513, 'k')}), weft::Error);
}

TEST(ServeKeys, KeyFileAndReload) {
  const auto path = std::filesystem::temp_directory_path() / ("weft-test-keys-" + std::to_string(::getpid()) + ".txt");
  auto write_keys = [&](const std::string &text) { std::ofstream(path) << text; };
  write_keys("# the team\n\n  key-alice-0123456789  \r\nadmin key-admin-0123456789\n");
  KeyRing ring(KeyOptions{.key_file = path.string()});
  EXPECT_EQ(ring.size(), 2u);
  EXPECT_EQ(ring.admins(), 1u);
  EXPECT_EQ(ring.check("Bearer key-alice-0123456789").verdict, KeyVerdict::ok);
  EXPECT_TRUE(ring.check("Bearer key-admin-0123456789").caller.admin);
  EXPECT_EQ(ring.check("Bearer key-bob-0123456789ab").verdict, KeyVerdict::wrong);
  // Bob added, Alice removed.
  write_keys("key-bob-0123456789ab\nadmin key-admin-0123456789\n");
  EXPECT_EQ(ring.reload(), 2u);
  EXPECT_EQ(ring.check("Bearer key-bob-0123456789ab").verdict, KeyVerdict::ok);
  EXPECT_EQ(ring.check("Bearer key-alice-0123456789").verdict, KeyVerdict::wrong);
  // A bad line: the reload throws naming the line, and the keys stay.
  write_keys("key-carol-0123456789\ntoo-short\n");
  try {
    ring.reload();
    FAIL() << "a bad key file was taken";
  } catch (const weft::Error &e) {
    EXPECT_NE(std::string(e.what()).find("line 2: the key is 9 characters"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ring.check("Bearer key-bob-0123456789ab").verdict, KeyVerdict::ok);
  EXPECT_EQ(ring.check("Bearer key-carol-0123456789").verdict, KeyVerdict::wrong);
  // An empty file: keys stay on, and nothing is accepted.
  write_keys("# nobody\n");
  EXPECT_EQ(ring.reload(), 0u);
  EXPECT_TRUE(ring.enabled());
  EXPECT_EQ(ring.check("Bearer key-bob-0123456789ab").verdict, KeyVerdict::wrong);
  std::filesystem::remove(path);
  try {
    ring.reload();
    FAIL() << "a missing key file was taken";
  } catch (const weft::Error &e) {
    EXPECT_EQ(e.code(), weft::Errc::io);
  }
}

// Requests check keys on the server's threads while SIGHUP reloads the file
// on the main thread: every check sees one whole key set, the old or the new
// (Alice's key is in both, Bob's only in the second). Under TSan (the tsan
// preset runs the serve label) this found the set freed mid-check.
TEST(ServeKeys, ChecksDuringReloadsSeeOneWholeSet) {
  const auto path = std::filesystem::temp_directory_path() / ("weft-test-keys-race-" + std::to_string(::getpid()) + ".txt");
  const std::string sets[2] = {"key-alice-0123456789\nkey-carol-0123456789\n",
                               "key-alice-0123456789\nkey-bob-0123456789ab\nadmin key-admin-0123456789\n"};
  std::ofstream(path) << sets[0];
  KeyRing ring(KeyOptions{.key_file = path.string()});
  std::atomic<bool> stop{false};
  std::atomic<int> wrong_alice{0}, checks{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        if (ring.check("Bearer key-alice-0123456789").verdict != KeyVerdict::ok) ++wrong_alice;
        const auto bob = ring.check("Bearer key-bob-0123456789ab").verdict;
        if (bob != KeyVerdict::ok && bob != KeyVerdict::wrong) ++wrong_alice;
        ++checks;
      }
    });
  }
  for (int i = 0; i < 300; ++i) {
    std::ofstream(path) << sets[i % 2];
    ring.reload();
  }
  stop = true;
  for (auto &t : readers) t.join();
  std::filesystem::remove(path);
  EXPECT_EQ(wrong_alice.load(), 0);
  EXPECT_GT(checks.load(), 0);
}

TEST(ServeKeys, MetricsKey) {
  const KeyRing ring(KeyOptions{.api_keys = {"key-alice-0123456789"}, .admin_keys = {"key-admin-0123456789"},
                                .metrics_key = "key-metrics-0123456"});
  EXPECT_EQ(ring.check_metrics("Bearer key-metrics-0123456").verdict, KeyVerdict::ok);
  EXPECT_EQ(ring.check_metrics("Bearer key-admin-0123456789").verdict, KeyVerdict::ok);
  EXPECT_EQ(ring.check_metrics("Bearer key-alice-0123456789").verdict, KeyVerdict::wrong);
  EXPECT_EQ(ring.check_metrics("").verdict, KeyVerdict::missing);
  // The metrics key is for /metrics only.
  EXPECT_EQ(ring.check("Bearer key-metrics-0123456").verdict, KeyVerdict::wrong);
  // Without API keys, /metrics still needs the metrics key.
  const KeyRing metrics_only(KeyOptions{.metrics_key = "key-metrics-0123456"});
  EXPECT_EQ(metrics_only.check_metrics("Bearer key-alice-0123456789").verdict, KeyVerdict::wrong);
  EXPECT_EQ(metrics_only.check_metrics("Bearer key-metrics-0123456").verdict, KeyVerdict::ok);
  EXPECT_EQ(metrics_only.check("").verdict, KeyVerdict::ok);
}

}  // namespace
