#include "exec/worker.hpp"

#include "core/internal.hpp"

namespace weft::detail {

void Worker::start(std::function<StepResult()> step, std::chrono::milliseconds idle_wait,
                   std::function<void(const StepResult &)> on_step) {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) fail(Errc::invalid_argument, "the worker is already running");
  stop_ = false;
  pending_ = true;
  thread_ = std::thread([this, step = std::move(step), idle_wait, on_step = std::move(on_step)] {
    loop(step, idle_wait, on_step);
  });
}

void Worker::loop(const std::function<StepResult()> &step, std::chrono::milliseconds idle_wait,
                  const std::function<void(const StepResult &)> &on_step) {
  for (;;) {
    StepResult r;
    try {
      r = step();
    } catch (const Error &e) {
      if (e.code() == Errc::disposed) return;  // the executor is going away
      // Anything else is a bug in weft; keep serving the other conversations.
      errors_.fetch_add(1);
      r = StepResult{.idle = true};
    }
    if (on_step) {
      try {
        on_step(r);
      } catch (...) {
        // Documented: ignored.
      }
    }
    std::unique_lock lock(mu_);
    if (stop_) return;
    // Sleep only when a step found nothing runnable; new work wakes us.
    if (r.idle || (r.tokens_decoded == 0 && r.tokens_sampled == 0 && r.tokens_embedded == 0)) {
      cv_.wait_for(lock, idle_wait, [&] { return stop_ || pending_; });
      if (stop_) return;
    }
    pending_ = false;
  }
}

void Worker::stop() {
  std::thread t;
  {
    std::lock_guard lock(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
    cv_.notify_all();
    t = std::move(thread_);
  }
  if (t.get_id() == std::this_thread::get_id()) {
    t.detach();  // stop() from a callback on the worker: it ends after this step
    return;
  }
  t.join();
}

bool Worker::running() const {
  std::lock_guard lock(mu_);
  return thread_.joinable();
}

void Worker::notify() {
  std::lock_guard lock(mu_);
  pending_ = true;
  cv_.notify_one();
}

}  // namespace weft::detail
