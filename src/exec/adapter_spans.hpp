// AdapterSpans: which adapter setting each of a conversation's history
// positions was decoded under.
//
// A setting applies to tokens decoded after Conversation::set_adapters; what
// was decoded before keeps the KV its own setting gave. So when history is
// decoded again (recompute, a load whose KV llama.cpp refused, a re-decode
// after a remove the cache cannot shift) each position must get the
// setting it had, and a step's segment never crosses a change. Positions
// never decoded take the conversation's current setting.
//
// Cheap when no adapters are used: nothing is stored but a count. Not
// thread-safe: under the executor's state lock, like the rest of a Conv.
#pragma once

#include <cstdint>
#include <vector>

#include "core/adapter_impl.hpp"

namespace weft::detail {

class AdapterSpans {
 public:
  // The setting of position p: recorded, or `current` past what was.
  const AdapterConfigPtr &at(std::uint32_t p, const AdapterConfigPtr &current) const;
  // How many of the n positions from p decode under p's setting.
  std::uint32_t run(std::uint32_t p, std::uint32_t n, const AdapterConfigPtr &current) const;
  // Positions [p, p + n) were decoded under cfg. Positions recorded already
  // keep their setting (a re-decode uses at(), so it is the same one).
  void record(std::uint32_t p, std::uint32_t n, const AdapterConfigPtr &cfg);
  // Positions from n are gone (rewind).
  void truncate(std::uint32_t n);
  // Positions [p0, p1) are gone and later ones move down (remove).
  void erase(std::uint32_t p0, std::uint32_t p1);
  std::uint32_t end() const noexcept { return end_; }

  struct Span {
    std::uint32_t start;
    AdapterConfigPtr cfg;
  };
  // In position order; empty while every recorded position is the base
  // model's.
  const std::vector<Span> &spans() const noexcept { return spans_; }
  // Replaces everything (a loaded state).
  void assign(std::vector<Span> spans, std::uint32_t end);

 private:
  std::size_t index_of(std::uint32_t p) const;  // the span holding p (< end_, spans_ not empty)
  void merge();
  std::vector<Span> spans_;
  std::uint32_t end_ = 0;
};

}  // namespace weft::detail
