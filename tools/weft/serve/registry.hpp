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

#include "weft/conversation.hpp"
#include "weft/generation.hpp"

namespace weft_cli::serve {

struct ConvEntry {
  std::string id;
  std::string kind;  // "conversation", "chat.completion" or "text_completion"
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
  explicit Registry(std::uint32_t max_conversations) : max_(max_conversations) {}

  // Adds `conv` under `id` (empty: a new "c<n>" id). Throws ApiError 429
  // when the limit is reached, 409 when `id` is taken, 400 for an id that is
  // not 1-64 of [A-Za-z0-9_-]. Disposes `conv` when it throws.
  std::shared_ptr<ConvEntry> add(weft::Conversation conv, std::string kind, std::string id = {});
  // Throws ApiError 404 naming the id.
  std::shared_ptr<ConvEntry> get(const std::string &id) const;
  // Removes and disposes; false when there is no such id.
  bool remove(const std::string &id);
  std::vector<std::shared_ptr<ConvEntry>> list() const;
  std::size_t size() const;
  std::uint32_t limit() const { return max_; }

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<ConvEntry>> entries_;  // creation order
  std::uint64_t next_ = 1;
  std::uint32_t max_;
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
