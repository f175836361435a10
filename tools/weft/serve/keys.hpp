// weft serve: API keys (--api-key, --admin-key, --api-key-file,
// --metrics-key) and who a request is (a Caller). Keys are kept only as
// SHA-256 digests; a request's key is hashed and compared with every
// configured digest in full (no early exit), so the time taken says nothing
// about how much of a key was right. A key's id — what a conversation
// records as its owner, here and in the state store — is the first 128 bits
// of that digest in hex: never the key itself.
//
// Thread-safety: every method may be called from any thread; reload()
// swaps the key set whole, so a request sees the old set or the new one.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace weft_cli::serve {

using Digest = std::array<std::uint8_t, 32>;

// SHA-256 (FIPS 180-4).
Digest sha256(std::string_view data);
// The first 16 bytes of sha256(key), as 32 lower-case hex digits.
std::string key_id(std::string_view key);
// True when a and b are equal, comparing every byte.
bool digests_equal(const Digest &a, const Digest &b);

// Who made a request: the key's id, and whether it is an admin key. Without
// any keys configured every caller is an admin with no id (the server is
// open, and conversations have no owner).
struct Caller {
  std::string key_id;
  bool admin = false;
  // Whether this caller may use a conversation owned by `owner`.
  bool may_use(const std::string &owner) const { return admin || (!owner.empty() && owner == key_id); }
};

enum class KeyVerdict { ok, missing, wrong };

struct KeyCheck {
  KeyVerdict verdict = KeyVerdict::missing;
  Caller caller;
};

struct KeyOptions {
  std::vector<std::string> api_keys;    // --api-key
  std::vector<std::string> admin_keys;  // --admin-key
  std::string key_file;                 // --api-key-file: one key a line, "admin KEY" for an admin key
  std::string metrics_key;              // --metrics-key
};

class KeyRing {
 public:
  // Keys are 16-512 printable ASCII characters without spaces. Throws
  // weft::Error(invalid_argument) naming the option or file line of a bad
  // key (never the key), io for an unreadable key file.
  explicit KeyRing(const KeyOptions &o);

  // Any API key source given (a key file with no keys in it included: then
  // every request is refused). False: the server is open.
  bool enabled() const { return enabled_; }
  bool has_key_file() const { return !file_.empty(); }
  const std::string &key_file() const { return file_; }
  bool has_metrics_key() const { return has_metrics_; }

  // Reads the key file again. Throws as the constructor does, keeping the
  // keys it had. Returns how many keys are now accepted.
  std::size_t reload();
  // How many keys are accepted, and how many of them are admin keys.
  std::size_t size() const;
  std::size_t admins() const;

  // `authorization`: the request's Authorization header ("Bearer KEY"), empty when absent.
  KeyCheck check(std::string_view authorization) const;
  // /metrics: with --metrics-key, that key or an admin key; else as check().
  KeyCheck check_metrics(std::string_view authorization) const;

 private:
  struct Entry {
    Digest digest;
    bool admin;
  };
  using Set = std::vector<Entry>;
  std::shared_ptr<const Set> read_all() const;  // fixed keys + the file's; throws
  std::shared_ptr<const Set> current() const;

  std::vector<Entry> fixed_;  // from the command line
  std::string file_;
  bool enabled_ = false;
  bool has_metrics_ = false;
  Digest metrics_{};
  mutable std::mutex mu_;
  std::shared_ptr<const Set> set_;
};

// The token of an "Authorization: Bearer TOKEN" header (the scheme in any
// case), or empty.
std::string_view bearer_token(std::string_view authorization);

}  // namespace weft_cli::serve
