// weft serve: where conversations live between nodes (--store URL).
//
// A store keeps, per conversation id, the state bytes (Conversation::save())
// and a small record: the version (how many times it was written; 0 = never),
// the node that wrote it last (the one holding it), the owner (the id of the
// API key that made it, keys.hpp; empty without keys), and the advance lease —
// the one node allowed to advance it now, until an expiry. A node takes the
// lease before a turn (acquire) and gives it back with the turn's state
// (commit, a compare-and-set on the version), so two nodes never advance the
// same conversation at once, and a node whose copy is older than the
// store's notices and reloads.
//
//   dir:///path          one file per conversation and version, and a record
//                        file changed under flock(2) (DirStore)
//   redis://host:port/db two keys per conversation, changed by Lua scripts,
//                        which Redis runs atomically (RedisStore, hiredis)
//
// Thread-safety: every method may be called from any thread (each store
// serializes its own calls).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace weft_cli::serve {

enum class StoreErrc {
  unavailable,  // the store cannot be reached or read (the reason says why)
  leased,       // another node holds the advance lease (the message names it)
  conflict,     // the stored version moved on: another node advanced it
  too_large,    // the state is larger than --store-max-bytes
  corrupt,      // a record the store cannot read
};

class StoreError : public std::runtime_error {
 public:
  StoreError(StoreErrc c, const std::string &message, std::string holder_ = {}, std::int64_t retry_ms_ = 0)
      : std::runtime_error(message), code(c), holder(std::move(holder_)), retry_ms(retry_ms_) {}
  StoreErrc code;
  std::string holder;     // leased: the node holding the lease
  std::int64_t retry_ms;  // leased: how long until it expires
};

struct StoreRecord {
  std::uint64_t version = 0;  // 0: nothing stored under this id
  std::string holder;         // the node that wrote the current version
  std::uint64_t bytes = 0;    // size of the current state
  std::string owner;          // the key id that owns it; empty: none
};

struct StoredState {
  std::uint64_t version = 0;
  std::vector<std::uint8_t> bytes;
  std::string owner;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // Takes (or renews) the advance lease on `id` for `node` for `lease`:
  // allowed when nobody holds it, when it expired, or when `node` holds it.
  // A conversation not stored (version 0) is not leased; its record says so.
  // Throws StoreError leased / unavailable.
  virtual StoreRecord acquire(const std::string &id, const std::string &node, std::chrono::milliseconds lease) = 0;
  // The stored state, or nullopt when there is none. Throws unavailable.
  virtual std::optional<StoredState> load(const std::string &id) = 0;
  // The record alone (version 0: none), changing nothing. Throws unavailable.
  virtual StoreRecord peek(const std::string &id) = 0;
  // Writes `bytes` as version `expected + 1` when the stored version is
  // `expected` (0: the id must be new) and no other node holds a live lease;
  // records `node` as the holder and `owner`, and ends the lease. Returns the
  // new version. Throws conflict / leased / too_large / unavailable.
  virtual std::uint64_t commit(const std::string &id, const std::string &node, std::uint64_t expected,
                               const std::vector<std::uint8_t> &bytes, const std::string &owner) = 0;
  // Extends `node`'s lease on `id` by `lease` only while it still holds a
  // live one (a turn still running): never takes a lease a commit or
  // release ended meanwhile. Returns whether it did. Throws unavailable.
  virtual bool renew(const std::string &id, const std::string &node, std::chrono::milliseconds lease) = 0;
  // Ends `node`'s lease on `id`, if it holds one. Throws unavailable.
  virtual void release(const std::string &id, const std::string &node) = 0;
  // Deletes the state and its record (refused, leased, while another node
  // holds a live lease). Throws leased / unavailable.
  virtual void remove(const std::string &id, const std::string &node) = 0;
  // Throws unavailable when the store cannot be reached.
  virtual void ping() = 0;
  // "dir:///path", "redis://host:port/db".
  virtual std::string describe() const = 0;
  std::uint64_t max_bytes() const { return max_bytes_; }

 protected:
  explicit StateStore(std::uint64_t max_bytes) : max_bytes_(max_bytes) {}
  // Throws too_large naming both sizes.
  void check_size(const std::string &id, std::size_t n) const;

 private:
  std::uint64_t max_bytes_;
};

// From --store: "dir:///path" or "redis://host[:port][/db]". Throws
// weft::Error(invalid_argument) for another scheme, or for redis:// in a
// build without hiredis. Does not connect: an unreachable store is found
// (and said) at the first request, and the server starts anyway.
std::unique_ptr<StateStore> open_store(const std::string &url, std::uint64_t max_bytes);

std::unique_ptr<StateStore> open_dir_store(const std::string &path, std::uint64_t max_bytes);
std::unique_ptr<StateStore> open_redis_store(const std::string &host, int port, int db, std::uint64_t max_bytes);

}  // namespace weft_cli::serve
