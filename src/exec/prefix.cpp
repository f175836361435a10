// Pinned prefixes: token runs a game asks to keep decoded for prefix reuse.
// Each is a conversation of its own without a user handle, never evicted.
#include <fmt/format.h>

#include "core/internal.hpp"
#include "exec/executor_core.hpp"
#include "kv/prefix_index.hpp"

namespace weft {

using detail::fail;

void Executor::pin_prefix(std::span<const Token> tokens) {
  auto &x = detail::live_core(core_);
  if (!x.kv->family().cuts()) {
    fail(Errc::invalid_argument, fmt::format("pin_prefix: the model's memory is {}, which keeps no prefix to share "
                                             "(fork a conversation that holds it instead)",
                                             x.kv->family().name()));
  }
  if (!x.kv->reuse_on()) {
    fail(Errc::invalid_argument, "pin_prefix: prefix reuse is off (ExecutorParams.prefix_cache_cells = 0)");
  }
  if (tokens.size() < detail::PrefixIndex::kBlock) {
    fail(Errc::invalid_argument, fmt::format("pin_prefix: {} tokens; prefixes are shared in blocks of {}, so a pinned "
                                             "one needs at least {}",
                                             tokens.size(), detail::PrefixIndex::kBlock, detail::PrefixIndex::kBlock));
  }
  if (tokens.size() >= x.n_ctx) {
    fail(Errc::out_of_range, fmt::format("pin_prefix: {} tokens do not fit n_ctx = {} (at most n_ctx - 1, so that "
                                         "input can follow them)",
                                         tokens.size(), x.n_ctx));
  }
  for (Token t : tokens) x.model.check_token(t);
  std::vector<Token> key(tokens.begin(), tokens.end());
  {
    std::lock_guard lock(x.mu);
    if (x.closed) fail(Errc::disposed, "the executor was destroyed");
    if (x.convs.pins.count(key) > 0) {
      fail(Errc::invalid_argument, fmt::format("pin_prefix: these {} tokens are pinned already", tokens.size()));
    }
    auto [c, handle] = x.create_locked();
    handle->id = 0;  // no user handle: it lives until unpinned
    c->handle.reset();
    c->turns.pinned = true;
    try {
      x.admit_locked(*c, tokens.size());
      x.claim_slot_locked(*c, "pin a prefix");
    } catch (...) {
      x.dispose_locked(*c);
      x.settle_locked();
      throw;
    }
    c->queue.push_back(tokens);
    c->turns.ready_since = x.stats.steps;
    x.convs.pins.emplace(std::move(key), c->id);
    x.settle_locked();
  }
  x.notify_work();
}

bool Executor::unpin_prefix(std::span<const Token> tokens) {
  auto &x = detail::live_core(core_);
  {
    std::lock_guard lock(x.mu);
    auto it = x.convs.pins.find(std::vector<Token>(tokens.begin(), tokens.end()));
    if (it == x.convs.pins.end()) return false;
    const std::uint64_t id = it->second;
    x.convs.pins.erase(it);
    x.dispose_id_locked(id);
  }
  x.notify_work();
  return true;
}

}  // namespace weft
