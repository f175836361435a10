// Worker: the background thread that steps an executor (Executor::start).
//
// It steps while there is work and sleeps (up to idle_wait) when a step found
// nothing to do, until notify() says something may have become runnable.
// Thread-safe; its lock is taken after the executor's state lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "weft/executor.hpp"

namespace weft::detail {

class Worker {
 public:
  ~Worker() { stop(); }
  // Throws Errc::invalid_argument when already running.
  // `on_step` (may be empty) gets each step's result on the worker thread.
  void start(std::function<StepResult()> step, std::chrono::milliseconds idle_wait,
             std::function<void(const StepResult &)> on_step = {});
  // Joins the thread; from the worker itself (a callback), detaches it and
  // it ends after the running step.
  void stop();
  bool running() const;
  void notify();
  // Steps that threw (a weft bug; the worker carried on), since it was made.
  std::uint64_t errors() const { return errors_.load(); }

 private:
  void loop(const std::function<StepResult()> &step, std::chrono::milliseconds idle_wait,
            const std::function<void(const StepResult &)> &on_step);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool stop_ = false;
  bool pending_ = false;  // something may have become runnable
  std::atomic<std::uint64_t> errors_{0};
};

}  // namespace weft::detail
