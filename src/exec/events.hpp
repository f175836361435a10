// EventQueue: the events a game polls (ExecutorParams::events), and the
// on_token callbacks a step delivers after its work.
//
// The queue has its own lock, held only to push or pop, so poll_events()
// never waits for a step: not for its decode, its sampling or its state
// lock. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "weft/executor.hpp"

namespace weft::detail {

struct GenState;

class EventQueue {
 public:
  // enabled = ExecutorParams::events; capacity: the oldest is dropped beyond it.
  EventQueue(bool enabled, std::size_t capacity) : enabled_(enabled), capacity_(capacity) {}
  bool enabled() const noexcept { return enabled_; }
  void post(Event ev);
  std::vector<Event> poll(std::size_t max);
  std::uint64_t dropped() const;

 private:
  const bool enabled_;
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::deque<Event> queue_;
  std::uint64_t dropped_ = 0;
};

// An on_token callback to run once the step's work is done.
struct TokenCallback {
  std::shared_ptr<GenState> gen;
  Token token;
  std::string text;
  bool finished;
  std::optional<TokenLogprob> logprob;  // with GenerateParams::logprobs
};

}  // namespace weft::detail
