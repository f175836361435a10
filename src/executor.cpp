// Executor: the llama_context, parameter checks, and the step loop.
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "executor_core.hpp"
#include "internal.hpp"
#include "model_impl.hpp"

namespace weft {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

void validate(const Model &model, const ExecutorParams &p) {
  auto bad = [](const std::string &msg) { fail(Errc::invalid_argument, msg); };
  const auto max_seq = static_cast<std::uint32_t>(std::min<std::size_t>(256, llama_max_parallel_sequences()));
  if (p.n_seq_max < 1 || p.n_seq_max > max_seq) {
    bad(fmt::format("ExecutorParams.n_seq_max = {} is outside [1, {}]", p.n_seq_max, max_seq));
  }
  const std::uint64_t ctx_max = static_cast<std::uint64_t>(std::max(1, model.n_ctx_train())) * p.n_seq_max;
  if (p.n_ctx < 16 || p.n_ctx > ctx_max) {
    bad(fmt::format("ExecutorParams.n_ctx = {} is outside [16, {}] (n_ctx_train {} x n_seq_max {})", p.n_ctx, ctx_max,
                    model.n_ctx_train(), p.n_seq_max));
  }
  // llama.cpp asserts inside llama_init_from_model when n_batch < n_seq_max.
  if (p.n_batch < p.n_seq_max || p.n_batch > p.n_ctx) {
    bad(fmt::format("ExecutorParams.n_batch = {} is outside [n_seq_max = {}, n_ctx = {}]", p.n_batch, p.n_seq_max,
                    p.n_ctx));
  }
  if (p.n_ubatch > p.n_batch) {
    bad(fmt::format("ExecutorParams.n_ubatch = {} exceeds n_batch = {}", p.n_ubatch, p.n_batch));
  }
  if (p.n_threads < 0 || p.n_threads > 1024) {
    bad(fmt::format("ExecutorParams.n_threads = {} is outside [0, 1024]", p.n_threads));
  }
  if (p.kv_type == KvType::q8_0 && p.flash_attn == FlashAttention::disabled) {
    bad("ExecutorParams.kv_type = q8_0 needs flash attention (flash_attn = disabled)");
  }
  if (p.pressure == PressurePolicy::callback && !p.on_pressure) {
    bad("ExecutorParams.pressure = callback without on_pressure");
  }
}

ggml_type to_ggml(KvType t) {
  switch (t) {
    case KvType::f32: return GGML_TYPE_F32;
    case KvType::q8_0: return GGML_TYPE_Q8_0;
    case KvType::f16: break;
  }
  return GGML_TYPE_F16;
}

llama_flash_attn_type to_llama(FlashAttention f) {
  switch (f) {
    case FlashAttention::enabled: return LLAMA_FLASH_ATTN_TYPE_ENABLED;
    case FlashAttention::disabled: return LLAMA_FLASH_ATTN_TYPE_DISABLED;
    case FlashAttention::automatic: break;
  }
  return LLAMA_FLASH_ATTN_TYPE_AUTO;
}

double percentile(std::vector<float> v, double q) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

ExecutorCore::ExecutorCore(Model m, const ExecutorParams &p) : model(std::move(m)), params(p), ledger(0) {
  ensure_backend();
  validate(model, params);
  if (params.n_ubatch == 0) params.n_ubatch = params.n_batch;
  auto cp = llama_context_default_params();
  cp.n_ctx = params.n_ctx;
  cp.n_batch = params.n_batch;
  cp.n_ubatch = params.n_ubatch;
  cp.n_seq_max = params.n_seq_max;
  const int threads = params.n_threads > 0 ? params.n_threads
                                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.kv_unified = true;  // forks share cells; per-slot caches split the context
  cp.type_k = to_ggml(params.kv_type);
  cp.type_v = to_ggml(params.kv_type);
  cp.flash_attn_type = to_llama(params.flash_attn);
  cp.no_perf = true;
  take_llama_error();
  ctx = llama_init_from_model(model.impl()->model, cp);
  if (ctx == nullptr) {
    fail(Errc::backend, fmt::format("llama.cpp could not create a context (n_ctx {}, n_batch {}, n_seq_max {}): {}",
                                    params.n_ctx, params.n_batch, params.n_seq_max, take_llama_error()));
  }
  n_ctx = llama_n_ctx(ctx);
  n_vocab = model.n_vocab();
  can_shift = llama_memory_can_shift(llama_get_memory(ctx));
  ledger = KvLedger(n_ctx);
  for (int s = static_cast<int>(params.n_seq_max); s-- > 0;) free_seqs.push_back(s);
  batch = new llama_batch(llama_batch_init(static_cast<int32_t>(params.n_batch), 0, 1));
  step_ms.reserve(kStatWindow);
  decode_ms.reserve(kStatWindow);
  candidates.reserve(params.n_seq_max * 4);
  plan.reserve(params.n_seq_max * 4);
  plan_convs.reserve(params.n_seq_max * 4);
}

ExecutorCore::~ExecutorCore() { free_context(); }

void ExecutorCore::free_context() {
  if (batch != nullptr) {
    llama_batch_free(*batch);
    delete batch;
    batch = nullptr;
  }
  if (ctx != nullptr) llama_free(ctx);
  ctx = nullptr;
}

std::unique_lock<std::mutex> ExecutorCore::kv_lock() {
  if (stepping.load() == std::this_thread::get_id()) return {};
  return std::unique_lock<std::mutex>(step_mu);
}

Conv &ExecutorCore::get(std::uint64_t id) {
  if (closed) fail(Errc::disposed, fmt::format("conversation {}: its executor was destroyed", id));
  auto it = convs.find(id);
  if (it == convs.end()) fail(Errc::disposed, fmt::format("conversation {} was disposed", id));
  return *it->second;
}

Sampler &ExecutorCore::sampler_of(Conv &c) {
  if (!c.sampler) c.sampler.emplace(model, c.sampler_params, static_cast<std::int32_t>(n_ctx));
  return *c.sampler;
}

void ExecutorCore::release_kv_from(Conv &c, std::uint32_t pos) {
  if (pos >= c.history.size()) return;
  llama_memory_seq_rm(llama_get_memory(ctx), c.seq, static_cast<llama_pos>(pos), -1);
  ledger.release(std::span(c.cells).subspan(pos));
  c.cells.resize(pos);
  c.history.resize(pos);
  c.has_logits = false;
}

// Logits belong to history.back(); when they are gone, re-decode that one
// token (it moves back to the queue) so sampling works after the next step.
void ExecutorCore::ensure_logits_locked(Conv &c) {
  if (c.has_logits || c.history.empty() || c.n_queued() > 0) return;
  const Token last = c.history.back();
  release_kv_from(c, c.n_decoded() - 1);
  c.queue.insert(c.queue.begin() + static_cast<std::ptrdiff_t>(c.queue_head), last);
}

void ExecutorCore::dispose_locked(Conv &c) {
  finish_generation_locked(c, FinishReason::cancelled);
  if (c.seq >= 0) {
    release_kv_from(c, 0);
    llama_memory_seq_rm(llama_get_memory(ctx), c.seq, -1, -1);
    free_seqs.push_back(c.seq);
  }
  convs.erase(c.id);
}

StepResult ExecutorCore::step(const StepBudget &budget) {
  const auto t0 = Clock::now();
  std::unique_lock step_lock(step_mu);
  stepping.store(std::this_thread::get_id());
  struct Unmark {
    std::atomic<std::thread::id> &s;
    ~Unmark() { s.store(std::thread::id{}); }
  } unmark{stepping};

  StepResult result;
  if (budget.max_tokens && (*budget.max_tokens == 0 || *budget.max_tokens > params.n_batch)) {
    fail(Errc::invalid_argument,
         fmt::format("StepBudget.max_tokens = {} is outside [1, n_batch = {}]", *budget.max_tokens, params.n_batch));
  }
  const std::uint32_t token_budget = budget.max_tokens.value_or(params.n_batch);

  std::unique_lock lock(mu);
  if (closed) fail(Errc::disposed, "the executor was destroyed");
  ++steps;
  sample_phase_locked(result);

  for (int attempt = 0;; ++attempt) {
    candidates.clear();
    plan_convs.clear();
    std::uint64_t wanted = 0;
    std::uint32_t no_slot = 0;
    for (auto &[id, cp] : convs) {
      Conv &c = *cp;
      if (c.n_queued() == 0 || c.error) continue;
      if (c.seq < 0) {
        if (free_seqs.empty()) {
          ++no_slot;
          continue;
        }
        c.seq = free_seqs.back();
        free_seqs.pop_back();
      }
      const std::uint32_t room = n_ctx - std::min(n_ctx, c.n_decoded());
      candidates.push_back({static_cast<std::uint32_t>(plan_convs.size()), c.n_queued(), room, c.priority,
                            c.last_served, c.gen_token_queued});
      plan_convs.push_back(&c);
      wanted += std::min(c.n_queued(), room);
    }
    plan_batch(candidates, {token_budget, ledger.free(), params.max_prompt_chunk, steps}, plan);
    const bool pressure = ledger.free() < std::min<std::uint64_t>(token_budget, wanted);
    result.blocked = no_slot;
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
    result.idle = result.blocked == 0;
    lock.unlock();
    deliver_events();
    result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return result;
  }

  // Decode the plan; on failure, split it by conversation to find the culprit.
  std::vector<PlanEntry> &entries = plan;
  std::uint32_t pending_fail = 0;
  double decode_s = 0;
  auto fill_batch = [&](std::size_t lo, std::size_t hi) {
    llama_batch &b = *batch;
    b.n_tokens = 0;
    for (std::size_t e = lo; e < hi; ++e) {
      Conv &c = *plan_convs[entries[e].index];
      const std::uint32_t n = entries[e].n_tokens;
      const bool output = n == c.n_queued();  // reaches the end of its input
      for (std::uint32_t i = 0; i < n; ++i) {
        const int k = b.n_tokens++;
        b.token[k] = c.queue[c.queue_head + i];
        b.pos[k] = static_cast<llama_pos>(c.n_decoded() + i);
        b.n_seq_id[k] = 1;
        b.seq_id[k][0] = c.seq;
        b.logits[k] = output && i + 1 == n;
      }
    }
  };
  // Applies a successful decode of entries [lo, hi) (under mu).
  auto commit = [&](std::size_t lo, std::size_t hi) {
    int row = 0;
    for (std::size_t e = lo; e < hi; ++e) {
      Conv &c = *plan_convs[entries[e].index];
      const std::uint32_t n = entries[e].n_tokens;
      const bool output = n == c.n_queued();
      ledger.alloc(n, c.cells);
      c.history.insert(c.history.end(), c.queue.begin() + static_cast<std::ptrdiff_t>(c.queue_head),
                       c.queue.begin() + static_cast<std::ptrdiff_t>(c.queue_head + n));
      c.queue_head += n;
      if (c.queue_head == c.queue.size()) {
        c.queue.clear();
        c.queue_head = 0;
      }
      row += static_cast<int>(n);
      if (output) {
        const float *lg = llama_get_logits_ith(ctx, row - 1);
        c.logits.assign(lg, lg + n_vocab);
        c.has_logits = true;
      } else {
        c.has_logits = false;
      }
      c.gen_token_queued = false;
      c.last_served = steps;
      result.tokens_decoded += n;
      ++result.conversations;
    }
  };
  // Decodes [lo, hi); mu is released around llama_decode only.
  auto &work = work_ranges;
  work.assign(1, {0, entries.size()});
  while (!work.empty()) {
    auto [lo, hi] = work.back();
    work.pop_back();
    fill_batch(lo, hi);
    lock.unlock();
    const auto d0 = Clock::now();
    int rc = decode_hook ? decode_hook(*batch) : 0;
    if (rc == 0) rc = llama_decode(ctx, *batch);
    decode_s += std::chrono::duration<double>(Clock::now() - d0).count();
    lock.lock();
    ++result.decode_calls;
    if (rc == 0) {
      commit(lo, hi);
      continue;
    }
    ++decode_failures;
    // Fatal errors and aborts may leave processed micro-batches behind:
    // remove them so the ledger and the cache agree, and retry later.
    for (std::size_t e = lo; e < hi; ++e) {
      Conv &c = *plan_convs[entries[e].index];
      llama_memory_seq_rm(llama_get_memory(ctx), c.seq, static_cast<llama_pos>(c.n_decoded()), -1);
    }
    if (hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      work.push_back({mid, hi});
      work.push_back({lo, mid});
      continue;
    }
    Conv &c = *plan_convs[entries[lo].index];
    c.error = Error(Errc::backend, fmt::format("llama_decode returned {} for conversation {} ({} tokens at position {})",
                                               rc, c.id, entries[lo].n_tokens, c.n_decoded()));
    finish_generation_locked(c, FinishReason::error, c.error);
    ++pending_fail;
  }
  result.failed = pending_fail;
  tokens_decoded += result.tokens_decoded;
  sample_phase_locked(result);

  result.decode_seconds = decode_s;
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto slot = stat_pos++ % kStatWindow;
  if (step_ms.size() < kStatWindow) {
    step_ms.push_back(static_cast<float>(result.seconds * 1e3));
    decode_ms.push_back(static_cast<float>(decode_s * 1e3));
  } else {
    step_ms[slot] = static_cast<float>(result.seconds * 1e3);
    decode_ms[slot] = static_cast<float>(decode_s * 1e3);
  }
  lock.unlock();
  deliver_events();
  return result;
}

}  // namespace detail

Executor::Executor(Model model, const ExecutorParams &params)
    : core_(std::make_shared<detail::ExecutorCore>(std::move(model), params)) {}

Executor::~Executor() {
  if (!core_) return;
  auto lock = core_->kv_lock();
  std::lock_guard guard(core_->mu);
  // Handles may outlive us: end generations, free the context now, and make
  // every later operation on them throw Errc::disposed.
  for (auto &[id, c] : core_->convs) core_->finish_generation_locked(*c, FinishReason::cancelled);
  core_->convs.clear();
  core_->closed = true;
  core_->free_context();
}

Executor::Executor(Executor &&) noexcept = default;
Executor &Executor::operator=(Executor &&other) noexcept {
  if (this != &other) {
    Executor dead(std::move(*this));
    core_ = std::move(other.core_);
  }
  return *this;
}

StepResult Executor::step(const StepBudget &budget) { return core_->step(budget); }

std::uint32_t Executor::cells_free() const {
  std::lock_guard lock(core_->mu);
  return core_->ledger.free();
}

const Model &Executor::model() const { return core_->model; }
const ExecutorParams &Executor::params() const { return core_->params; }

ExecutorStats Executor::stats() const {
  auto &c = *core_;
  std::lock_guard lock(c.mu);
  ExecutorStats s;
  s.n_ctx = c.n_ctx;
  s.cells_used = c.ledger.used();
  s.cells_free = c.ledger.free();
  s.n_seq_max = c.params.n_seq_max;
  s.slots_used = c.params.n_seq_max - static_cast<std::uint32_t>(c.free_seqs.size());
  s.conversations = static_cast<std::uint32_t>(c.convs.size());
  for (auto &[id, conv] : c.convs) {
    s.generating += conv->gen ? 1u : 0u;
    s.queued_tokens += conv->n_queued();
  }
  s.steps = c.steps;
  s.tokens_decoded = c.tokens_decoded;
  s.tokens_sampled = c.tokens_sampled;
  s.decode_failures = c.decode_failures;
  s.step_ms_p50 = detail::percentile(c.step_ms, 0.5);
  s.step_ms_p99 = detail::percentile(c.step_ms, 0.99);
  s.decode_ms_p50 = detail::percentile(c.decode_ms, 0.5);
  return s;
}

void detail::set_decode_hook(Executor &executor, DecodeHook hook) {
  auto &core = executor.impl();
  auto lock = core->kv_lock();
  std::lock_guard guard(core->mu);
  core->decode_hook = std::move(hook);
}

}  // namespace weft
