#include "exec/events.hpp"

namespace weft::detail {

void EventQueue::post(Event ev) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  if (queue_.size() >= capacity_) {
    queue_.pop_front();
    ++dropped_;
  }
  queue_.push_back(std::move(ev));
}

std::vector<Event> EventQueue::poll(std::size_t max) {
  std::lock_guard lock(mu_);
  const std::size_t n = std::min(max, queue_.size());
  std::vector<Event> out(std::make_move_iterator(queue_.begin()),
                         std::make_move_iterator(queue_.begin() + static_cast<std::ptrdiff_t>(n)));
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
  return out;
}

std::uint64_t EventQueue::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

}  // namespace weft::detail
