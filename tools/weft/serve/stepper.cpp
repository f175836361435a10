// weft serve: the executor's worker and its step-time records.
#include "serve/stepper.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace weft_cli::serve {

Stepper::Stepper(weft::Executor &ex, weft::StepBudget budget) : ex_(ex), budget_(budget) {
  for (auto &s : seconds_) s.second = -1;
}

Stepper::~Stepper() { stop(); }

void Stepper::start() {
  if (started_) return;
  ex_.start({.budget = budget_,
             .idle_wait = std::chrono::milliseconds(20),
             .on_step = [this](const weft::StepResult &r) { record(r); }});
  started_ = true;
}

void Stepper::stop() {
  // Once only: the server's shutdown stops it before the executor goes, and
  // the destructor must not reach the executor after that.
  if (!started_) return;
  started_ = false;
  ex_.stop();
}

void Stepper::record(const weft::StepResult &r) {
  if (r.tokens_decoded == 0 && r.tokens_sampled == 0) return;  // parking only
  const double s = r.seconds;
  std::lock_guard lk(mu_);
  const auto b = std::lower_bound(kStepBuckets.begin(), kStepBuckets.end(), s) - kStepBuckets.begin();
  ++hist_.counts[static_cast<std::size_t>(b)];
  hist_.sum_s += s;
  ++hist_.count;
  const auto sec = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0_).count();
  auto &slot = seconds_[static_cast<std::size_t>(sec % 60)];
  if (slot.second != sec) slot = StepSecond{.second = sec};
  ++slot.steps;
  slot.tokens += r.tokens_decoded;
  slot.sum_ms += s * 1e3;
  slot.max_ms = std::max(slot.max_ms, s * 1e3);
}

StepHistogram Stepper::histogram() const {
  std::lock_guard lk(mu_);
  return hist_;
}

std::vector<StepSecond> Stepper::last_minute() const {
  const auto now = static_cast<std::int64_t>(uptime_s());
  std::lock_guard lk(mu_);
  std::vector<StepSecond> out;
  for (const auto &s : seconds_)
    if (s.second >= 0 && s.second > now - 60) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const auto &a, const auto &b) { return a.second < b.second; });
  return out;
}

double Stepper::uptime_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

}  // namespace weft_cli::serve
