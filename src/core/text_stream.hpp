// TextStream: a generation's text, streamed safely. Internal.
//
// Thread-safety: none; each generation owns one and uses it from the
// stepping thread only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace weft::detail {

// Incremental, UTF-8-safe text for streaming generated tokens, with stop
// strings. Holds back (1) the bytes of an incomplete UTF-8 sequence at the end
// and (2) the longest suffix that is a prefix of some stop string, so text
// once released never has to be taken back.
class TextStream {
 public:
  // Empty stop strings are refused with Errc::invalid_argument.
  explicit TextStream(std::vector<std::string> stop_strings = {});

  // Appends one token's piece; returns the text that became safe to release
  // (possibly empty). When a stop string completes, stopped() turns true, the
  // text is cut right before it (the earliest-starting match wins), the text
  // before it is released, and later pushes return "" and change nothing.
  std::string push(std::string_view piece);
  bool stopped() const noexcept { return stopped_; }
  // The stop string that matched; empty if none.
  const std::string &matched_stop() const noexcept { return matched_; }
  // Releases whatever is held back (the generation ended without a stop
  // string); an incomplete UTF-8 tail is released as-is. A stop string that
  // begins in flushed text is not detected by later pushes.
  std::string flush();
  // Everything released so far plus what is held back, cut at the stop string.
  const std::string &text() const noexcept { return text_; }
  // Bytes of text() already released; with text() and the stop strings, all
  // a state file needs to rebuild the stream (restore()).
  std::size_t released() const noexcept { return released_; }
  void restore(std::string text, std::size_t released) {
    text_ = std::move(text);
    released_ = std::min(released, text_.size());
  }

 private:
  std::vector<std::string> stops_;
  std::string text_;
  std::size_t released_ = 0;  // bytes of text_ already handed out
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace weft::detail
