// Conversation: the handle's operations on the executor's shared state.
#include <fmt/format.h>

#include <algorithm>

#include "exec/executor_core.hpp"
#include "exec/media/media.hpp"
#include "core/internal.hpp"

namespace weft {
namespace detail {

ConvHandle::~ConvHandle() {
  if (id == 0) return;  // let go of on purpose (a pinned prefix)
  // The last user handle is gone: nobody can reach the conversation again.
  try {
    {
      std::lock_guard lock(core->mu);
      core->dispose_id_locked(id);
    }
    core->notify_work();  // freed cells, an on_finish to run
  } catch (...) {
    // A destructor must not throw; locking cannot fail in practice.
  }
}

Conv &ExecutorCore::get(std::uint64_t id) {
  if (closed) fail(Errc::disposed, fmt::format("conversation {}: its executor was destroyed", id));
  Conv *c = convs.find(id);
  if (c == nullptr) fail(Errc::disposed, fmt::format("conversation {} was disposed", id));
  return *c;
}

std::pair<Conv *, std::shared_ptr<ConvHandle>> ExecutorCore::create_locked() {
  if (closed) fail(Errc::disposed, "the executor was destroyed");
  auto c = std::make_unique<Conv>();
  c->id = convs.next_id++;
  auto handle = std::make_shared<ConvHandle>();
  handle->core = shared_from_this();
  handle->id = c->id;
  c->handle = handle;
  Conv *p = c.get();
  convs.all.emplace(p->id, std::move(c));
  ++convs.live;
  return {p, std::move(handle)};
}

void ExecutorCore::dispose_id_locked(std::uint64_t id) {
  Conv *c = closed ? nullptr : convs.find(id);
  if (c == nullptr) return;
  dispose_locked(*c);
  settle_locked();
}

void ExecutorCore::dispose_locked(Conv &c) {
  finish_generation_locked(c, FinishReason::cancelled);
  c.disposed = true;
  c.queue.clear();
  --convs.live;
  convs.mark_dirty(c);  // reconcile frees its cells and slot, then forgets it
}

std::shared_ptr<Sampler> ExecutorCore::sampler_of(Conv &c) {
  if (!c.sampler) c.sampler = std::make_shared<Sampler>(model, c.sampler_params, static_cast<std::int32_t>(n_ctx));
  return c.sampler;
}

namespace {

ExecutorCore &core_of(const std::shared_ptr<ConvHandle> &h) {
  if (!h) fail(Errc::disposed, "empty Conversation handle");
  return *h->core;
}

// Runs fn(core, conv) under the state lock.
template <class Fn>
auto with_conv(const std::shared_ptr<ConvHandle> &h, Fn &&fn) {
  auto &core = core_of(h);
  std::lock_guard lock(core.mu);
  return fn(core, core.get(h->id));
}

// As with_conv, for an edit the cache has to follow: applied at once when no
// step runs, else at the next step boundary; either way it never waits.
template <class Fn>
void edit_conv(const std::shared_ptr<ConvHandle> &h, Fn &&fn) {
  auto &core = core_of(h);
  {
    std::lock_guard lock(core.mu);
    fn(core, core.get(h->id));
    core.settle_locked();
  }
  core.notify_work();
}

}  // namespace

void ExecutorCore::claim_slot_locked(Conv &c, const char *what) {
  // Game threads call this while a step may be decoding: no eviction here
  // (it calls llama.cpp); a prefix cache entry gives its slot up at the
  // step's boundary instead.
  if (c.intent.import) return;  // a load's KV data, imported at the boundary, brings its slot
  if (kv->acquire_unused_slot(c.kv)) return;
  if (kv->spill_on() || kv->slots_free() > 0) return;  // a step parks someone, or evicts a cache entry, for it
  fail(Errc::out_of_range,
       fmt::format("conversation {}: cannot {}: all n_seq_max = {} sequence slots are held and spill is off "
                   "(ram_bytes = 0, no disk_dir, recompute = false), so none can be freed for it; dispose a "
                   "conversation or enable a spill tier",
                   c.id, what, params.n_seq_max));
}

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
    x.admit_locked(c, tokens.size());
    if (c.resident() && !c.kv.has_slot()) x.claim_slot_locked(c, "prompt");
    if (c.n_queued() == 0) c.turns.ready_since = x.stats.steps;  // joins the back of the turns
    c.queue.push_back(tokens);
    c.gen_token_queued = false;
  });
  core.notify_work();
}

Conversation Conversation::fork() {
  auto &core = detail::core_of(handle_);
  std::shared_ptr<detail::ConvHandle> handle;
  {
    std::lock_guard lock(core.mu);
    Conv &c = core.get(handle_->id);
    auto &kv = *core.kv;
    if (c.n_decoded() > 0 && c.kv.has_slot() && kv.slots_free() == 0 && !kv.spill_on()) {
      // No slot can be had and no tier can take a copy: it could never run.
      detail::fail(Errc::out_of_range,
                   fmt::format("conversation {}: cannot fork: all n_seq_max = {} slots are held, none is idle to "
                               "park, and no spill tier can take the copy (ram_bytes = {}, disk_dir {}, "
                               "recompute = false)",
                               c.id, core.params.n_seq_max, core.params.spill.ram_bytes,
                               core.params.spill.disk_dir.empty() ? "unset" : "set"));
    }
    auto [child, h] = core.create_locked();
    handle = std::move(h);
    child->history = c.history;
    child->media = c.media;  // the same images: their embeddings are shared
    child->queue.assign(c.queue.view());
    if (c.has_logits) child->logits = c.logits;  // else they are stale (a generation samples from llama.cpp's)
    child->has_logits = c.has_logits;
    child->sampler_params = c.sampler_params;
    if (c.sampler) {
      if (c.share.sampling && !(c.gen && c.gen->own_sampler)) {
        // The step is sampling with it right now: the child gets its copy
        // when that is done.
        child->share.pending = true;
        c.share.clone_to.push_back(child->id);
      } else {
        child->sampler = std::make_shared<detail::Sampler>(c.sampler->clone());
      }
    }
    child->priority = c.priority;
    child->memory = c.memory;  // the same store
    child->adapters = c.adapters;
    child->spans = c.spans;
    child->turns.last_served = c.turns.last_served;
    child->turns.ready_since = core.stats.steps;
    if (c.n_decoded() > 0) {
      child->intent.copy_from = c.id;  // its cache: shared with c's at the boundary
      core.convs.mark_dirty(*child);
    } else if (!child->queue.empty()) {
      try {
        core.claim_slot_locked(*child, "fork");
      } catch (...) {
        core.dispose_locked(*child);  // never seen by the caller
        core.settle_locked();
        throw;
      }
    }
    core.settle_locked();
  }
  core.notify_work();
  return Conversation(handle);
}

void Conversation::rewind(std::uint32_t n) {
  detail::edit_conv(handle_, [&](ExecutorCore &x, Conv &c) {
    const std::uint32_t total = c.n_decoded() + c.n_queued();
    if (n > total) {
      detail::fail(Errc::out_of_range,
                   fmt::format("conversation {}: cannot rewind {} tokens, it has {}", c.id, n, total));
    }
    check_media_cut(c, total - n, "rewind");
    x.finish_generation_locked(c, FinishReason::cancelled);
    media_truncate(c, total - n);
    const std::uint32_t from_queue = std::min(n, c.n_queued());
    if (from_queue > 0) {
      c.queue.pop_back(from_queue);
      c.gen_token_queued = false;
      x.bump(c);
    }
    x.truncate_locked(c, c.n_decoded() - (n - from_queue));
    c.spans.truncate(c.n_decoded() + c.n_queued());
    x.ensure_logits_locked(c);
  });
}

void Conversation::compact(const CompactParams &p) {
  auto &core = detail::core_of(handle_);
  const std::vector<Token> summary = p.summary.empty() ? std::vector<Token>{} : core.model.tokenize(p.summary);
  detail::edit_conv(handle_, [&](ExecutorCore &x, Conv &c) {
    const std::uint32_t decoded = c.n_decoded(), total = decoded + c.n_queued();
    if (p.keep_first > total || p.keep_last > total - p.keep_first) {
      detail::fail(Errc::out_of_range, fmt::format("conversation {}: keep_first {} + keep_last {} exceed its {} tokens",
                                                   c.id, p.keep_first, p.keep_last, total));
    }
    const std::uint64_t after = std::uint64_t(p.keep_first) + summary.size() + p.keep_last;
    if (after > x.n_ctx) {
      detail::fail(Errc::out_of_range, fmt::format("conversation {}: the compacted history ({} tokens) exceeds n_ctx = {}",
                                                   c.id, after, x.n_ctx));
    }
    if (!c.media.empty() && c.media.back().end() > p.keep_first) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("conversation {}: an image ends at position {}, past keep_first = {}; images cannot be "
                               "queued again as tokens",
                               c.id, c.media.back().end(), p.keep_first));
    }
    // What is queued again: the kept start that was not decoded yet, the summary, the kept end.
    const auto queued = c.queue.view();
    const auto at = [&](std::uint32_t i) { return i < decoded ? c.history[i] : queued[i - decoded]; };
    std::vector<Token> requeue;
    requeue.reserve(after);
    for (std::uint32_t i = std::min(p.keep_first, decoded); i < p.keep_first; ++i) requeue.push_back(at(i));
    requeue.insert(requeue.end(), summary.begin(), summary.end());
    for (std::uint32_t i = total - p.keep_last; i < total; ++i) requeue.push_back(at(i));
    x.finish_generation_locked(c, FinishReason::cancelled);
    if (c.n_queued() > 0) {
      c.queue.pop_back(c.n_queued());
      c.gen_token_queued = false;
      x.bump(c);
    }
    x.truncate_locked(c, std::min(p.keep_first, decoded));
    c.spans.truncate(c.n_decoded());
    if (requeue.empty()) {
      x.ensure_logits_locked(c);
      return;
    }
    x.admit_locked(c, requeue.size());
    if (c.resident() && !c.kv.has_slot()) x.claim_slot_locked(c, "compact");
    c.turns.ready_since = x.stats.steps;
    c.queue.push_back(requeue);
  });
}

void Conversation::remove(std::uint32_t p0, std::uint32_t p1) {
  detail::edit_conv(handle_, [&](ExecutorCore &x, Conv &c) {
    if (p0 > p1 || p1 > c.n_decoded()) {
      detail::fail(Errc::out_of_range,
                   fmt::format("conversation {}: range [{}, {}) is not within its {} decoded tokens", c.id, p0, p1,
                               c.n_decoded()));
    }
    if (p0 == p1) return;
    check_media_cut(c, p0, "remove");
    check_media_cut(c, p1, "remove");
    x.finish_generation_locked(c, FinishReason::cancelled);
    media_erase(c, p0, p1);
    // The cache shifts the rest down at the boundary, or re-decodes it where
    // it cannot shift or forks share the cells (reconcile.cpp).
    if (p1 == c.n_decoded() || !c.kv.has_slot()) c.has_logits = false;  // the last token went, or parked
    c.history.erase(c.history.begin() + p0, c.history.begin() + p1);
    c.spans.erase(p0, p1);
    c.intent.erase.emplace_back(p0, p1);
    x.bump(c);
    x.ensure_logits_locked(c);
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
  {
    std::lock_guard lock(core.mu);
    core.dispose_id_locked(handle_->id);
  }
  core.notify_work();  // freed cells may unblock others
}

bool Conversation::disposed() const {
  if (!handle_) return true;
  std::lock_guard lock(handle_->core->mu);
  return handle_->core->closed || handle_->core->convs.find(handle_->id) == nullptr;
}

std::vector<Token> Conversation::tokens() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) {
    std::vector<Token> out = c.history;
    const auto queued = c.queue.view();
    out.insert(out.end(), queued.begin(), queued.end());
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
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { return c.kv.n(); });
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
    if (c.share.sampling || c.share.pending) {
      detail::fail(Errc::invalid_argument,
                   fmt::format("conversation {}: its sampler is in use by the running step (a generation just "
                               "cancelled, or a fork's copy still being made); sample after that step",
                               c.id));
    }
    auto s = x.sampler_of(c);
    const Token t = s->sample(c.logits);
    s->accept(t);
    return t;
  });
}

void Conversation::set_sampler(const SamplerParams &params) {
  auto &core = detail::core_of(handle_);
  detail::Sampler fresh(core.model, params, static_cast<std::int32_t>(core.n_ctx));  // validates outside the lock
  detail::with_conv(handle_, [&](ExecutorCore &, Conv &c) {
    c.sampler_params = params;
    // A step sampling with the old one keeps its own reference to it.
    c.sampler = std::make_shared<detail::Sampler>(std::move(fresh));
    c.share.pending = false;
  });
}

void Conversation::set_adapters(std::span<const AdapterUse> adapters) {
  auto &core = detail::core_of(handle_);
  auto cfg = detail::make_adapter_config(*core.model.impl(), adapters);  // validates outside the lock
  detail::with_conv(handle_, [&](ExecutorCore &x, Conv &c) {
    c.adapters = std::move(cfg);
    if (c.adapters) x.adapter_state.used = true;
  });
}

std::vector<AdapterUse> Conversation::adapters() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) {
    return c.adapters ? c.adapters->uses : std::vector<AdapterUse>{};
  });
}

void Conversation::set_priority(int priority) {
  detail::with_conv(handle_, [&](ExecutorCore &, Conv &c) { c.priority = priority; });
}

void Conversation::set_memory(std::optional<Memory> memory) {
  detail::with_conv(handle_, [&](ExecutorCore &, Conv &c) { c.memory = std::move(memory); });
}

std::optional<Memory> Conversation::memory() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { return c.memory; });
}

std::optional<Error> Conversation::error() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { return c.error; });
}

void Conversation::clear_error() {
  detail::with_conv(handle_, [](ExecutorCore &, Conv &c) { c.error.reset(); });
  detail::core_of(handle_).notify_work();
}

std::optional<Generation> Conversation::generation() const {
  return detail::with_conv(handle_, [](ExecutorCore &, Conv &c) -> std::optional<Generation> {
    if (!c.gen) return std::nullopt;
    return Generation(c.gen);
  });
}

const char *residency_name(Residency r) noexcept {
  switch (r) {
    case Residency::resident: return "resident";
    case Residency::ram: return "ram";
    case Residency::disk: return "disk";
    case Residency::recompute: return "recompute";
  }
  return "unknown";
}

Conversation Executor::create() {
  auto &core = detail::live_core(core_);
  std::lock_guard lock(core.mu);
  return Conversation(core.create_locked().second);
}

}  // namespace weft
