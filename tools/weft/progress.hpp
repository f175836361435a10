// A one-line progress bar on stderr, drawn only when stderr is a terminal.
#pragma once

#include <chrono>
#include <string>

namespace weft_cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label, bool enabled = true);
  ~ProgressBar();
  void update(float fraction);  // [0, 1]; redraws at most ~20 times a second
  // As update(), with a short status after the percentage ("loss 1.23").
  void update(float fraction, const std::string &status);
  void finish();

 private:
  std::string label_;
  bool active_;
  int last_percent_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace weft_cli
