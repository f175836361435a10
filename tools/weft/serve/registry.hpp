// weft serve: the live conversations by id, with the server's limit on how
// many there may be. Conversations made by /v1/conversations stay until
// DELETE; those behind one chat or completion request ("ephemeral") go when
// the request ends. Both count against --max-conversations and both show on
// the dashboard.
//
// Thread-safety: every method may be called from any HTTP thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "serve/keys.hpp"
#include "weft/conversation.hpp"
#include "weft/generation.hpp"

namespace weft_cli::serve {

class ApiError;

// A new conversation id: "conv_" and 128 bits from the kernel's CSPRNG
// (getrandom) as 32 hex digits. Throws weft::Error(io) if it has none.
std::string random_conversation_id();
// The 404 for an id that is not there — or not the caller's: the two read
// the same, so ids are no oracle.
ApiError conversation_not_found(const std::string &id);

struct ConvEntry {
  std::string id;
  std::string kind;  // "conversation", "chat.completion" or "text_completion"
  std::string owner;  // the id of the key that made it (keys.hpp); empty without keys
  weft::Conversation conv;
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();

  // The running request's generation, if any (guarded by mu).
  std::optional<weft::Generation> generation() const;
  // Claims the conversation for one generating request; false when another
  // holds it (the caller answers 409). release() gives it back.
  bool try_claim();
  void set_generation(const weft::Generation &g);
  void release();
  // Tokens per second over the last second or so (the dashboard's column).
  double tokens_per_second();

 private:
  mutable std::mutex mu;
  std::optional<weft::Generation> gen;
  bool busy = false;
  std::chrono::steady_clock::time_point rate_t = std::chrono::steady_clock::now();
  std::uint32_t rate_tokens = 0;
  double rate = 0;
  friend class Registry;
};

class Registry {
 public:
  // `max_per_owner`: --key-max-conversations (0: none).
  Registry(std::uint32_t max_conversations, std::uint32_t max_per_owner)
      : max_(max_conversations), max_per_owner_(max_per_owner) {}

  // Adds `conv` under `id` (empty: random_conversation_id()), owned by
  // `owner`. Throws ApiError 429 when the limit is reached (or, when `fresh`
  // — made now, not loaded — the owner's), 409 when `id` is taken, 400 for an
  // id that is not 1-64 of [A-Za-z0-9_-]. Disposes `conv` when it throws.
  std::shared_ptr<ConvEntry> add(weft::Conversation conv, std::string kind, std::string id = {},
                                 std::string owner = {}, bool fresh = false);
  // Throws ApiError 404 naming the id.
  std::shared_ptr<ConvEntry> get(const std::string &id) const;
  // The same, and 404 when `who` may not use it.
  std::shared_ptr<ConvEntry> get(const std::string &id, const Caller &who) const;
  // Null when there is no such id.
  std::shared_ptr<ConvEntry> find(const std::string &id) const;
  // Removes and disposes; false when there is no such id.
  bool remove(const std::string &id);
  std::vector<std::shared_ptr<ConvEntry>> list() const;
  std::size_t size() const;
  std::uint32_t limit() const { return max_; }

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<ConvEntry>> entries_;  // creation order
  std::uint32_t max_, max_per_owner_;
};

// Disposes an ephemeral conversation when a request ends, however it ends.
class EphemeralGuard {
 public:
  EphemeralGuard(Registry &r, std::string id) : r_(&r), id_(std::move(id)) {}
  ~EphemeralGuard() {
    if (r_ != nullptr) r_->remove(id_);
  }
  EphemeralGuard(const EphemeralGuard &) = delete;
  EphemeralGuard &operator=(const EphemeralGuard &) = delete;

 private:
  Registry *r_;
  std::string id_;
};

}  // namespace weft_cli::serve
