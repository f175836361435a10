// TextStream: streamed text that never splits a UTF-8 character or releases
// the start of a stop string that may yet complete.
#include "core/text_stream.hpp"

#include <algorithm>

#include "core/internal.hpp"

namespace weft::detail {

namespace {

// Where released text must end so that it does not split a UTF-8 sequence
// that may still complete: before the lead byte of an unfinished sequence at
// `end`, unless that lead was already released (then it was invalid anyway).
std::size_t utf8_safe_end(const std::string &s, std::size_t end, std::size_t released) {
  std::size_t lead = end;
  for (int back = 0; back < 4 && lead > 0; ++back) {
    --lead;
    if ((static_cast<unsigned char>(s[lead]) & 0xC0) != 0x80) break;
  }
  if (lead >= end) return end;
  const auto b = static_cast<unsigned char>(s[lead]);
  const std::size_t need = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
  if (need == 0 || lead + need <= end || lead < released) return end;
  return lead;
}

}  // namespace

TextStream::TextStream(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) {
      fail(Errc::invalid_argument, fmt::format("stop string #{} of {} is empty", i, stops_.size()));
    }
  }
}

std::string TextStream::push(std::string_view piece) {
  if (stopped_) return {};
  text_.append(piece);

  // A stop string can only start in the held-back part: released text never holds a possible start.
  std::size_t best = std::string::npos;
  const std::string *best_stop = nullptr;
  for (const auto &s : stops_) {
    const std::size_t at = text_.find(s, released_);
    if (at < best) {
      best = at;
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    stopped_ = true;
    matched_ = *best_stop;
    text_.resize(best);
    std::string out = text_.substr(released_);
    released_ = text_.size();
    return out;
  }

  // Hold back the longest suffix that is a proper prefix of a stop string.
  std::size_t hold = 0;
  const std::size_t open = text_.size() - released_;
  for (const auto &s : stops_) {
    for (std::size_t len = std::min(s.size() - 1, open); len > hold; --len) {
      if (std::string_view(text_).substr(text_.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  const std::size_t end = utf8_safe_end(text_, text_.size() - hold, released_);
  std::string out = text_.substr(released_, end - released_);
  released_ = end;
  return out;
}

std::string TextStream::flush() {
  std::string out = text_.substr(released_);
  released_ = text_.size();
  return out;
}

}  // namespace weft::detail
