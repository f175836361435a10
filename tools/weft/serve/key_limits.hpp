// weft serve: limits per API key on this node — generations running at
// once (--key-max-streams) and tokens in the last minute
// (--key-tokens-per-minute). A request over either is answered 429 before
// anything is queued, with Retry-After; the conversation limit per key
// lives in the registry (--key-max-conversations).
//
// Tokens are prompt tokens (counted when the request is admitted) plus
// generated ones (counted as they are handed out), and the tokens of texts
// embedded (/v1/embeddings, counted when queued). A request is admitted
// while the key's last 60 s hold fewer tokens than its limit, so the one
// that crosses it runs to its own end; the next waits until enough of the
// window has passed. Without API keys every request counts as one key ("").
//
// Thread-safety: every method may be called from any thread; a Lease is
// used by one thread at a time. Clocks are passed in so tests control time.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace weft_cli::serve {

struct KeyLimitOptions {
  std::uint32_t max_streams = 0;        // generations one key runs at once; 0: no limit
  std::uint64_t tokens_per_minute = 0;  // tokens one key uses in any 60 s; 0: no limit
};

class KeyLimits {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds window{60};

  explicit KeyLimits(KeyLimitOptions o) : opt_(o) {}
  KeyLimits(const KeyLimits &) = delete;
  KeyLimits &operator=(const KeyLimits &) = delete;

  // One admitted generation: holds its stream slot until destroyed, and
  // charges the key's tokens.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease &&o) noexcept : limits_(std::exchange(o.limits_, nullptr)), key_(std::move(o.key_)) {}
    Lease &operator=(Lease &&o) noexcept;
    ~Lease();
    void charge(std::uint64_t tokens, Clock::time_point now);

   private:
    friend class KeyLimits;
    Lease(KeyLimits *l, std::string key) : limits_(l), key_(std::move(key)) {}
    KeyLimits *limits_ = nullptr;
    std::string key_;
  };

  // Admits a generation for `key_id`, or throws ApiError 429:
  // too_many_streams (Retry-After: 1) or rate_limit_exceeded (Retry-After:
  // the seconds until the window falls under the limit).
  Lease admit(const std::string &key_id, Clock::time_point now);
  // Admits a request that runs no generation (an embeddings request): only
  // the key's tokens in the window are checked (429 rate_limit_exceeded);
  // it takes no stream slot.
  void admit_tokens(const std::string &key_id, Clock::time_point now);
  // Counts `tokens` against the key's window, as Lease::charge does.
  void charge(const std::string &key_id, std::uint64_t tokens, Clock::time_point now) { add(key_id, tokens, now); }
  // Tokens the key used in the window ending at `now`, and its running generations.
  std::uint64_t tokens_in_window(const std::string &key_id, Clock::time_point now);
  std::uint32_t streams(const std::string &key_id);

 private:
  struct Usage {
    std::uint32_t streams = 0;
    std::deque<std::pair<Clock::time_point, std::uint64_t>> charges;  // oldest first
    std::uint64_t total = 0;                                            // sum of charges
  };
  void prune(Usage &u, Clock::time_point now);
  // Throws rate_limit_exceeded when `u` (pruned) is at the key's tokens per minute.
  void check_tokens(const Usage &u, Clock::time_point now) const;
  void release(const std::string &key_id);
  void add(const std::string &key_id, std::uint64_t tokens, Clock::time_point now);
  void forget_if_idle(std::map<std::string, Usage>::iterator it);

  KeyLimitOptions opt_;
  std::mutex mu_;
  std::map<std::string, Usage> usage_;
};

}  // namespace weft_cli::serve
