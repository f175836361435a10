// Sampler::sample_masked: the grammar's draw without masking the whole
// vocabulary, where the chain only ever looks at the best k tokens.
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/internal.hpp"
#include "core/logit_scan.hpp"
#include "core/model_impl.hpp"
#include "core/sampling.hpp"

namespace weft::detail {

Token Sampler::sample_masked(std::span<const float> logits, bool ban_eog) {
  if (!grammar_ || !(fast_greedy_ || fast_top_k_)) return -1;
  check_size(logits);
  const float *p = logits.data();
  const std::size_t n = logits.size();
  bool nan = false;
  (void)max_of(p, n, nan);
  if (nan) return -1;  // the full path names it
  const auto &eog = model_.impl()->eog;
  const std::size_t k = fast_greedy_ ? 1 : std::min(static_cast<std::size_t>(params_.top_k), n);
  // A top k gave up on recent draws (a grammar admitting few tokens): the
  // full mask at once for a while, longer after each miss.
  if (k > 1 && masked_skip_ > 0) {
    --masked_skip_;
    return -1;
  }
  const auto give_up = [&] {
    if (k > 1) {
      masked_skip_ = masked_backoff_;
      masked_backoff_ = static_cast<std::uint8_t>(std::min(64, 2 * masked_backoff_));
    }
    return Token{-1};
  };
  // Token ids by logit, best first (ties: lower id first, as llama.cpp's
  // greedy stage picks), ordered a widening prefix at a time.
  thread_local std::vector<std::int32_t> order;
  thread_local std::vector<llama_token_data> checked, allowed;
  order.resize(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::int32_t>(i);
  const auto better = [p](std::int32_t a, std::int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
  allowed.clear();
  std::size_t done = 0;  // order[0, done) is sorted and checked
  // How far to look before masking it all: a greedy draw often finds its
  // token within a few hundred where a grammar admits one token in a
  // hundred (numbers), and past a quarter the full mask costs about as much;
  // k > 1 needs k allowed, which the best few thousand hold only where the
  // grammar admits many (text), so it stops sooner (a JSON schema's
  // structure, on random logits, cost 25% more when it went on to a quarter,
  // and 8% more stopping at a sixteenth: hence the backoff above).
  const std::size_t limit = fast_greedy_ ? n / 4 : n / 16;
  for (std::size_t m = std::max<std::size_t>(16 * k, 256);; m *= 4) {
    if (m > limit) return give_up();
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(done);
    const auto mid = order.begin() + static_cast<std::ptrdiff_t>(m);
    std::nth_element(first, mid, order.end(), better);
    std::sort(first, mid, better);
    // Check order[done, m) against the grammar in one call.
    checked.clear();
    for (std::size_t i = done; i < m; ++i) {
      const std::int32_t t = order[i];
      if (!(p[t] > -INFINITY)) break;  // the rest is -inf too
      if (ban_eog && std::binary_search(eog.begin(), eog.end(), t)) continue;
      checked.push_back({t, p[t], 0.0f});
    }
    if (!checked.empty()) {
      llama_token_data_array arr{checked.data(), checked.size(), -1, false};
      try {
        llama_sampler_apply(grammar_.get(), &arr);
      } catch (const std::exception &) {
        return -1;  // the full path reports it
      }
      for (const auto &c : checked) {
        if (c.logit > -INFINITY) allowed.push_back(c);
      }
    }
    done = m;
    // Decided when the best k allowed are each strictly above the next
    // allowed one and above every token not checked yet: then no other
    // token can enter them, and their order is unique.
    if (allowed.size() < k) continue;
    const float next = p[order[m]];
    bool unique = allowed[k - 1].logit > next && (allowed.size() == k || allowed[k - 1].logit > allowed[k].logit);
    for (std::size_t i = 1; unique && i < k && !fast_greedy_; ++i) unique = allowed[i - 1].logit > allowed[i].logit;
    if (!unique) continue;
    if (fast_greedy_) return allowed[0].id;
    masked_backoff_ = 1;
    llama_token_data_array arr{allowed.data(), k, -1, true};
    apply_chain(arr);
    return finish(arr);
  }
}

}  // namespace weft::detail
