#include "exec/adapter_spans.hpp"

#include <algorithm>

namespace weft::detail {
namespace {

const AdapterConfigPtr kBase;

}  // namespace

std::size_t AdapterSpans::index_of(std::uint32_t p) const {
  auto it = std::upper_bound(spans_.begin(), spans_.end(), p, [](std::uint32_t v, const Span &s) { return v < s.start; });
  return static_cast<std::size_t>(it - spans_.begin()) - 1;
}

const AdapterConfigPtr &AdapterSpans::at(std::uint32_t p, const AdapterConfigPtr &current) const {
  if (p >= end_) return current;
  return spans_.empty() ? kBase : spans_[index_of(p)].cfg;
}

std::uint32_t AdapterSpans::run(std::uint32_t p, std::uint32_t n, const AdapterConfigPtr &current) const {
  if (p >= end_) return n;
  const AdapterConfig *mine = at(p, current).get();
  std::uint32_t stop = end_;  // where p's setting ends among recorded positions
  if (!spans_.empty()) {
    for (std::size_t i = index_of(p) + 1; i < spans_.size(); ++i) {
      if (!same_adapters(spans_[i].cfg.get(), mine)) {
        stop = spans_[i].start;
        break;
      }
    }
  }
  if (stop == end_ && same_adapters(current.get(), mine)) return n;
  return std::min(n, stop - p);
}

void AdapterSpans::record(std::uint32_t p, std::uint32_t n, const AdapterConfigPtr &cfg) {
  const std::uint32_t to = p + n;
  if (to <= end_) return;
  if (spans_.empty() && cfg == nullptr) {
    end_ = to;  // the base model all along: nothing to store
    return;
  }
  if (spans_.empty()) spans_.push_back({0, nullptr});
  if (end_ == 0) {
    spans_.back().cfg = cfg;  // nothing recorded yet: the first span is cfg's
  } else if (!same_adapters(spans_.back().cfg.get(), cfg.get())) {
    spans_.push_back({end_, cfg});  // every span holds a position: starts stay increasing
  }
  end_ = to;
}

void AdapterSpans::truncate(std::uint32_t n) {
  end_ = std::min(end_, n);
  while (!spans_.empty() && spans_.back().start >= end_) spans_.pop_back();
  merge();
}

void AdapterSpans::erase(std::uint32_t p0, std::uint32_t p1) {
  p0 = std::min(p0, end_);
  p1 = std::min(p1, end_);
  if (p0 >= p1) return;
  const std::uint32_t gone = p1 - p0;
  for (Span &s : spans_) {
    if (s.start >= p1) {
      s.start -= gone;
    } else if (s.start > p0) {
      s.start = p0;  // its positions before p1 went; the rest (if any) start at p0
    }
  }
  end_ -= gone;
  // Spans squeezed to nothing: of equal starts the last one holds.
  std::vector<Span> kept;
  for (std::size_t i = 0; i < spans_.size(); ++i) {
    if (spans_[i].start >= end_ && end_ > 0) continue;
    if (i + 1 < spans_.size() && spans_[i + 1].start == spans_[i].start) continue;
    kept.push_back(std::move(spans_[i]));
  }
  spans_ = std::move(kept);
  merge();
}

void AdapterSpans::merge() {
  std::size_t out = 0;
  for (std::size_t i = 0; i < spans_.size(); ++i) {
    if (out > 0 && same_adapters(spans_[out - 1].cfg.get(), spans_[i].cfg.get())) continue;
    if (out != i) spans_[out] = std::move(spans_[i]);
    ++out;
  }
  spans_.resize(out);
  if (end_ == 0 || (spans_.size() == 1 && spans_[0].cfg == nullptr)) spans_.clear();
}

void AdapterSpans::assign(std::vector<Span> spans, std::uint32_t end) {
  spans_ = std::move(spans);
  end_ = end;
  truncate(end);
}

}  // namespace weft::detail
