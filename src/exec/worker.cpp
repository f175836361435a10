// The background worker and the event queue.
#include <fmt/format.h>

#include "exec/executor_core.hpp"
#include "core/internal.hpp"

namespace weft {
namespace detail {

void ExecutorCore::post_event_locked(Event ev) {
  if (!params.events) return;
  std::lock_guard lock(events_mu);
  if (event_queue.size() >= params.events_capacity) {
    event_queue.pop_front();
    ++events_dropped;
  }
  event_queue.push_back(std::move(ev));
}

void ExecutorCore::worker_loop() {
  for (;;) {
    StepResult r;
    try {
      r = step(worker_params.budget);
    } catch (const Error &e) {
      if (e.code() == Errc::disposed) return;  // the executor is going away
      // Anything else is a bug in weft; keep serving the other conversations.
      r.idle = true;
    }
    std::unique_lock lock(mu);
    if (worker_stop) return;
    // Sleep only when a step found nothing runnable; new work wakes us.
    if (r.idle || (r.tokens_decoded == 0 && r.tokens_sampled == 0)) {
      work_cv.wait_for(lock, worker_params.idle_wait, [&] { return worker_stop || work_pending; });
      if (worker_stop) return;
    }
    work_pending = false;
  }
}

}  // namespace detail

void Executor::start(const WorkerParams &params) {
  auto &c = detail::live_core(core_);
  if (params.idle_wait.count() <= 0) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("WorkerParams.idle_wait = {} ms must be > 0", params.idle_wait.count()));
  }
  WorkerParams wp = params;
  wp.budget = detail::check_budget(params.budget, c.params.n_batch);
  if (params.budget.deadline) {
    detail::fail(Errc::invalid_argument, "WorkerParams.budget.deadline: an absolute deadline cannot repeat; use max_time");
  }
  std::lock_guard lock(c.mu);
  if (c.closed) detail::fail(Errc::disposed, "the executor was destroyed");
  if (c.worker.joinable()) detail::fail(Errc::invalid_argument, "the worker is already running");
  c.worker_params = wp;
  c.worker_stop = false;
  c.work_pending = true;
  c.worker = std::thread([&c] { c.worker_loop(); });
}

void Executor::stop() {
  if (!core_) return;
  auto &c = *core_;
  std::thread t;
  {
    std::lock_guard lock(c.mu);
    if (!c.worker.joinable()) return;
    c.worker_stop = true;
    c.work_cv.notify_all();
    t = std::move(c.worker);
  }
  if (t.get_id() == std::this_thread::get_id()) {
    t.detach();  // stop() from a callback on the worker: it ends after this step
    return;
  }
  t.join();
}

bool Executor::running() const {
  auto &c = detail::live_core(core_);
  std::lock_guard lock(c.mu);
  return c.worker.joinable();
}

std::vector<Event> Executor::poll_events(std::size_t max) {
  auto &c = detail::live_core(core_);
  std::lock_guard lock(c.events_mu);  // not mu: a running sampling phase holds that
  const std::size_t n = std::min(max, c.event_queue.size());
  std::vector<Event> out(std::make_move_iterator(c.event_queue.begin()),
                         std::make_move_iterator(c.event_queue.begin() + static_cast<std::ptrdiff_t>(n)));
  c.event_queue.erase(c.event_queue.begin(), c.event_queue.begin() + static_cast<std::ptrdiff_t>(n));
  return out;
}

}  // namespace weft
