// The run stage: the planned segments through llama_decode, in micro-batches
// when there is a deadline, with failures narrowed down to the conversation
// that caused them.
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/internal.hpp"
#include "core/model_impl.hpp"
#include "exec/executor_core.hpp"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The conversation was changed or disposed since the plan: what is left of
// its segment is not decoded (reconcile drops what was).
// (The cache check is a guard: an empty sequence takes any position in
// llama.cpp, so a plan that ran ahead of the cache would corrupt silently.)
bool stale(const Segment &s) {
  return s.conv->disposed || s.conv->epoch != s.epoch || s.conv->kv.n() != s.start + s.done;
}

}  // namespace

bool ExecutorCore::run_locked(std::vector<Segment> &segments, std::span<const Token> drafts, const StepBudget &budget,
                              StepResult &result, std::unique_lock<std::mutex> &lock) {
  // Without a deadline the whole plan goes to one llama_decode; with one,
  // a micro-batch per call, so the clock can be checked between them and
  // every call that succeeds is whole (logits included). Segments are in
  // rank order, so the first micro-batch (which always completes) serves
  // the conversations that waited longest.
  const bool has_deadline = budget.deadline.has_value();
  const std::uint32_t cap = has_deadline ? params.n_ubatch : params.n_batch;
  // The plan's images went before (run_media_locked): the first token
  // micro-batch completes all the same, or an image that overran would
  // leave every generating conversation without a token that step.
  const std::uint32_t media_decoded = result.tokens_decoded;
  // However the stage ends, no sampler stays reserved for a part that never
  // committed.
  struct ReleaseEarly {
    ExecutorCore &x;
    std::unique_lock<std::mutex> &lock;
    ~ReleaseEarly() {
      if (!lock.owns_lock()) lock.lock();
      x.release_early_locked();
    }
  } release_early{*this, lock};
  std::size_t cursor = 0;  // next segment to slice from
  scratch.run.parts.clear();
  auto &stack = scratch.run.ranges;  // [begin, end) ranges of `parts` still to decode
  stack.clear();

  for (;;) {
    if (stack.empty()) {
      const std::size_t begin = scratch.run.parts.size();
      std::uint32_t room = cap;
      const AdapterConfig *group = nullptr;  // a llama_decode is of one adapter setting
      for (; room > 0 && cursor < segments.size(); ++cursor) {
        Segment &s = segments[cursor];
        if (stale(s)) s.failed = true;
        if (!s.failed) {
          if (scratch.run.parts.size() > begin && !same_adapters(group, s.adapters.get())) break;
          group = s.adapters.get();
        }
        if (s.draft > 0 && !s.failed && s.n > room) {
          // Drafts are verified in the decode that holds them all: what
          // the micro-batch has no room for is not drafted.
          s.draft = room > 0 ? room - 1 : 0;
          s.n = 1 + s.draft;
          if (room == 0) break;
        }
        const std::uint32_t n = s.failed ? 0 : std::min(room, s.n - s.sliced);
        if (n > 0) scratch.run.parts.push_back({static_cast<std::uint32_t>(cursor), n, false, 0});
        s.sliced += n;
        room -= n;
        if (!s.failed && s.sliced < s.n) break;  // the micro-batch is full
      }
      if (scratch.run.parts.size() == begin) return false;  // the plan is done
      // Between micro-batches; the first always runs (a deadline that had
      // passed when the step began was handled in step()).
      if (has_deadline && result.tokens_decoded > media_decoded && Clock::now() >= *budget.deadline) return true;
      stack.push_back({begin, scratch.run.parts.size()});
    }
    const auto [lo, hi] = stack.back();
    stack.pop_back();

    llama_batch &b = *batch;
    b.n_tokens = 0;
    double depth = 0;  // summed position of every token in the batch
    std::size_t live = 0;
    std::uint32_t outputs = 0;
    for (std::size_t i = lo; i < hi; ++i) {
      Segment &s = segments[scratch.run.parts[i].seg];
      if (!s.failed && stale(s)) s.failed = true;
      if (s.failed) continue;
      Conv &c = *s.conv;
      Part &part = scratch.run.parts[i];
      const std::uint32_t pos = s.start + s.done;
      const llama_pos at = c.kv.pos(pos);  // past an M-RoPE image, positions and indices part
      part.output = s.draft > 0 || part.n == c.n_queued();
      part.checkpoint_seq = part.output && !c.gen_token_queued && !kv->family().cuts() ? c.kv.seq : -1;
      // (A retry after a failed decode keeps the job the first try claimed.)
      if (part.output && part.job < 0) part.job = claim_early_sample_locked(c, part.n);
      if (s.draft > 0 && part.job < 0) {
        s.draft = 0;  // its sample is left to the sampling phase: nothing to verify drafts with
        s.n = s.sliced = part.n = 1;
      } else if (s.draft > 0) {
        prepare_spec_job_locked(scratch.run.early[static_cast<std::size_t>(part.job)], drafts.subspan(s.draft_at, s.draft));
      }
      const std::uint32_t n = part.n;
      if (part.output && part.job < 0) {
        part.staged = outputs++;
        auto &staging = scratch.run.staging;
        if (staging.size() < outputs) staging.resize(outputs);
        // A conversation whose generation sampled in place kept its buffer
        // (stale): it goes round again, so the first copy after a generation
        // does not allocate 128 KB per conversation in the middle of a step.
        if (!c.has_logits && c.logits.capacity() > staging[part.staged].capacity()) {
          c.logits.swap(staging[part.staged]);
        }
      }
      for (std::uint32_t k = 0; k < n; ++k) {
        const int row = b.n_tokens++;
        b.token[row] = k == 0 || s.draft == 0 ? c.queue[k] : drafts[s.draft_at + k - 1];
        b.pos[row] = at + static_cast<llama_pos>(k);
        b.n_seq_id[row] = 1;
        b.seq_id[row][0] = c.kv.seq;
        b.logits[row] = part.output && (k + 1 == n || s.draft > 0);
      }
      depth += n * (pos + (n - 1) / 2.0);
      ++live;
    }
    if (live == 0) continue;

    kv->make_room(static_cast<std::uint32_t>(b.n_tokens));  // the prefix cache gives way
    bool switched = false;
    if (adapter_state.used) {
      for (std::size_t i = lo; i < hi && !switched; ++i) {
        const Segment &s = segments[scratch.run.parts[i].seg];
        if (s.failed) continue;
        try {
          switched = use_adapters(s.adapters);
        } catch (const Error &e) {
          // llama.cpp refused the setting: its conversations fail, others go on.
          for (std::size_t j = lo; j < hi; ++j) {
            Segment &t = segments[scratch.run.parts[j].seg];
            if (!t.failed) {
              t.failed = true;
              post_error_locked(*t.conv, e);
              ++result.failed;
            }
          }
        }
        break;
      }
      if (std::all_of(scratch.run.parts.begin() + static_cast<std::ptrdiff_t>(lo),
                      scratch.run.parts.begin() + static_cast<std::ptrdiff_t>(hi),
                      [&](const Part &p) { return segments[p.seg].failed; })) {
        continue;
      }
    }
    if (const std::string lost = model.impl()->failure(); !lost.empty()) {
      fail_parts_locked(segments, lo, hi, lost, result);  // nothing reaches a dead peer's stand-in
      continue;
    }
    const double used_before = kv->cells_held();  // the cells attention spans, without flash attention
    const std::uint64_t encoder_before = media.encoder_activity();
    gate.aborted.store(false, std::memory_order_relaxed);
    // The first micro-batch of a step always completes, so every step makes
    // progress even when one micro-batch alone overruns the deadline; later
    // ones are aborted in flight once it passes.
    // Never for a recurrent model: an abort would leave states llama.cpp
    // moved on, each conversation then decoded again from its start.
    const bool arm = has_deadline && result.tokens_decoded > media_decoded && kv->family().cuts();
    gate.abort_deadline_ns.store(arm ? to_ns(*budget.deadline) : 0, std::memory_order_relaxed);
    lock.unlock();
    const auto d0 = Clock::now();
    const int rc = decoder->decode(ctx, b);
    const double took = std::chrono::duration<double>(Clock::now() - d0).count();
    if (rc == 0) {
      // Before the lock is taken again, and before the next decode
      // overwrites them: a generating conversation's token is sampled from
      // llama.cpp's logits in place; other outputs are copied. `parts`,
      // `staging` and `early` are this thread's own, and an early job's
      // sampler is reserved for it (SamplerShare).
      int row = 0;
      for (std::size_t i = lo; i < hi; ++i) {
        Part &part = scratch.run.parts[i];
        if (segments[part.seg].failed) continue;
        row += static_cast<int>(part.n);
        if (!part.output) continue;
        const float *lg = llama_get_logits_ith(ctx, row - 1);
        if (part.checkpoint_seq >= 0) {
          part.checkpoint = kv->copy_checkpoint(part.checkpoint_seq, std::span(lg, static_cast<std::size_t>(n_vocab)));
        }
        if (part.job >= 0 && segments[part.seg].draft > 0) {
          auto &rows = scratch.run.rows;
          rows.clear();
          for (std::uint32_t k = part.n; k > 0; --k) rows.push_back(llama_get_logits_ith(ctx, row - static_cast<int>(k)));
          sample_spec_job(scratch.run.early[static_cast<std::size_t>(part.job)], rows);
        } else if (part.job >= 0) {
          sample_job(scratch.run.early[static_cast<std::size_t>(part.job)], lg);
        } else {
          scratch.run.staging[part.staged].assign(lg, lg + n_vocab);
        }
      }
    }
    lock.lock();
    gate.abort_deadline_ns.store(0, std::memory_order_relaxed);
    if (const std::string lost = model.impl()->failure(); !lost.empty()) {
      // An RPC peer failed during this decode: its logits are the relay's
      // zeros, never committed.
      for (std::size_t i = lo; i < hi; ++i) roll_back_locked(*segments[scratch.run.parts[i].seg].conv);
      ++stats.decode_failures;
      fail_parts_locked(segments, lo, hi, lost, result);
      continue;
    }
    result.decode_seconds += took;
    ++result.decode_calls;
    // An encode beside this decode took cores from it: not what a decode costs.
    const bool learn = media.encoder_quiet_since(encoder_before);

    if (rc == 0) {
      const double d = depth_is_cells() ? used_before : depth / static_cast<double>(b.n_tokens);
      double t = took;
      if (switched && learn) {
        // The switch's graph reserve ran inside this decode: learnt apart,
        // so the per-token model stays that of a plain decode.
        const double before = cost.switch_seconds();
        cost.observe_switch(took - cost.predict(static_cast<std::uint32_t>(b.n_tokens), d));
        t = std::max(took - before, took * 0.1);
      }
      if (learn) {
        cost.observe(static_cast<std::uint32_t>(b.n_tokens), d, t);
      } else if (!switched && encoder_before % 2 == 1) {
        // Beside an encode: how much slower than predicted (the cores are
        // shared), a running value the plan divides its time by while the
        // encoder runs.
        const double ratio = took / std::max(1e-6, cost.predict(static_cast<std::uint32_t>(b.n_tokens), d));
        cost.observe_beside_encode(ratio);
      }
      for (std::size_t i = lo; i < hi; ++i) {
        if (Segment &s = segments[scratch.run.parts[i].seg]; !s.failed) commit_part(s, scratch.run.parts[i], result);
      }
      continue;
    }

    // llama.cpp keeps the micro-batches it finished before a failure or an
    // abort: bring every sequence back to its last committed position, so
    // the cache and the ledger agree and the tokens can simply be retried.
    for (std::size_t i = lo; i < hi; ++i) roll_back_locked(*segments[scratch.run.parts[i].seg].conv);
    if (rc == 2 && gate.aborted.load()) {
      // Our deadline, not a fault. It took at least this long: if that is
      // more than predicted, the cost model learns it (else a chunk that
      // does not fit would be planned, and aborted, every step).
      const double d = depth_is_cells() ? used_before : depth / std::max(1, b.n_tokens);
      if (learn && took > cost.predict(static_cast<std::uint32_t>(b.n_tokens), d)) {
        cost.observe(static_cast<std::uint32_t>(b.n_tokens), d, took);
      }
      return true;
    }
    ++stats.decode_failures;
    if (live > 1) {
      // Narrow the failure down: each half on its own.
      std::size_t first = lo;
      while (segments[scratch.run.parts[first].seg].failed) ++first;
      const std::size_t mid = first + (hi - first) / 2;
      stack.push_back({mid, hi});
      stack.push_back({lo, mid});
      continue;
    }
    for (std::size_t i = lo; i < hi; ++i) {
      Segment &s = segments[scratch.run.parts[i].seg];
      if (!s.failed) fail_segment_locked(s, scratch.run.parts[i].n, rc, result);
    }
  }
}

void ExecutorCore::fail_parts_locked(std::vector<Segment> &segments, std::size_t lo, std::size_t hi,
                                     const std::string &why, StepResult &result) {
  for (std::size_t i = lo; i < hi; ++i) {
    Segment &s = segments[scratch.run.parts[i].seg];
    if (s.failed) continue;
    s.failed = true;
    post_error_locked(*s.conv, Error(Errc::backend, fmt::format("conversation {}: {}", s.conv->id, why)));
    ++result.failed;
  }
}

void ExecutorCore::fail_segment_locked(Segment &s, std::uint32_t n, int rc, StepResult &result) {
  s.failed = true;
  Conv &c = *s.conv;
  post_error_locked(c, Error(Errc::backend, fmt::format("llama_decode returned {} for conversation {} ({} tokens at "
                                                        "position {})",
                                                        rc, c.id, n, s.start + s.done)));
  ++result.failed;
}

}  // namespace weft::detail
