// History edits and reconcile: operations change a conversation's history at
// once; the KV cache follows at the next step boundary (or at once, when no
// step is running), so no game thread waits for a step to touch the cache.
//
// Reconcile restores, for each conversation it is given, the invariant every
// step relies on: its sequence holds exactly history[0, kv.n()), and
// history[kv.n(), end) is back in its queue (to be decoded again).
#include <fmt/format.h>

#include <algorithm>

#include "core/internal.hpp"
#include "exec/executor_core.hpp"
#include "exec/media/media.hpp"

namespace weft::detail {
namespace {

// How many leading tokens a and b share.
std::uint32_t common_prefix(std::span<const Token> a, std::span<const Token> b) {
  const auto n = std::min(a.size(), b.size());
  return static_cast<std::uint32_t>(std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first -
                                    a.begin());
}

}  // namespace

void ExecutorCore::bump(Conv &c) {
  ++c.epoch;
  convs.mark_dirty(c);
}

void ExecutorCore::truncate_locked(Conv &c, std::uint32_t pos) {
  if (pos >= c.history.size()) return;
  c.history.resize(pos);
  c.has_logits = false;
  bump(c);
}

void ExecutorCore::requeue_locked(Conv &c, std::uint32_t pos) {
  if (move_to_queue(c, pos)) bump(c);
}

void ExecutorCore::roll_back_locked(Conv &c) {
  if (!kv->roll_back(c.kv)) convs.mark_dirty(c);  // its cells went: reconcile_one queues its history
}

bool ExecutorCore::move_to_queue(Conv &c, std::uint32_t pos) {
  if (pos >= c.history.size()) return false;
  c.queue.push_front(std::span(c.history).subspan(pos));
  c.history.resize(pos);
  c.has_logits = false;
  c.gen_token_queued = false;
  return true;
}

// Logits belong to history.back(); when they are gone, re-decode that one
// token (it moves back to the queue) so sampling works after the next step.
void ExecutorCore::ensure_logits_locked(Conv &c) {
  if (c.has_logits || c.history.empty() || c.n_queued() > 0) return;
  // A recurrent model's checkpoint there kept them (its state is restored
  // when the cache follows): cut back to a prompt's end, nothing is decoded.
  // A fork not yet given its cells looks at its source's.
  const KvHandle *h = &c.kv;
  if (!c.kv.has_slot() && c.intent.copy_from != 0) {
    if (const Conv *src = convs.find(c.intent.copy_from)) h = &src->kv;
  }
  if (const auto *kept = kv->checkpoint_logits(*h, c.history)) {
    c.logits.assign(kept->begin(), kept->end());
    c.has_logits = true;
    return;
  }
  // An image's last position comes back with the whole image.
  requeue_locked(c, media_floor(c, c.n_decoded() - 1));
}

bool ExecutorCore::claim_boundary(std::unique_lock<std::mutex> &step) {
  // A callback on the stepping thread: between stages, nothing decoding.
  if (gate.stepping.load() == std::this_thread::get_id()) return true;
  // With a worker, the worker does it: a game thread never does KV work
  // itself (a park's copy or a load's import can take milliseconds).
  if (worker.running()) return false;
  step = std::unique_lock(gate.mu, std::try_to_lock);
  return step.owns_lock();  // else the running step's next boundary will
}

bool ExecutorCore::settle_locked() {
  std::unique_lock<std::mutex> step;
  if (!claim_boundary(step)) return false;
  reconcile_locked();
  run_boundary_tasks_locked();
  return true;
}

void ExecutorCore::at_boundary_locked(std::function<void()> task) {
  gate.boundary_tasks.push_back(std::move(task));
  try {
    settle_locked();  // nobody else stepping: done now
  } catch (...) {
    // Still queued: the stepper runs it.
  }
}

void ExecutorCore::run_boundary_tasks_locked() {
  auto tasks = std::move(gate.boundary_tasks);
  gate.boundary_tasks.clear();
  for (auto &task : tasks) task();
}

void ExecutorCore::reconcile_locked(std::unique_lock<std::mutex> *lock) {
  // In the order they were changed: a fork's source before the fork.
  std::vector<std::uint64_t> &to_park = scratch.parks_asked;
  to_park.clear();
  for (std::size_t i = 0; i < convs.dirty.size(); ++i) {
    auto it = convs.all.find(convs.dirty[i]);
    if (it == convs.all.end()) continue;
    Conv &c = *it->second;
    c.dirty = false;
    if (c.disposed) {
      kv->release(c.kv);
      convs.all.erase(it);
      continue;
    }
    if (c.intent.park) to_park.push_back(c.id);
    reconcile_one(c);
  }
  convs.dirty.clear();
  // Last, as they copy data (with `lock` released): everything else is done.
  for (std::uint64_t id : to_park) {
    Conv *c = convs.find(id);
    if (c != nullptr && c->kv.has_slot() && !c->history.empty()) park_locked(*c, lock);
  }
}

void ExecutorCore::reconcile_one(Conv &c) {
  KvIntent intent = std::move(c.intent);
  c.intent = {};
  if (intent.import) {
    try {
      kv->import_kv(c.kv, std::move(*intent.import), c.history, intent.import_exact, intent.import_from, c.id,
                    intent.import_salt, media_jumps(c.media, static_cast<std::uint32_t>(c.history.size())));
    } catch (const Error &e) {
      // load() returned already: the tokens are kept, decoded again.
      log_warning(fmt::format("conversation {}: {}; re-decoding it from its tokens", c.id, e.what()));
      kv->to_recompute(c.kv, !c.history.empty());
    }
  }
  if (intent.copy_from != 0) fork_kv(c, intent.copy_from);
  for (auto [p0, p1] : intent.erase) {
    if (c.kv.has_slot()) {
      if (!kv->erase_shift(c.kv, p0, p1)) kv->truncate(c.kv, p0);
    } else if (c.kv.where != Residency::resident) {
      kv->to_recompute(c.kv, !c.history.empty());  // parked: its blob no longer fits
    }
  }
  if (c.kv.has_slot()) {
    kv->truncate(c.kv, c.n_decoded());
    if (c.kv.n() < c.n_decoded()) move_to_queue(c, c.kv.n());
  } else if (c.history.empty() && c.kv.where != Residency::resident) {
    kv->release(c.kv);  // rewound to nothing while parked
  }
  if (c.kv.has_slot() && c.history.empty() && c.queue.empty()) kv->release(c.kv);  // an empty slot helps nobody
}

// A fork's child shares what it can of its source's cache: the source's
// cells when a slot is free (parking an idle conversation for one), else a
// parked copy, else its tokens are decoded again.
void ExecutorCore::fork_kv(Conv &child, std::uint64_t source) {
  Conv *src = convs.find(source);
  std::uint32_t n = 0;  // positions the child can take from the source
  if (src != nullptr && src->kv.has_slot()) {
    n = common_prefix(child.history, std::span(src->history).first(std::min(src->n_decoded(), src->kv.n())));
    n = jump_floor(src->kv.jumps, n);  // part of an M-RoPE image is decoded again, whole
    if (n > 0 && !kv->acquire_slot(child.kv)) {
      if (Conv *v = pick_victim_locked(src, true)) park_locked(*v);
      kv->acquire_slot(child.kv);
    }
    if (n > 0 && child.kv.has_slot()) {
      n = kv->share_prefix(src->kv, child.kv, n);  // 0 where the model's memory cannot share a prefix
    } else if (n > 0) {
      move_to_queue(child, n);
      if (!kv->park_copy(src->kv, child.kv, child.id)) kv->to_recompute(child.kv, !child.history.empty());
      return;
    }
  } else if (src != nullptr && src->kv.parked) {
    // A parked source: the child shares its parked data (never stored twice).
    n = common_prefix(child.history, std::span(src->history).first(std::min(src->n_decoded(), src->kv.parked_n)));
    n = jump_floor(src->kv.jumps, n);
    move_to_queue(child, n);
    if (n > 0) kv->share_parked(src->kv, child.kv);
    return;
  }
  if (!child.kv.has_slot()) {
    kv->to_recompute(child.kv, !child.history.empty());
    return;
  }
  move_to_queue(child, n);
}

}  // namespace weft::detail
