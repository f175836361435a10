// ExecutorCore::step: reconcile → sample → schedule → run → update.
#include <fmt/format.h>

#include <chrono>

#include "core/internal.hpp"
#include "exec/executor_core.hpp"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Debug and sanitizer builds check the ledger against llama.cpp after every
// step: a wrong ledger would corrupt conversations silently.
#ifdef NDEBUG
constexpr bool kVerifyLedger = false;
#else
constexpr bool kVerifyLedger = true;
#endif

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

namespace {

// Seconds the budget has left (max_time from t0, or the deadline), if it sets any.
std::optional<double> time_left(const StepBudget &budget, Clock::time_point t0) {
  const auto now = Clock::now();
  std::optional<double> seconds;
  if (budget.max_time) seconds = std::chrono::duration<double>(*budget.max_time - (now - t0)).count();
  if (budget.deadline) {
    const double until = std::chrono::duration<double>(*budget.deadline - now).count();
    seconds = seconds ? std::min(*seconds, until) : until;
  }
  return seconds;
}

}  // namespace

StepResult ExecutorCore::step(const StepBudget &asked) {
  const auto t0 = Clock::now();
  const StepBudget budget = check_budget(asked, params.n_batch);
  // The stepping thread already holds gate.mu: waiting for it would hang.
  if (gate.stepping.load() == std::this_thread::get_id()) {
    fail(Errc::invalid_argument,
         "step() called from a callback on the stepping thread (on_token or on_pressure) while that step runs; "
         "return from the callback and step again");
  }
  std::unique_lock step_lock(gate.mu);
  gate.stepping.store(std::this_thread::get_id());
  struct Unmark {
    std::atomic<std::thread::id> &s;
    std::atomic<std::uint64_t> &ended;
    ~Unmark() {
      s.store(std::thread::id{});
      ended.fetch_add(1);
    }
  } unmark{gate.stepping, gate.ended};

  StepResult result;
  std::unique_lock lock(mu);
  if (closed) fail(Errc::disposed, "the executor was destroyed");
  reconcile_locked(&lock);
  run_boundary_tasks_locked();
  if (budget.deadline && *budget.deadline <= t0) {
    result.deadline_hit = true;  // already late: decode nothing
    ++stats.deadline_stops;
    std::vector<std::shared_ptr<GenState>> ended;
    ended.swap(outbox.finished);  // ended by game threads' calls since the last step
    lock.unlock();
    deliver_finished(ended);
    return result;
  }
  ++stats.steps;
  sample_phase(result, lock);
  // Texts the last step passed over go first: their turn (never two
  // running). Texts past the front one leave a one-token decode's time for
  // the conversations; when the turn leaves less, they plan nothing this
  // step (the step would overrun by their decode) — unless a whole image
  // took the last step alone: conversations never sit out two steps running.
  const bool embed_turn = embedder && embedder->due();
  StepBudget token_budget = budget;
  bool embed_alone = false;
  if (embed_turn) {
    const double one_token = cost.predict(1, depth_is_cells() ? kv->cells_held() : 0) * cost.margin(1);
    run_embeddings_locked(budget, t0, true, result, lock, one_token);
    const std::uint32_t cap = budget.max_tokens.value_or(params.n_batch);
    token_budget.max_tokens = cap - std::min(cap, result.tokens_embedded);
    const auto left = time_left(budget, t0);
    embed_alone = left && *left < one_token && !media.alone_last;
  }

  const auto &moves = kv->counters();
  const std::uint64_t moves_before = moves.parks + moves.restores + moves.recomputes;
  reconcile_locked(&lock);  // what operations left while the sampling ran unlocked
  const bool may_age = make_resident_locked(token_budget.max_tokens.value_or(params.n_batch), lock);
  StepPlan plan;
  if (embed_alone) {
    // The turn took the step: no plan (a budget of 0 would still plan one
    // token), and no whole image alone next step.
    plan = std::move(scratch.spare_plan);
    plan.clear();
    media.alone_last = true;
  } else {
    plan = schedule_locked(token_budget, t0, result, lock);
    if (plan.closed) return result;
  }

  const bool idle = plan.empty();
  if (idle) {
    // Idle: this step changed nothing, so the next one would not either —
    // whoever is blocked waits for the caller (dispose, rewind, clear_error).
    result.idle = result.tokens_sampled == 0 && moves.parks + moves.restores + moves.recomputes == moves_before &&
                  !may_age && convs.dirty.empty();
  } else {
    const std::uint64_t encoder_before = media.encoder_activity();
    run_media_locked(plan.media, result, lock);  // images whose embeddings the encoder made
    result.deadline_hit = run_locked(plan.segments, plan.drafts, budget, result, lock);
    if (plan.image_step_need > 0 && !result.deadline_hit && result.failed == 0 &&
        media.encoder_quiet_since(encoder_before)) {
      cost.observe_image_step(plan.image_step_need, result.decode_seconds);
    }
    if (result.deadline_hit) ++stats.deadline_stops;
    stats.tokens_decoded += result.tokens_decoded;
    // No second sampling pass: generations were sampled in the run stage;
    // the few it left (started meanwhile, a fork copying the sampler, a
    // context about to fill, an image ending the input) are sampled at the
    // next step's start, before its plan, so their token decodes in the same
    // step either way.
  }
  if (drafter && !idle && !closed) run_drafter_locked(time_left(budget, t0), result, lock);
  // Texts in what the budget leaves.
  if (!embed_turn && !closed) run_embeddings_locked(budget, t0, false, result, lock);
  if (result.tokens_embedded > 0) result.idle = false;
  if (embedder && embedder->due()) {
    result.idle = false;  // their turn comes next step
    notify_work();
  }
  if (!idle || result.tokens_embedded > 0) {
    result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    stats.record(result.seconds, result.decode_seconds);
  }
  if constexpr (kVerifyLedger) {
    for (const auto &[id, c] : convs.all) {
      if (!c->dirty) kv->verify(c->kv);
    }
  }
  lock.unlock();
  deliver_callbacks();
  lock.lock();
  if (!gate.boundary_tasks.empty()) {
    // A save asked for during the step (its callbacks included): the
    // boundary is now.
    reconcile_locked(&lock);
    run_boundary_tasks_locked();
  }
  scratch.spare_plan = std::move(plan);  // its buffers, for the next step
  std::vector<std::shared_ptr<GenState>> ended;
  ended.swap(outbox.finished);  // empty in most steps: no allocation, no extra lock
  lock.unlock();
  if (idle && result.tokens_embedded == 0) result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  deliver_finished(ended);
  return result;
}

void ExecutorCore::run_embeddings_locked(const StepBudget &budget, Clock::time_point t0, bool turn,
                                         StepResult &result, std::unique_lock<std::mutex> &lock, double reserve) {
  if (!embedder || embedder->pending() == 0) return;
  const std::uint32_t cap = budget.max_tokens.value_or(params.n_batch);
  const std::uint32_t used = result.tokens_decoded + result.tokens_embedded;
  std::optional<double> seconds = time_left(budget, t0);
  if (seconds) *seconds -= reserve;
  lock.unlock();  // the embedder's context is the stepper's alone
  const Embedder::Ran ran = embedder->run(cap > used ? cap - used : 0, seconds, turn);
  lock.lock();
  result.tokens_embedded += ran.tokens;
  result.texts_embedded += ran.texts;
}

}  // namespace weft::detail
