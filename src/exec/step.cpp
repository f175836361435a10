// ExecutorCore::step: sample, plan, decode (with failure bisection and hard
// deadlines), commit, sample again, deliver callbacks.
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "exec/executor_core.hpp"
#include "core/internal.hpp"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

StepBudget check_budget(StepBudget b, std::uint32_t n_batch) {
  if (b.max_tokens == 0u) b.max_tokens.reset();  // 0 means n_batch, as in the C ABI and C#
  if (b.max_tokens && *b.max_tokens > n_batch) {
    fail(Errc::invalid_argument,
         fmt::format("StepBudget.max_tokens = {} is outside [0, n_batch = {}] (0 means n_batch)", *b.max_tokens, n_batch));
  }
  if (b.max_time && b.max_time->count() <= 0) {
    fail(Errc::invalid_argument, fmt::format("StepBudget.max_time = {} us must be > 0", b.max_time->count()));
  }
  return b;
}

StepResult ExecutorCore::step(const StepBudget &asked) {
  const auto t0 = Clock::now();
  const StepBudget budget = check_budget(asked, params.n_batch);
  // The stepping thread already holds step_mu: waiting for it would hang.
  if (stepping.load() == std::this_thread::get_id()) {
    fail(Errc::invalid_argument,
         "step() called from a callback on the stepping thread (on_token or on_pressure) while that step runs; "
         "return from the callback and step again");
  }
  std::unique_lock step_lock(step_mu);
  stepping.store(std::this_thread::get_id());
  struct Unmark {
    std::atomic<std::thread::id> &s;
    ~Unmark() { s.store(std::thread::id{}); }
  } unmark{stepping};

  StepResult result;
  std::unique_lock lock(mu);
  if (closed) fail(Errc::disposed, "the executor was destroyed");
  if (budget.deadline && *budget.deadline <= t0) {
    result.deadline_hit = true;  // already late: decode nothing
    ++deadline_stops;
    return result;
  }
  ++steps;
  sample_phase_locked(result);

  const std::uint64_t moves_before = parks + restores + recomputes;
  const bool may_age = make_resident_locked(budget.max_tokens.value_or(params.n_batch));
  for (int attempt = 0;; ++attempt) {
    candidates.clear();
    plan_convs.clear();
    std::uint64_t wanted = 0;
    double depth_sum = 0, depth_weight = 0;
    std::uint32_t no_slot = 0, held_back = 0, generating = 0;
    std::optional<std::uint64_t> reclaimable;  // cells parking idle ones would free
    for (auto &[id, cp] : convs) {
      Conv &c = *cp;
      if (c.n_queued() == 0 || c.error) continue;
      if (c.where != Residency::resident) {
        ++no_slot;  // parked: waits for a slot or cells
        continue;
      }
      const std::uint32_t room = n_ctx - std::min(n_ctx, c.n_decoded());
      if (params.pressure == PressurePolicy::wait && !c.gen_token_queued) {
        // A prompt that cannot finish in the cells there are waits whole,
        // rather than taking the last free cells and stalling everyone else.
        const std::uint32_t need = std::min(c.n_queued(), room);
        if (need > ledger.free()) {
          if (!reclaimable) reclaimable = spill_on() ? idle_cells_locked(nullptr) : 0;
          if (need > ledger.free() + *reclaimable) {
            ++held_back;
            continue;
          }
        }
      }
      if (c.seq < 0) {
        if (free_seqs.empty()) {
          ++no_slot;
          continue;
        }
        c.seq = free_seqs.back();
        free_seqs.pop_back();
      }
      candidates.push_back({static_cast<std::uint32_t>(plan_convs.size()), c.n_queued(), room, c.priority,
                            c.turn_since(), c.gen_token_queued});
      plan_convs.push_back(&c);
      wanted += std::min(c.n_queued(), room);
      if (!depth_is_cells) {
        // Attention costs by each token's own position: weigh what each wants.
        std::uint32_t w = c.gen_token_queued ? 1u : std::min(c.n_queued(), room);
        if (params.max_prompt_chunk != 0) w = std::min(w, params.max_prompt_chunk);
        depth_sum += w * (c.n_decoded() + w / 2.0);
        depth_weight += w;
      }
      generating += c.gen ? 1u : 0u;
    }
    std::uint32_t token_budget = budget.max_tokens.value_or(params.n_batch);
    if (budget.max_time && !candidates.empty()) {
      // What is left of the budget, less the sampling that follows the decode.
      const double left = std::chrono::duration<double>(*budget.max_time - (Clock::now() - t0)).count() -
                          sample_seconds * generating;
      const double depth = depth_is_cells ? ledger.used() : depth_weight > 0 ? depth_sum / depth_weight : 0;
      token_budget = cost.tokens_within(left, depth, token_budget);
    }
    plan_batch(candidates, {token_budget, ledger.free(), params.max_prompt_chunk, steps}, plan);
    const bool pressure = ledger.free() < std::min<std::uint64_t>(token_budget, wanted);
    result.blocked = no_slot + held_back;
    if (!pressure) break;
    // Who got less than it wanted, and who got nothing, because cells ran out.
    Conv *first_short = nullptr;
    std::uint32_t n_blocked = 0;
    for (const auto &cand : candidates) {
      const auto it = std::find_if(plan.begin(), plan.end(), [&](auto &e) { return e.index == cand.index; });
      const std::uint32_t got = it == plan.end() ? 0 : it->n_tokens;
      std::uint32_t want = std::min(cand.queued, cand.room);
      if (params.max_prompt_chunk != 0 && !cand.generating) want = std::min(want, params.max_prompt_chunk);
      if (got >= want) continue;
      if (first_short == nullptr) first_short = plan_convs[cand.index];
      if (got > 0) continue;
      ++n_blocked;
      Conv &c = *plan_convs[cand.index];
      if (params.pressure == PressurePolicy::fail && attempt == 0) {
        c.error = Error(Errc::out_of_range, fmt::format("conversation {} needs {} KV cells, {} of {} are free", c.id,
                                                        want, ledger.free(), n_ctx));
        post_event_locked({.kind = EventKind::error, .conversation = c.id, .error = c.error});
        finish_generation_locked(c, FinishReason::error, c.error);
      }
    }
    result.blocked += n_blocked;
    if (first_short == nullptr || params.pressure != PressurePolicy::callback || attempt > 0) break;
    // The callback may rewind, shift or dispose; then plan again, once.
    auto handle = first_short->handle.lock();
    if (!handle) break;
    const std::uint32_t need = std::min(first_short->n_queued(), token_budget);
    PressureInfo info{Conversation(handle), need, ledger.free()};
    lock.unlock();
    try {
      params.on_pressure(info);
    } catch (...) {
      // Documented: a throwing callback freed nothing.
    }
    handle.reset();
    info.conversation = Conversation();
    lock.lock();
    if (closed) return result;
    sample_phase_locked(result);  // the callback may have changed generations
  }

  if (plan.empty()) {
    // Idle: this step changed nothing, so the next one would not either —
    // whoever is blocked waits for the caller (dispose, rewind, clear_error).
    result.idle = result.tokens_sampled == 0 && parks + restores + recomputes == moves_before && !may_age;
    lock.unlock();
    deliver_events();
    result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return result;
  }

  segments.clear();
  for (const auto &e : plan) segments.push_back({plan_convs[e.index], e.n_tokens});
  result.deadline_hit = decode_plan(budget, result, lock);
  if (result.deadline_hit) ++deadline_stops;
  tokens_decoded += result.tokens_decoded;
  sample_phase_locked(result);

  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto slot = stat_pos++ % kStatWindow;
  if (step_ms.size() < kStatWindow) {
    step_ms.push_back(static_cast<float>(result.seconds * 1e3));
    decode_ms.push_back(static_cast<float>(result.decode_seconds * 1e3));
  } else {
    step_ms[slot] = static_cast<float>(result.seconds * 1e3);
    decode_ms[slot] = static_cast<float>(result.decode_seconds * 1e3);
  }
  lock.unlock();
  deliver_events();
  return result;
}

void ExecutorCore::commit_part(const Part &part, int last_row, StepResult &result) {
  Segment &s = segments[part.seg];
  Conv &c = *s.conv;
  const std::uint32_t n = part.n;
  const bool output = n == c.n_queued();
  ledger.alloc(n, c.cells);
  const auto head = c.queue.begin() + static_cast<std::ptrdiff_t>(c.queue_head);
  c.history.insert(c.history.end(), head, head + n);
  c.queue_head += n;
  if (c.queue_head == c.queue.size()) {
    c.queue.clear();
    c.queue_head = 0;
  }
  if (output) {
    const float *lg = llama_get_logits_ith(ctx, last_row);
    c.logits.assign(lg, lg + n_vocab);
    c.has_logits = true;
  } else {
    c.has_logits = false;
  }
  c.gen_token_queued = false;
  c.last_served = steps;
  s.done += n;
  result.tokens_decoded += n;
  if (!s.counted) {
    s.counted = true;
    ++result.conversations;
  }
}

bool ExecutorCore::decode_plan(const StepBudget &budget, StepResult &result, std::unique_lock<std::mutex> &lock) {
  // Without a deadline the whole plan goes to one llama_decode; with one,
  // a micro-batch per call, so the clock can be checked between them and
  // every call that succeeds is whole (logits included). Segments are in
  // rank order, so the first micro-batch (which always completes) serves
  // the conversations that waited longest.
  const bool has_deadline = budget.deadline.has_value();
  const std::uint32_t cap = has_deadline ? params.n_ubatch : params.n_batch;
  std::size_t cursor = 0;  // next segment to slice from
  parts.clear();
  auto &stack = work_ranges;  // [begin, end) ranges of `parts` still to decode
  stack.clear();
  auto *mem = llama_get_memory(ctx);

  for (;;) {
    if (stack.empty()) {
      const std::size_t begin = parts.size();
      std::uint32_t room = cap;
      for (; room > 0 && cursor < segments.size(); ++cursor) {
        Segment &s = segments[cursor];
        const std::uint32_t n = s.failed ? 0 : std::min(room, s.n - s.sliced);
        if (n > 0) parts.push_back({static_cast<std::uint32_t>(cursor), n});
        s.sliced += n;
        room -= n;
        if (!s.failed && s.sliced < s.n) break;  // the micro-batch is full
      }
      if (parts.size() == begin) return false;  // the plan is done
      // Between micro-batches; the first always runs (a deadline that had
      // passed when the step began was handled in step()).
      if (has_deadline && result.tokens_decoded > 0 && Clock::now() >= *budget.deadline) return true;
      stack.push_back({begin, parts.size()});
    }
    const auto [lo, hi] = stack.back();
    stack.pop_back();

    llama_batch &b = *batch;
    b.n_tokens = 0;
    double depth = 0;  // summed position of every token in the batch
    std::size_t live = 0;
    for (std::size_t i = lo; i < hi; ++i) {
      const Segment &s = segments[parts[i].seg];
      if (s.failed) continue;
      const Conv &c = *s.conv;
      const std::uint32_t n = parts[i].n;
      const bool output = n == c.n_queued();
      for (std::uint32_t k = 0; k < n; ++k) {
        const int row = b.n_tokens++;
        b.token[row] = c.queue[c.queue_head + k];
        b.pos[row] = static_cast<llama_pos>(c.n_decoded() + k);
        b.n_seq_id[row] = 1;
        b.seq_id[row][0] = c.seq;
        b.logits[row] = output && k + 1 == n;
      }
      depth += n * (c.n_decoded() + (n - 1) / 2.0);
      ++live;
    }
    if (live == 0) continue;

    const double used_before = ledger.used();  // the cells attention spans, without flash attention
    aborted.store(false, std::memory_order_relaxed);
    // The first micro-batch of a step always completes, so every step makes
    // progress even when one micro-batch alone overruns the deadline; later
    // ones are aborted in flight once it passes.
    const bool arm = has_deadline && result.tokens_decoded > 0;
    abort_deadline_ns.store(arm ? to_ns(*budget.deadline) : 0, std::memory_order_relaxed);
    lock.unlock();
    const auto d0 = Clock::now();
    int rc = decode_hook ? decode_hook(b) : 0;
    if (rc == 0) rc = llama_decode(ctx, b);
    const double took = std::chrono::duration<double>(Clock::now() - d0).count();
    lock.lock();
    abort_deadline_ns.store(0, std::memory_order_relaxed);
    result.decode_seconds += took;
    ++result.decode_calls;

    if (rc == 0) {
      cost.observe(static_cast<std::uint32_t>(b.n_tokens), depth_is_cells ? used_before : depth / static_cast<double>(b.n_tokens),
                   took);
      int row = 0;
      for (std::size_t i = lo; i < hi; ++i) {
        if (segments[parts[i].seg].failed) continue;
        row += static_cast<int>(parts[i].n);
        commit_part(parts[i], row - 1, result);
      }
      continue;
    }

    // llama.cpp keeps the micro-batches it finished before a failure or an
    // abort: bring every sequence back to its last committed position, so
    // the cache and the ledger agree and the tokens can simply be retried.
    for (std::size_t i = lo; i < hi; ++i) {
      const Conv &c = *segments[parts[i].seg].conv;
      if (llama_memory_seq_pos_max(mem, c.seq) >= static_cast<llama_pos>(c.n_decoded())) {
        llama_memory_seq_rm(mem, c.seq, static_cast<llama_pos>(c.n_decoded()), -1);
      }
    }
    if (rc == 2 && aborted.load()) {
      // Our deadline, not a fault. It took at least this long: if that is
      // more than predicted, the cost model learns it (else a chunk that
      // does not fit would be planned, and aborted, every step).
      const double d = depth_is_cells ? used_before : depth / std::max(1, b.n_tokens);
      if (took > cost.predict(static_cast<std::uint32_t>(b.n_tokens), d)) {
        cost.observe(static_cast<std::uint32_t>(b.n_tokens), d, took);
      }
      return true;
    }
    ++decode_failures;
    if (live > 1) {
      // Narrow the failure down: each half on its own.
      std::size_t first = lo;
      while (segments[parts[first].seg].failed) ++first;
      const std::size_t mid = first + (hi - first) / 2;
      stack.push_back({mid, hi});
      stack.push_back({lo, mid});
      continue;
    }
    for (std::size_t i = lo; i < hi; ++i) {
      Segment &s = segments[parts[i].seg];
      if (s.failed) continue;
      s.failed = true;
      Conv &c = *s.conv;
      c.error = Error(Errc::backend, fmt::format("llama_decode returned {} for conversation {} ({} tokens at position {})",
                                                 rc, c.id, parts[i].n, c.n_decoded()));
      post_event_locked({.kind = EventKind::error, .conversation = c.id, .error = c.error});
      finish_generation_locked(c, FinishReason::error, c.error);
      ++result.failed;
    }
  }
}

}  // namespace weft::detail
