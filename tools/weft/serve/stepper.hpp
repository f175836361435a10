// weft serve: the executor's worker, and what its steps cost.
//
// The executor's own worker (Executor::start) steps it; its on_step hands
// each step's StepResult to the step time histogram and the dashboard's
// plot. New work wakes the worker by itself; an idle worker also looks
// again every 20 ms (freed cells, cleared errors).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "weft/executor.hpp"

namespace weft_cli::serve {

// Upper bounds (seconds) of the step time histogram's buckets; +Inf follows.
inline constexpr std::array<double, 12> kStepBuckets = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                                        0.1,   0.2,   0.5,   1.0,  2.0,  5.0};

struct StepHistogram {
  std::array<std::uint64_t, kStepBuckets.size() + 1> counts{};  // not cumulative; last = +Inf
  double sum_s = 0;
  std::uint64_t count = 0;
};

// One second of steps, for the dashboard's last-minute plot.
struct StepSecond {
  std::int64_t second = 0;  // seconds since the server started
  std::uint32_t steps = 0;
  std::uint64_t tokens = 0;  // decoded
  double sum_ms = 0, max_ms = 0;
};

class Stepper {
 public:
  Stepper(weft::Executor &ex, weft::StepBudget budget);
  ~Stepper();
  Stepper(const Stepper &) = delete;
  Stepper &operator=(const Stepper &) = delete;

  // Starts the executor's worker. Not thread-safe: the server calls start()
  // and stop() from its one controlling thread.
  void start();
  // Stops the worker after the running step and joins it. Idempotent; after
  // it, the executor may go before this object.
  void stop();

  StepHistogram histogram() const;
  // Up to the last 60 seconds that had steps, oldest first.
  std::vector<StepSecond> last_minute() const;
  double uptime_s() const;

 private:
  void record(const weft::StepResult &r);

  weft::Executor &ex_;
  weft::StepBudget budget_;
  bool started_ = false;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  StepHistogram hist_;
  std::array<StepSecond, 60> seconds_{};
};

}  // namespace weft_cli::serve
