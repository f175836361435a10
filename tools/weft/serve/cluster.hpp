// weft serve: conversations shared by several nodes through a state store
// (--store). Without a store every method is a no-op and the server is what
// it was: conversations live on the node that made them.
//
// With one: a conversation is written to the store (Conversation::save()
// bytes) after each completed turn — a message, a rewind, a PUT state — and
// when it is made or forked; a node asked for a conversation it does not
// hold loads it from the store; before a turn the node takes the store's
// advance lease on it (another node holding it: 409 conversation_leased)
// and, when the store's version is newer than its copy, reloads it first;
// the turn's state goes back with a compare-and-set on the version, which
// also ends the lease. A turn that does not complete (cancelled, timed out,
// a client gone) is not written, and the node's copy is marked stale, so the
// next turn starts from the store's.
//
// The store unreachable: what needs it (a conversation this node does not
// hold, creating one, deleting one) is 503 store_unavailable with the
// reason; conversations the node holds go on, their writes deferred; a
// background thread writes them (compare-and-set) once the store is back. A
// deferred write that finds the version moved lost to another node: the
// node's copy is dropped and the store's kept.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "serve/api_error.hpp"
#include "serve/registry.hpp"
#include "serve/state_store.hpp"

namespace weft_cli::serve {

struct ServeContext;

// One turn's hold on a conversation: the lease (when the store could be
// reached) and the conversation, fresh from the store if need be.
struct Turn {
  std::shared_ptr<ConvEntry> entry;
  std::uint32_t n_before = 0;  // tokens before the turn
  bool leased = false;         // the store's lease is this node's for the turn
  bool done = false;           // committed or abandoned
};

class Cluster {
 public:
  // `store` null: no store.
  Cluster(ServeContext &ctx, std::unique_ptr<StateStore> store, std::string node_id, std::chrono::milliseconds lease);
  ~Cluster();
  Cluster(const Cluster &) = delete;
  Cluster &operator=(const Cluster &) = delete;

  bool enabled() const { return store_ != nullptr; }
  const std::string &node_id() const { return node_; }

  // The conversation: this node's, else loaded from the store (no lease:
  // reading only). Throws ApiError 404 (also when `who` may not use it:
  // another key's conversation is not even loaded) / 503.
  std::shared_ptr<ConvEntry> find(const std::string &id, const Caller &who);
  // Before a turn on `id` (see the file comment). `if_version` (a request's
  // "if_version"): the turn goes ahead only when the store holds that
  // version, else 409 version_mismatch naming the stored one — so a client
  // that retries a turn whose reply it lost never applies it twice. Throws
  // ApiError 404 (also another key's, by this node's copy or the store's
  // record) / 409 conversation_busy, conversation_leased or
  // version_mismatch / 503 store_unavailable.
  Turn begin_turn(const std::string &id, const Caller &who, std::optional<std::uint64_t> if_version = std::nullopt);
  // After a completed turn: writes the state. Returns what the reply says
  // of the store ({"version", "holder"} or {"deferred": reason}), null
  // without a store. Throws ApiError: 409 conflict (another node advanced it;
  // this node's copy is dropped), 507 state_too_large (the turn is undone).
  Json commit(Turn &t);
  // A turn that did not complete: the lease goes back, the copy is stale.
  void abandon(Turn &t) noexcept;
  // A new conversation (create, fork): claims the id in the store (version
  // 1). Throws ApiError 409 conflict (the id is taken elsewhere) / 503; the
  // caller removes it from the registry then.
  Json publish(ConvEntry &e);
  // PUT state: writes `e` (just loaded) as the store's next version, under
  // the lease. Throws ApiError 404 (the stored one has another owner than
  // e's) / 409 / 503 / 507.
  Json replace(ConvEntry &e);
  // The owner the store records for `id`; nullopt without a store or when
  // it holds no such id. Throws ApiError 503.
  std::optional<std::string> stored_owner(const std::string &id);
  // DELETE: from the store too; true when the store had it. Throws ApiError
  // 404 (another key's) / 409 / 503.
  bool remove(const std::string &id, const Caller &who);
  // {"store": url or null, "node": id, "store_ok": bool, "store_error": reason, "deferred": n}.
  Json health();
  // Facts on one conversation for GET /v1/conversations/{id}.
  Json describe(const std::string &id);

  // What the store cost, for /metrics: per operation, how many, their
  // seconds in all, and the state bytes moved.
  enum Op { op_acquire, op_save, op_write, op_read, op_restore, op_count };
  static const char *op_name(int op);
  struct OpStats {
    std::uint64_t n = 0;
    double seconds = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<OpStats> op_stats();

 private:
  // Writes e's whole state as the version after `expected` and records it
  // (publish, replace). Throws StoreError.
  Json write_whole(ConvEntry &e, std::uint64_t expected);
  struct Local {
    std::uint64_t version = 0;  // the store's version this copy matches (or grew from, while dirty)
    bool dirty = false;         // turns not written yet (the store was unreachable)
    bool stale = false;         // a turn did not complete: reload before the next
    std::uint32_t leases = 0;   // turns on this node holding the lease
  };
  [[noreturn]] void raise(const StoreError &e, const std::string &id);
  std::shared_ptr<ConvEntry> load_into_registry(const std::string &id, const StoredState &s);
  void note_store(bool ok, const std::string &why);
  void keeper();  // renews leases of running turns, writes deferred ones, watches the store

  ServeContext &ctx_;
  std::unique_ptr<StateStore> store_;
  std::string node_;
  std::chrono::milliseconds lease_;
  std::mutex mu_;  // local_, and loads into the registry
  std::map<std::string, Local> local_;
  std::mutex health_mu_;
  bool store_ok_ = true;
  std::string store_error_;
  std::atomic<bool> stop_{false};
  std::condition_variable_any wake_;
  std::mutex wake_mu_;
  std::thread keeper_;
  std::mutex stats_mu_;
  OpStats stats_[op_count];
  void count(Op op, std::chrono::steady_clock::time_point since, std::uint64_t bytes = 0);
};

}  // namespace weft_cli::serve
