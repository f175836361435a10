// weft serve: API keys.
#include "serve/keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include "weft/error.hpp"

namespace weft_cli::serve {

namespace {

constexpr std::uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress(std::uint32_t h[8], const std::uint8_t *block) {
  std::uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = std::uint32_t(block[4 * i]) << 24 | std::uint32_t(block[4 * i + 1]) << 16 |
           std::uint32_t(block[4 * i + 2]) << 8 | std::uint32_t(block[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

// A key from the command line or the file: 16-512 of '!'..'~'.
void check_key(std::string_view key, const std::string &where) {
  if (key.size() < 16 || key.size() > 512)
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("{}: the key is {} characters; keys are 16-512 printable ASCII characters "
                                  "without spaces", where, key.size()));
  for (const char ch : key)
    if (ch < '!' || ch > '~')
      throw weft::Error(weft::Errc::invalid_argument,
                        fmt::format("{}: the key holds byte 0x{:02x}; keys are 16-512 printable ASCII characters "
                                    "without spaces", where, static_cast<unsigned char>(ch)));
}

}  // namespace

Digest sha256(std::string_view data) {
  std::uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto *p = reinterpret_cast<const std::uint8_t *>(data.data());
  std::size_t n = data.size();
  while (n >= 64) {
    compress(h, p);
    p += 64;
    n -= 64;
  }
  // The tail, 0x80, zeros, and the length in bits (big-endian): one or two blocks.
  std::uint8_t last[128] = {};
  std::copy(p, p + n, last);
  last[n] = 0x80;
  const std::size_t blocks = n + 9 > 64 ? 2 : 1;
  const std::uint64_t bits = std::uint64_t(data.size()) * 8;
  for (int i = 0; i < 8; ++i) last[blocks * 64 - 1 - i] = static_cast<std::uint8_t>(bits >> (8 * i));
  for (std::size_t b = 0; b < blocks; ++b) compress(h, last + 64 * b);
  Digest out;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<std::uint8_t>(h[i] >> (24 - 8 * j));
  return out;
}

bool digests_equal(const Digest &a, const Digest &b) {
  std::uint8_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = static_cast<std::uint8_t>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

std::string key_id(std::string_view key) {
  const Digest d = sha256(key);
  std::string s;
  for (int i = 0; i < 16; ++i) s += fmt::format("{:02x}", d[i]);
  return s;
}

std::string_view bearer_token(std::string_view h) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  h = trim(h);
  if (h.size() < 7) return {};
  constexpr std::string_view scheme = "bearer ";
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(h[i])) != scheme[i]) return {};
  return trim(h.substr(7));
}

KeyRing::KeyRing(const KeyOptions &o) : file_(o.key_file) {
  for (std::size_t i = 0; i < o.api_keys.size(); ++i) {
    check_key(o.api_keys[i], fmt::format("--api-key #{}", i + 1));
    fixed_.push_back({sha256(o.api_keys[i]), false});
  }
  for (std::size_t i = 0; i < o.admin_keys.size(); ++i) {
    check_key(o.admin_keys[i], fmt::format("--admin-key #{}", i + 1));
    fixed_.push_back({sha256(o.admin_keys[i]), true});
  }
  if (!o.metrics_key.empty()) {
    check_key(o.metrics_key, "--metrics-key");
    metrics_ = sha256(o.metrics_key);
    has_metrics_ = true;
  }
  enabled_ = !fixed_.empty() || !file_.empty();
  set_ = read_all();
}

std::shared_ptr<const KeyRing::Set> KeyRing::read_all() const {
  auto set = std::make_shared<Set>(fixed_);
  if (file_.empty()) return set;
  std::ifstream in(file_);
  if (!in) throw weft::Error(weft::Errc::io, fmt::format("--api-key-file {}: cannot be read", file_));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string_view s = line;
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    if (s.empty() || s.front() == '#') continue;
    bool admin = false;
    if (s.rfind("admin ", 0) == 0 || s.rfind("admin\t", 0) == 0) {
      admin = true;
      s.remove_prefix(6);
      while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    }
    check_key(s, fmt::format("--api-key-file {} line {}", file_, n));
    set->push_back({sha256(s), admin});
  }
  if (in.bad()) throw weft::Error(weft::Errc::io, fmt::format("--api-key-file {}: cannot be read", file_));
  return set;
}

std::shared_ptr<const KeyRing::Set> KeyRing::current() const {
  std::lock_guard lk(mu_);
  return set_;
}

std::size_t KeyRing::reload() {
  auto set = read_all();
  const std::size_t n = set->size();
  std::lock_guard lk(mu_);
  set_ = std::move(set);
  return n;
}

std::size_t KeyRing::size() const { return current()->size(); }

std::size_t KeyRing::admins() const {
  std::size_t n = 0;
  const auto set = current();
  for (const auto &e : *set) n += e.admin ? 1 : 0;
  return n;
}

KeyCheck KeyRing::check(std::string_view authorization) const {
  if (!enabled_) return {KeyVerdict::ok, Caller{.key_id = {}, .admin = true}};
  const std::string_view token = bearer_token(authorization);
  if (token.empty()) return {KeyVerdict::missing, {}};
  const Digest d = sha256(token);
  // Every entry, every byte: no early exit. The set is held for the loop:
  // `for (e : *current())` let a SIGHUP reload free it mid-loop (the
  // shared_ptr temporary dies before the loop runs; TSan, serve_keys).
  bool found = false, admin = false;
  const auto set = current();
  for (const auto &e : *set) {
    const bool eq = digests_equal(d, e.digest);
    found |= eq;
    admin |= (eq && e.admin);
  }
  if (!found) return {KeyVerdict::wrong, {}};
  return {KeyVerdict::ok, Caller{.key_id = key_id(token), .admin = admin}};
}

KeyCheck KeyRing::check_metrics(std::string_view authorization) const {
  if (!has_metrics_) return check(authorization);
  const std::string_view token = bearer_token(authorization);
  if (token.empty()) return {KeyVerdict::missing, {}};
  if (digests_equal(sha256(token), metrics_)) return {KeyVerdict::ok, Caller{}};
  if (enabled_) {
    KeyCheck k = check(authorization);
    if (k.verdict == KeyVerdict::ok && k.caller.admin) return k;
  }
  return {KeyVerdict::wrong, {}};
}

}  // namespace weft_cli::serve
