// Conversation: the handle's operations on the executor's shared state.
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>

#include "exec/executor_core.hpp"
#include "core/internal.hpp"

namespace weft {
namespace detail {

ConvHandle::~ConvHandle() {
  // The last user handle is gone: nobody can reach the conversation again.
  try {
    auto kv = core->kv_lock();
    std::lock_guard lock(core->mu);
    auto it = core->convs.find(id);
    if (it != core->convs.end()) core->dispose_locked(*it->second);
  } catch (...) {
    // A destructor must not throw; locking cannot fail in practice.
  }
}

namespace {

ExecutorCore &core_of(const std::shared_ptr<ConvHandle> &h) {
  if (!h) fail(Errc::disposed, "empty Conversation handle");
  return *h->core;
}

// Runs fn(core, conv) under mu.
template <class Fn>
auto with_conv(const std::shared_ptr<ConvHandle> &h, Fn &&fn) {
  auto &core = core_of(h);
  std::lock_guard lock(core.mu);
  return fn(core, core.get(h->id));
}

// Runs fn(core, conv) at a step boundary (or at once on the stepping thread).
template <class Fn>
auto with_conv_kv(const std::shared_ptr<ConvHandle> &h, Fn &&fn) {
  auto &core = core_of(h);
  auto kv = core.kv_lock();
  std::lock_guard lock(core.mu);
  return fn(core, core.get(h->id));
}

std::uint64_t queued_total(const ExecutorCore &core) {
  std::uint64_t n = 0;
  for (auto &[id, c] : core.convs) n += c->n_queued();
  return n;
}

}  // namespace

void ExecutorCore::claim_slot_locked(Conv &c, const char *what) {
  if (!free_seqs.empty()) {
    c.seq = free_seqs.back();
    free_seqs.pop_back();
    return;
  }
  if (spill_on()) return;  // a step parks someone for it
  fail(Errc::out_of_range,
       fmt::format("conversation {}: cannot {}: all n_seq_max = {} sequence slots are held and spill is off "
                   "(ram_bytes = 0, no disk_dir, recompute = false), so none can be freed for it; dispose a "
                   "conversation or enable a spill tier",
                   c.id, what, params.n_seq_max));
}

namespace {

void release_slot_if_empty(ExecutorCore &core, Conv &c) {
  if (c.seq >= 0 && c.history.empty() && c.n_queued() == 0) {
    core.free_seqs.push_back(c.seq);
    c.seq = -1;
  }
}

}  // namespace
}  // namespace detail

using detail::Conv;
using detail::ExecutorCore;

std::uint64_t Conversation::id() const {
  detail::core_of(handle_);
  return handle_->id;
}

void Conversation::prompt(std::string_view text, const PromptOptions &options) {
  auto &core = detail::core_of(handle_);
  const auto tokens = core.model.tokenize(text, {.add_bos = options.add_bos, .parse_special = options.parse_special});
  if (tokens.empty()) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("conversation {}: prompt text of {} bytes gives no tokens", handle_->id, text.size()));
  }
  prompt(tokens);
}

void Conversation::prompt(std::span<const Token> tokens) {
  auto &core = detail::core_of(handle_);
  if (tokens.empty()) detail::fail(Errc::invalid_argument, fmt::format("conversation {}: empty prompt", handle_->id));
  for (Token t : tokens) core.model.check_token(t);
  detail::with_conv(handle_, [&](ExecutorCore &x, Conv &c) {
    if (c.gen) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("conversation {} is generating; cancel or wait before prompting", c.id));
    }
    const std::uint64_t total = std::uint64_t(c.n_decoded()) + c.n_queued() + tokens.size();
    if (total > x.n_ctx) {
      detail::fail(Errc::out_of_range,
                   fmt::format("conversation {}: {} tokens ({} decoded + {} queued + {} new) exceed n_ctx = {}", c.id,
                               total, c.n_decoded(), c.n_queued(), tokens.size(), x.n_ctx));
    }
    if (x.params.pressure == PressurePolicy::fail) {
      const std::uint64_t need = detail::queued_total(x) + tokens.size();
      if (need > x.ledger.free()) {
        detail::fail(Errc::out_of_range,
                     fmt::format("conversation {}: {} new tokens do not fit: {} KV cells free, {} already queued", c.id,
                                 tokens.size(), x.ledger.free(), need - tokens.size()));
      }
    }
    if (c.where == Residency::resident && c.seq < 0) x.claim_slot_locked(c, "prompt");
    if (c.n_queued() == 0) c.ready_since = x.steps;  // joins the back of the turns
    c.queue.insert(c.queue.end(), tokens.begin(), tokens.end());
    c.gen_token_queued = false;
    x.notify_work_locked();
  });
}

Conversation Conversation::fork() {
  return detail::with_conv_kv(handle_, [&](ExecutorCore &x, Conv &c) {
    auto child = std::make_unique<Conv>();
    child->id = x.next_id++;
    child->history = c.history;
    if (c.seq >= 0 && c.n_decoded() > 0) {
      // Share the decoded prefix in the cache; without a free slot, park an
      // idle conversation, else start the child parked with a copy.
      if (x.free_seqs.empty()) {
        if (Conv *v = x.pick_victim_locked(c, true)) x.park_locked(*v);
      }
      if (!x.free_seqs.empty()) {
        child->seq = x.free_seqs.back();
        x.free_seqs.pop_back();
        llama_memory_seq_cp(llama_get_memory(x.ctx), c.seq, child->seq, -1, -1);
        x.ledger.retain(c.cells);
        child->cells = c.cells;
      } else {
        const std::size_t size = llama_state_seq_get_size_ext(x.ctx, c.seq, 0);
        std::vector<std::uint8_t> bytes = x.store.buffer(size);
        if (size > 0 && llama_state_seq_get_data_ext(x.ctx, bytes.data(), size, c.seq, 0) == size) {
          child->parked = x.store.put(std::move(bytes), child->id);
        } else {
          x.store.recycle(std::move(bytes));
        }
        if (!child->parked && !x.params.spill.recompute) {
          // No tier can hold it and it may not be re-decoded: it could never run.
          detail::fail(Errc::out_of_range,
                       fmt::format("conversation {}: cannot fork: all n_seq_max = {} slots are held, none is idle to "
                                   "park, and no spill tier can take the copy (ram_bytes = {}, disk_dir {}, "
                                   "recompute = false)",
                                   c.id, x.params.n_seq_max, x.params.spill.ram_bytes,
                                   x.params.spill.disk_dir.empty() ? "unset" : "set"));
        }
        child->parked_n = c.n_decoded();
        child->where = child->parked ? (child->parked->tier() == detail::Tier::ram ? Residency::ram : Residency::disk)
                                     : Residency::recompute;
      }
    } else if (c.n_decoded() > 0) {
      // A parked source: the child shares its parked data (never stored twice).
      child->parked = c.parked;
      child->parked_n = c.parked_n;
      child->where = c.where;
    }
    child->queue.assign(c.queue.begin() + static_cast<std::ptrdiff_t>(c.queue_head), c.queue.end());
    if (child->where == Residency::resident && child->seq < 0 && !child->queue.empty()) {
      x.claim_slot_locked(*child, "fork");
    }
    child->ready_since = x.steps;
    child->logits = c.logits;
    child->has_logits = c.has_logits;
    child->sampler_params = c.sampler_params;
    if (c.sampler) child->sampler.emplace(c.sampler->clone());
    child->priority = c.priority;
    child->last_served = c.last_served;
    auto handle = std::make_shared<detail::ConvHandle>();
    handle->core = x.shared_from_this();
    handle->id = child->id;
    child->handle = handle;
    x.convs.emplace(child->id, std::move(child));
    x.notify_work_locked();
    return Conversation(handle);
  });
}

void Conversation::rewind(std::uint32_t n) {
  detail::with_conv_kv(handle_, [&](ExecutorCore &x, Conv &c) {
    const std::uint32_t total = c.n_decoded() + c.n_queued();
    if (n > total) {
      detail::fail(Errc::out_of_range,
                   fmt::format("conversation {}: cannot rewind {} tokens, it has {}", c.id, n, total));
    }
    x.finish_generation_locked(c, FinishReason::cancelled);
    const std::uint32_t from_queue = std::min(n, c.n_queued());
    c.queue.resize(c.queue.size() - from_queue);
    if (c.queue.size() == c.queue_head) {
      c.queue.clear();
      c.queue_head = 0;
    }
    if (from_queue > 0) c.gen_token_queued = false;
    x.release_kv_from(c, c.n_decoded() - (n - from_queue));
    x.ensure_logits_locked(c);
    detail::release_slot_if_empty(x, c);
    x.notify_work_locked();
  });
}

void Conversation::remove(std::uint32_t p0, std::uint32_t p1) {
  detail::with_conv_kv(handle_, [&](ExecutorCore &x, Conv &c) {
    if (p0 > p1 || p1 > c.n_decoded()) {
      detail::fail(Errc::out_of_range,
                   fmt::format("conversation {}: range [{}, {}) is not within its {} decoded tokens", c.id, p0, p1,
                               c.n_decoded()));
    }
    if (p0 == p1) return;
    x.finish_generation_locked(c, FinishReason::cancelled);
    if (c.seq < 0) {
      // Parked: drop the tokens; it is decoded again from them when it runs.
      c.history.erase(c.history.begin() + p0, c.history.begin() + p1);
      c.has_logits = false;
      x.to_recompute_locked(c);
      x.ensure_logits_locked(c);
      x.notify_work_locked();
      return;
    }
    const auto tail = std::span(c.cells).subspan(p1);
    const bool shiftable =
        x.can_shift && std::none_of(tail.begin(), tail.end(), [&](std::uint32_t cell) { return x.ledger.shared(cell); });
    const std::uint32_t old_n = c.n_decoded();
    if (shiftable) {
      auto *mem = llama_get_memory(x.ctx);
      llama_memory_seq_rm(mem, c.seq, static_cast<llama_pos>(p0), static_cast<llama_pos>(p1));
      llama_memory_seq_add(mem, c.seq, static_cast<llama_pos>(p1), -1, -static_cast<llama_pos>(p1 - p0));
      x.ledger.release(std::span(c.cells).subspan(p0, p1 - p0));
      c.cells.erase(c.cells.begin() + p0, c.cells.begin() + p1);
      c.history.erase(c.history.begin() + p0, c.history.begin() + p1);
      if (p1 == old_n) c.has_logits = false;  // the last token went
    } else {
      // Re-decode the kept tail at its new positions.
      std::vector<Token> tail_tokens(c.history.begin() + p1, c.history.end());
      x.release_kv_from(c, p0);
      c.queue.insert(c.queue.begin() + static_cast<std::ptrdiff_t>(c.queue_head), tail_tokens.begin(),
                     tail_tokens.end());
    }
    x.ensure_logits_locked(c);
    detail::release_slot_if_empty(x, c);
    x.notify_work_locked();
  });
}

void Conversation::shift_left(std::uint32_t keep, std::uint32_t discard) {
  const std::uint64_t end = std::uint64_t(keep) + discard;
  if (end > UINT32_MAX) {
    detail::fail(Errc::out_of_range, fmt::format("shift_left: keep {} + discard {} overflows", keep, discard));
  }
  remove(keep, static_cast<std::uint32_t>(end));
}

void Conversation::dispose() {
  if (!handle_) return;
  auto &core = *handle_->core;
  auto kv = core.kv_lock();
  std::lock_guard lock(core.mu);
  auto it = core.convs.find(handle_->id);
  if (it != core.convs.end()) core.dispose_locked(*it->second);
  core.notify_work_locked();  // freed cells may unblock others
}

bool Conversation::disposed() const {
  if (!handle_) return true;
  std::lock_guard lock(handle_->core->mu);
  return handle_->core->closed || !handle_->core->convs.contains(handle_->id);
}

std::vector<Token> Conversation::tokens() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) {
    std::vector<Token> out = c.history;
    out.insert(out.end(), c.queue.begin() + static_cast<std::ptrdiff_t>(c.queue_head), c.queue.end());
    return out;
  });
}

std::uint32_t Conversation::n_tokens() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { return c.n_decoded() + c.n_queued(); });
}
std::uint32_t Conversation::n_decoded() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { return c.n_decoded(); });
}
std::uint32_t Conversation::n_queued() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { return c.n_queued(); });
}
std::uint32_t Conversation::n_cells() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { return static_cast<std::uint32_t>(c.cells.size()); });
}

bool Conversation::has_logits() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { return c.has_logits && c.n_queued() == 0; });
}

namespace {
void require_logits(const Conv &c) {
  if (!c.has_logits || c.n_queued() > 0) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("conversation {} has no logits yet: {} tokens queued, {} decoded (step first)", c.id,
                             c.n_queued(), c.n_decoded()));
  }
}
}  // namespace

std::vector<float> Conversation::logits() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) {
    require_logits(c);
    return c.logits;
  });
}

Token Conversation::sample() {
  return detail::with_conv(handle_, [](ExecutorCore &x, Conv &c) {
    require_logits(c);
    if (c.gen) detail::fail(Errc::invalid_argument, fmt::format("conversation {} is generating", c.id));
    auto &s = x.sampler_of(c);
    const Token t = s.sample(c.logits);
    s.accept(t);
    return t;
  });
}

void Conversation::set_sampler(const SamplerParams &params) {
  auto &core = detail::core_of(handle_);
  detail::Sampler fresh(core.model, params, static_cast<std::int32_t>(core.n_ctx));  // validates outside the lock
  detail::with_conv(handle_, [&](ExecutorCore &, Conv &c) {
    c.sampler_params = params;
    c.sampler.emplace(std::move(fresh));
  });
}

void Conversation::set_priority(int priority) {
  detail::with_conv(handle_, [&](ExecutorCore &, Conv &c) { c.priority = priority; });
}

std::optional<Error> Conversation::error() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { return c.error; });
}

void Conversation::clear_error() {
  detail::with_conv(handle_, [](ExecutorCore &x, Conv &c) {
    c.error.reset();
    x.notify_work_locked();
  });
}

std::optional<Generation> Conversation::generation() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) -> std::optional<Generation> {
    if (!c.gen) return std::nullopt;
    return Generation(c.gen);
  });
}

Conversation Executor::create() {
  auto &core = detail::live_core(core_);
  std::lock_guard lock(core.mu);
  if (core.closed) detail::fail(Errc::disposed, "the executor was destroyed");
  auto c = std::make_unique<Conv>();
  c->id = core.next_id++;
  auto handle = std::make_shared<detail::ConvHandle>();
  handle->core = core_;
  handle->id = c->id;
  c->handle = handle;
  core.convs.emplace(c->id, std::move(c));
  return Conversation(handle);
}

}  // namespace weft
