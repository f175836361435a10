// The schedule stage: who is resident (parking and restoring, one eviction
// policy), how many tokens the budget buys, the batch plan, and what happens
// to those the KV cells cannot hold (PressurePolicy, in one place).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/internal.hpp"
#include "exec/executor_core.hpp"
#include "exec/media/media.hpp"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Parked ones with input (or a prefetch hint), and new ones that need a slot.
bool wants_residency(const Conv &c) {
  return !c.error && (c.n_queued() > 0 || c.turns.prefetch) && (!c.resident() || !c.kv.has_slot());
}

// Holds cells it could give up: resident, decoded, nothing to do.
bool is_idle(const Conv &c) { return c.kv.has_slot() && c.kv.n() > 0 && c.n_queued() == 0 && !c.gen && !c.turns.prefetch; }

// Releases a held lock for the scope, taking it back on the way out.
struct Unlocked {
  std::unique_lock<std::mutex> *lock;
  explicit Unlocked(std::unique_lock<std::mutex> *l) : lock(l) {
    if (lock) lock->unlock();
  }
  ~Unlocked() {
    if (lock) lock->lock();
  }
};

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

bool ExecutorCore::park_locked(Conv &c, std::unique_lock<std::mutex> *lock) {
  if (!c.kv.has_slot() || c.kv.n() == 0) return false;
  // Only a boundary holder changes c.kv, so it is as it was after the copy.
  const int seq = c.kv.seq;
  const auto t0 = Clock::now();
  std::shared_ptr<ParkedKv> blob;
  {
    Unlocked unlocked(lock);
    blob = kv->copy_to_store(seq, c.id);
  }
  return kv->finish_park(c.kv, std::move(blob), since(t0));
}

bool ExecutorCore::restore_locked(Conv &c, std::unique_lock<std::mutex> *lock) {
  bool from_tokens = c.kv.where == Residency::recompute;
  auto r = KvManager::Restore::no_room;
  if (c.kv.where == Residency::resident || from_tokens) {
    r = kv->restore(c.kv, c.history, c.id);  // a slot only: nothing to copy
  } else if (const int seq = kv->reserve_restore(c.kv); seq >= 0) {
    const auto blob = c.kv.parked;  // kept alive while unlocked
    // A rewind meanwhile is reconciled later: these are the restored tokens.
    const std::vector<Token> tokens = c.history;
    const std::vector<PosJump> jumps = c.kv.jumps;
    const auto n = static_cast<std::uint32_t>(tokens.size());
    const auto t0 = Clock::now();
    std::string why;
    bool ok = false;
    {
      Unlocked unlocked(lock);
      ok = kv->load_parked(seq, *blob, n, jumps, why);
    }
    r = kv->finish_restore(c.kv, seq, ok, tokens, why, since(t0), c.id);
  }
  if (r == KvManager::Restore::recompute) {
    from_tokens = true;  // llama.cpp refused the data: decoded again instead
    r = kv->restore(c.kv, c.history, c.id);
  }
  if (r != KvManager::Restore::done) return false;
  if (from_tokens) kv->count_recompute();
  // Whatever the cache lacks becomes input again; the re-decode brings the
  // logits back. (At a boundary: no decode is planned that it could stale.)
  move_to_queue(c, c.kv.n());
  c.kv.where = Residency::resident;
  c.turns.resident_since = stats.steps;
  c.turns.pinned_step = stats.steps;
  return true;
}

std::uint32_t ExecutorCore::idle_cells_locked(const Conv *except) const {
  std::uint32_t n = 0;
  for (const auto &[id, cp] : convs.all) {
    const Conv &c = *cp;
    if (&c != except && !c.disposed && is_idle(c)) n += c.kv.n();
  }
  return n;
}

// The eviction policy, for every eviction: idle conversations first, lowest
// priority and least recently served first. A busy one only when
// `idle_only` is false, longest resident first (time-slicing the slots),
// never one of higher priority than `for_whom`.
Conv *ExecutorCore::pick_victim_locked(const Conv *for_whom, bool idle_only) {
  Conv *best = nullptr;
  auto better = [](const Conv &a, const Conv &b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.turns.last_served < b.turns.last_served;
  };
  for (auto &[id, cp] : convs.all) {
    Conv &c = *cp;
    if (&c == for_whom || c.disposed || c.turns.pinned || !is_idle(c) || c.turns.pinned_step == stats.steps) continue;
    if (best == nullptr || better(c, *best)) best = &c;
  }
  if (best != nullptr || idle_only) return best;
  for (auto &[id, cp] : convs.all) {
    Conv &c = *cp;
    if (&c == for_whom || c.disposed || c.turns.pinned || !c.kv.has_slot() || c.kv.n() == 0 || c.turns.pinned_step == stats.steps) {
      continue;
    }
    if (for_whom != nullptr && c.priority > for_whom->priority) continue;
    if (best == nullptr || c.turns.resident_since < best->turns.resident_since) best = &c;
  }
  return best;
}

bool ExecutorCore::make_resident_locked(std::uint32_t token_budget, std::unique_lock<std::mutex> &lock) {
  // Who waits to become resident, most urgent first.
  std::vector<Conv *> &wanting = scratch.planning.convs;  // scratch; the plan rebuilds it
  wanting.clear();
  for (auto &[id, cp] : convs.all) {
    Conv &c = *cp;
    if (!c.disposed && wants_residency(c)) {
      if (c.turns.waiting_since == 0) c.turns.waiting_since = stats.steps;
      wanting.push_back(&c);
    }
  }
  std::sort(wanting.begin(), wanting.end(), [](const Conv *a, const Conv *b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->turns.waiting_since < b->turns.waiting_since;
  });
  bool may_age = false;
  for (Conv *w : wanting) {
    const std::uint32_t need = w->kv.where == Residency::recompute ? 0 : w->kv.parked_n;
    // A busy conversation gives up its slot only to one that has waited a
    // while, so slots are time-sliced rather than thrashed.
    const bool may_evict_busy = stats.steps - w->turns.waiting_since >= kAgingSteps;
    bool ok = true;
    while (ok && (kv->slots_free() == 0 || kv->cells_free() < need)) {
      Conv *v = pick_victim_locked(w, !may_evict_busy);
      ok = v != nullptr && park_locked(*v, &lock);
    }
    if (ok && restore_locked(*w, &lock)) {
      w->turns.waiting_since = 0;
      w->turns.prefetch = false;
      w->turns.pinned_step = stats.steps;
    } else if (!may_evict_busy) {
      may_age = true;
    }
  }
  // Resident conversations with input may need cells that idle ones hold.
  std::uint64_t wanted = 0;
  for (auto &[id, cp] : convs.all) {
    const Conv &c = *cp;
    if (c.resident() && !c.error && !c.disposed) wanted += c.n_queued();
  }
  const std::uint64_t target = std::min<std::uint64_t>(wanted, token_budget);
  while (kv->cells_free() < target) {
    Conv *v = pick_victim_locked(nullptr, true);
    if (v == nullptr || !park_locked(*v, &lock)) break;
  }
  // Too few cells for anyone with input, and nobody idle to give some: each
  // would wait for the others for ever (generations, or prompts that wait
  // whole, that together outgrow the cache). Cells are time-sliced like
  // slots: a busy one is parked (the eviction policy's choice) and comes back
  // when it has waited its turn.
  if (kv->spill_on()) {
    std::uint32_t runnable = 0, least = UINT32_MAX;
    const Conv *only = nullptr;
    for (auto &[id, cp] : convs.all) {
      const Conv &c = *cp;
      if (!c.resident() || c.error || c.disposed || c.n_queued() == 0 || c.n_decoded() >= n_ctx) continue;
      const bool whole = params.pressure == PressurePolicy::wait && !c.gen_token_queued;
      least = std::min(least, whole ? std::min(c.n_queued(), n_ctx - c.n_decoded()) : 1u);
      ++runnable;
      only = &c;
    }
    Conv *v = runnable > 0 && kv->cells_free() < least ? pick_victim_locked(nullptr, false) : nullptr;
    // Parking the only one that wants cells would only bring it back.
    if (v != nullptr && !(runnable == 1 && v == only)) park_locked(*v, &lock);
  }
  return may_age;
}

void ExecutorCore::admit_locked(const Conv &c, std::size_t n_new) const {
  if (params.pressure != PressurePolicy::fail) return;
  // Refused up front rather than failed in a step.
  std::uint64_t queued = 0;
  for (const auto &[id, other] : convs.all) queued += other->disposed ? 0 : other->n_queued();
  if (queued + n_new > kv->cells_free()) {
    fail(Errc::out_of_range, fmt::format("conversation {}: {} new tokens do not fit: {} KV cells free, {} already queued",
                                         c.id, n_new, kv->cells_free(), queued));
  }
}

namespace {

Token token_at(const Conv &c, std::uint32_t i) {
  return i < c.n_decoded() ? c.history[i] : c.queue[i - c.n_decoded()];
}

}  // namespace

bool ExecutorCore::follows_locked(const Conv &c) const {
  const std::uint32_t from = c.n_decoded();
  const std::uint32_t n = from + c.n_queued() - 1;  // its last token is decoded anyway
  if (n < from + PrefixIndex::kBlock) return false;
  for (const Conv *l : scratch.planning.convs) {
    if (l->gen_token_queued || l->n_queued() < 2) continue;  // a leader decodes a prompt
    if (!same_adapters(l->next_adapters().get(), c.next_adapters().get())) continue;  // its KV would differ
    const std::uint32_t lim = std::min(n, l->n_decoded() + l->n_queued());
    std::uint32_t p = 0;
    while (p < lim && token_at(c, p) == token_at(*l, p)) ++p;
    if (p >= from + PrefixIndex::kBlock && l->n_decoded() < p) return true;
  }
  return false;
}

void ExecutorCore::reuse_locked(Conv &c) {
  auto &want = scratch.planning.reuse_want;
  want.assign(c.history.begin(), c.history.end());
  const auto queued = c.queue.view();
  want.insert(want.end(), queued.begin(), queued.end());
  // The last input token is decoded in any case: its logits are needed.
  auto limit = static_cast<std::uint32_t>(std::min<std::size_t>(want.size() - 1, n_ctx));
  // Only positions of one adapter setting, and a donor's of the same.
  const AdapterConfigPtr &cfg = c.next_adapters();
  limit = std::min(limit, c.n_decoded() + c.spans.run(c.n_decoded(), c.n_queued(), c.adapters));
  // Never into an image still queued: it is decoded whole, from its embeddings.
  if (!c.media.empty()) limit = std::min(limit, c.n_decoded() + text_run(c));
  const std::uint32_t got = kv->reuse(c.kv, want, limit, adapter_key(cfg.get()));
  if (got == 0) return;
  c.history.insert(c.history.end(), queued.begin(), queued.begin() + got);
  c.queue.pop_front(got);
  c.has_logits = false;
}

double ExecutorCore::planned_depth_locked() const {
  double sum = 0, tokens = 0;
  for (const auto &e : scratch.planning.entries) {
    sum += e.n_tokens * (scratch.planning.convs[e.index]->n_decoded() + (e.n_tokens - 1) / 2.0);
    tokens += e.n_tokens;
  }
  return tokens > 0 ? sum / tokens : 0;
}

double ExecutorCore::fit_image_rows_locked(double seconds, double depth, std::uint32_t &token_budget,
                                           std::uint32_t free_cells) {
  // Image rows go in an embeddings batch of their own: two decodes, each
  // with its own fixed cost, where the budget was sized for one. An
  // embeddings row costs what a token row does (raw llama.cpp, measured), so
  // each decode is predicted by the token model; the plan shrinks until both
  // fit (a few rounds at most: each scales the budget by what fits).
  // The two decodes of such steps ran image_step_margin() longer than this
  // predicts (learnt in step.cpp), so that is planned for.
  const auto split = [&] {
    std::uint32_t rows = 0, tokens = 0;
    for (const auto &e : scratch.planning.entries) {
      const Conv &c = *scratch.planning.convs[e.index];
      (c.media.empty() || media_front(c) == nullptr ? tokens : rows) += e.n_tokens;
    }
    return std::pair{tokens, rows};
  };
  const auto predict = [&](std::uint32_t n) { return n == 0 ? 0.0 : cost.predict(n, depth); };
  for (int round = 0; round < 4 && token_budget > 1; ++round) {
    const auto [tokens, rows] = split();
    if (rows == 0) break;
    const double need = (predict(tokens) + predict(rows)) * cost.image_step_margin();
    if (need <= seconds) break;
    token_budget = std::max(1u, static_cast<std::uint32_t>(token_budget * std::max(0.0, seconds) / need));
    plan_batch(scratch.planning.candidates, {token_budget, free_cells, params.max_prompt_chunk, stats.steps}, scratch.planning.entries);
  }
  // A piece of one row costs far more than one row of a larger piece (on
  // npc at 3,400 cells: 3.4 ms against 2.0 ms for two rows, measured): an
  // image with rows left gets two where the budget has a token to spare.
  std::uint32_t planned = 0;
  for (const auto &e : scratch.planning.entries) planned += e.n_tokens;
  for (auto &e : scratch.planning.entries) {
    const Conv &c = *scratch.planning.convs[e.index];
    const MediaSpan *m = c.media.empty() ? nullptr : media_front(c);
    if (m != nullptr && e.n_tokens == 1 && m->end() - c.n_decoded() > 1 && planned < std::min(token_budget, free_cells)) {
      ++e.n_tokens;
      ++planned;
    }
  }
  const auto [tokens, rows] = split();
  return rows > 0 ? predict(tokens) + predict(rows) : 0.0;
}

StepPlan ExecutorCore::schedule_locked(const StepBudget &budget, Clock::time_point t0, StepResult &result,
                                       std::unique_lock<std::mutex> &lock) {
  StepPlan out = std::move(scratch.spare_plan);  // its buffers, emptied
  out.clear();
  DraftRoom draft_room;
  for (int attempt = 0;; ++attempt) {
    // Operations made while the lock was released (sampling, a callback)
    // may have left KV work: the plan needs the cache as the histories say.
    reconcile_locked(&lock);
    scratch.planning.candidates.clear();
    scratch.planning.convs.clear();
    scratch.planning.media_wanting.clear();
    std::uint64_t wanted = 0;
    double depth_sum = 0, depth_weight = 0;
    std::uint32_t no_slot = 0, held_back = 0, generating = 0;
    std::uint32_t media_rows_wanted = 0;  // candidates whose rows are a causal image's
    std::optional<std::uint64_t> reclaimable;  // cells parking idle ones would free
    for (auto &[id, cp] : convs.all) {
      Conv &c = *cp;
      if (c.n_queued() == 0 || c.error || c.disposed) continue;
      if (!c.resident()) {
        ++no_slot;  // parked: waits for a slot or cells
        continue;
      }
      // Input that continues what another sequence holds shares its cells.
      if (kv->reuse_on() && !c.gen_token_queued && c.n_queued() > 1 && c.kv.n() == c.n_decoded() &&
          kv->acquire_slot(c.kv)) {
        reuse_locked(c);
        // Another in this plan is decoding the input this one begins with:
        // it waits a step and shares that instead of decoding it twice.
        if (follows_locked(c)) continue;
      }
      const std::uint32_t room = n_ctx - std::min(n_ctx, c.n_decoded());
      if (params.pressure == PressurePolicy::wait && !c.gen_token_queued) {
        // A prompt that cannot finish in the cells there are waits whole,
        // rather than taking the last free cells and stalling everyone else.
        const std::uint32_t need = std::min(c.n_queued(), room);
        if (need > kv->cells_free()) {
          if (!reclaimable) reclaimable = kv->spill_on() ? idle_cells_locked(nullptr) : 0;
          if (need > kv->cells_free() + *reclaimable) {
            ++held_back;
            continue;
          }
        }
      }
      if (!kv->acquire_slot(c.kv)) {
        ++no_slot;
        continue;
      }
      // A segment decodes under one adapter setting: up to the next change.
      std::uint32_t queued =
          adapter_state.used ? c.spans.run(c.n_decoded(), c.n_queued(), c.adapters) : c.n_queued();
      if (!c.media.empty()) {
        if (const MediaSpan *m = media_front(c)) {
          // A non-causal image next: planned whole, apart from the tokens
          // (media.cpp). A causal one: its rows like a prompt's, in pieces.
          if (!media_candidate_locked(c, *m)) continue;
          queued = std::min(queued, m->end() - c.n_decoded());
          ++media_rows_wanted;
        } else {
          queued = std::min(queued, text_run(c));  // text up to the next image
        }
      }
      scratch.planning.candidates.push_back({static_cast<std::uint32_t>(scratch.planning.convs.size()), queued, room, c.priority,
                            c.turns.since(), c.gen_token_queued});
      scratch.planning.convs.push_back(&c);
      wanted += std::min(queued, room);
      if (!depth_is_cells()) {
        // Attention costs by each token's own position: weigh what each wants.
        std::uint32_t w = c.gen_token_queued ? 1u : std::min(queued, room);
        if (params.max_prompt_chunk != 0) w = std::min(w, params.max_prompt_chunk);
        depth_sum += w * (c.n_decoded() + w / 2.0);
        depth_weight += w;
      }
      generating += c.gen ? 1u : 0u;
    }
    std::uint32_t token_budget = budget.max_tokens.value_or(params.n_batch);
    double left = 0, depth = 0;
    const bool timed = budget.max_time && (!scratch.planning.candidates.empty() || !scratch.planning.media_wanting.empty());
    if (timed) {
      // What is left of the budget, less the sampling that follows the decode.
      left = std::chrono::duration<double>(*budget.max_time - (Clock::now() - t0)).count() -
             cost.sample_seconds() * generating;
      // The encoder thread is encoding on the same cores: decodes run slower
      // by what was seen beside earlier encodes.
      if (media.encoder_activity() % 2 == 1) left /= cost.encode_slowdown();
      depth = depth_is_cells() ? kv->cells_held() : depth_weight > 0 ? depth_sum / depth_weight : 0;
    }
    std::uint32_t free_cells = kv->cells_free();
    // Images first (each waited for its encoder); their batch's time comes
    // off what the tokens get.
    plan_media_locked(out.media, token_budget, free_cells, timed ? &left : nullptr);
    const std::uint32_t token_cap = token_budget;
    if (timed && !scratch.planning.candidates.empty()) {
      // Each adapter group is a llama_decode of its own, and each switch
      // re-reserves llama.cpp's graph: what they cost comes off the budget.
      const double tokens_left = left - group_overhead_locked(depth);
      token_budget = cost.tokens_within(tokens_left, depth, token_budget);
      // A whole image that leaves no time for a one-token decode takes the
      // step alone: the tokens wait one step instead of the step overrunning
      // by their decode. Never two such steps in a row.
      if (!out.media.empty() && !media.alone_last && tokens_left < cost.predict(1, depth) * cost.margin(1)) {
        token_budget = 0;
      }
    }
    plan_batch(scratch.planning.candidates, {token_budget, free_cells, params.max_prompt_chunk, stats.steps}, scratch.planning.entries);
    // With flash attention the depth is the planned tokens' mean position, and
    // the estimate above weighs each prompt by all it wants, which a tight
    // budget does not give it (a 256-token arrival put it at 127 while the
    // steps ran at 37, and one token was priced at 6x): fit the budget at
    // the plan's own depth, at most twice, only shrinking the second time.
    for (int again = 0; timed && token_budget > 0 && !depth_is_cells() && !scratch.planning.entries.empty() && again < 2;
         ++again) {
      const double planned = planned_depth_locked();
      std::uint32_t fit = cost.tokens_within(left - group_overhead_locked(planned), planned, token_cap);
      if (again == 1) fit = std::min(fit, token_budget);
      depth = planned;
      if (fit == token_budget) break;
      token_budget = fit;
      plan_batch(scratch.planning.candidates, {token_budget, free_cells, params.max_prompt_chunk, stats.steps},
                 scratch.planning.entries);
    }
    out.image_step_need = 0;
    if (timed && media_rows_wanted > 0) {
      out.image_step_need = fit_image_rows_locked(left - group_overhead_locked(depth), depth, token_budget, free_cells);
    }
    if (budget.max_time && adapter_state.used && !scratch.planning.entries.empty())
      replan_for_groups_locked(left, depth, token_budget, wanted);
    draft_room = draft_room_locked(budget, token_budget, free_cells,
                                   timed ? std::optional(left - group_overhead_locked(depth)) : std::nullopt, depth);
    const bool pressure = kv->cells_free() < std::min<std::uint64_t>(token_budget, wanted);
    result.blocked = no_slot + held_back;
    if (!pressure) break;
    // Who got less than it wanted, and who got nothing, because cells ran out.
    Conv *first_short = nullptr;
    std::uint32_t n_blocked = 0;
    for (const auto &cand : scratch.planning.candidates) {
      const auto it = std::find_if(scratch.planning.entries.begin(), scratch.planning.entries.end(),
                                   [&](auto &e) { return e.index == cand.index; });
      const std::uint32_t got = it == scratch.planning.entries.end() ? 0 : it->n_tokens;
      std::uint32_t want = std::min(cand.queued, cand.room);
      if (params.max_prompt_chunk != 0 && !cand.generating) want = std::min(want, params.max_prompt_chunk);
      if (got >= want) continue;
      if (first_short == nullptr) first_short = scratch.planning.convs[cand.index];
      if (got > 0) continue;
      ++n_blocked;
      Conv &c = *scratch.planning.convs[cand.index];
      if (params.pressure == PressurePolicy::fail && attempt == 0) {
        post_error_locked(c, Error(Errc::out_of_range, fmt::format("conversation {} needs {} KV cells, {} of {} are free",
                                                                   c.id, want, kv->cells_free(), n_ctx)));
      }
    }
    result.blocked += n_blocked;
    if (first_short == nullptr || params.pressure != PressurePolicy::callback || attempt > 0) break;
    // The callback may rewind, shift or dispose; then plan again, once.
    auto handle = first_short->handle.lock();
    if (!handle) break;
    const std::uint32_t need = std::min(first_short->n_queued(), token_budget);
    PressureInfo info{Conversation(handle), need, kv->cells_free()};
    lock.unlock();
    try {
      params.on_pressure(info);
    } catch (...) {
      // Documented: a throwing callback freed nothing.
    }
    handle.reset();
    info.conversation = Conversation();
    lock.lock();
    if (!closed) sample_phase(result, lock);  // the callback may have changed generations
    if (closed) {
      out.clear();
      out.closed = true;
      return out;
    }
  }
  media.alone_last = !out.media.empty() && scratch.planning.entries.empty();
  for (const auto &e : scratch.planning.entries) {
    Conv &c = *scratch.planning.convs[e.index];
    if (const MediaSpan *m = c.media.empty() ? nullptr : media_front(c)) {
      // Rows of a causal image: an embeddings batch (media.cpp).
      out.media.push_back({.conv = &c,
                           .chunk = m->chunk,
                           .epoch = c.epoch,
                           .start = c.n_decoded(),
                           .offset = c.n_decoded() - m->begin,
                           .rows = e.n_tokens,
                           .adapters = adapter_state.used ? c.next_adapters() : nullptr,
                           .output = e.n_tokens == c.n_queued()});
      continue;
    }
    out.segments.push_back({.conv = &c, .n = e.n_tokens, .epoch = c.epoch, .start = c.n_decoded()});
    if (adapter_state.used) out.segments.back().adapters = c.next_adapters();
  }
  if (adapter_state.used) group_segments(out.segments, budget.deadline.has_value());
  plan_drafts_locked(out, draft_room);
  return out;
}

}  // namespace weft::detail
