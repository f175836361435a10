#include "progress.hpp"

#include <fmt/format.h>

#include <cstdio>

#include <unistd.h>

namespace weft_cli {

ProgressBar::ProgressBar(std::string label, bool enabled)
    : label_(std::move(label)), active_(enabled && ::isatty(STDERR_FILENO) != 0) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(float fraction) { update(fraction, {}); }

void ProgressBar::update(float fraction, const std::string &status) {
  if (!active_) return;
  const int percent = static_cast<int>(fraction * 100.0f + 0.5f);
  const auto now = std::chrono::steady_clock::now();
  const bool same = percent == last_percent_ && (status.empty() || now - last_draw_ < std::chrono::milliseconds(500));
  if (same || (now - last_draw_ < std::chrono::milliseconds(50) && percent < 100)) return;
  last_percent_ = percent;
  last_draw_ = now;
  constexpr int width = 30;
  const int filled = percent * width / 100;
  fmt::print(stderr, "\r{} [{}{}] {:3d}% {}\x1b[K", label_, std::string(static_cast<std::size_t>(filled), '#'),
             std::string(static_cast<std::size_t>(width - filled), '.'), percent, status);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (active_ && last_percent_ >= 0) fmt::print(stderr, "\n");
  active_ = false;
}

}  // namespace weft_cli
