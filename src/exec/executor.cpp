// Executor: the llama_context, parameter checks, and the step loop.
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "exec/executor_core.hpp"
#include "core/internal.hpp"
#include "core/model_impl.hpp"

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
  if (p.events && p.events_capacity == 0) bad("ExecutorParams.events_capacity = 0 must be >= 1");
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

llama_flash_attn_type to_llama(FlashAttention f, const Model &model, KvType kv) {
  switch (f) {
    case FlashAttention::enabled: return LLAMA_FLASH_ATTN_TYPE_ENABLED;
    case FlashAttention::disabled: return LLAMA_FLASH_ATTN_TYPE_DISABLED;
    case FlashAttention::automatic: break;
  }
  // On the CPU, llama.cpp's flash-attention kernel grows with each token's
  // depth: a 48-token chunk at position 480 takes 72 ms on npc with it and 8
  // ms without (tiny 16 vs 1.1, small 2011 vs 389; docs/EXECUTOR.md). So
  // automatic means off unless layers run on a GPU, or the KV type needs it.
  if (model.impl()->on_gpu || kv == KvType::q8_0) return LLAMA_FLASH_ATTN_TYPE_AUTO;
  return LLAMA_FLASH_ATTN_TYPE_DISABLED;
}

// Called by ggml after each graph node, on its first thread.
bool abort_callback(void *data) {
  auto *core = static_cast<ExecutorCore *>(data);
  const std::int64_t deadline = core->abort_deadline_ns.load(std::memory_order_relaxed);
  bool stop = deadline != 0 && std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    Clock::now().time_since_epoch()).count() >= deadline;
  if (!stop && core->abort_hook) stop = core->abort_hook();
  if (stop) core->aborted.store(true, std::memory_order_relaxed);
  return stop;
}

double percentile(std::vector<float> v, double q) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

ExecutorCore::ExecutorCore(Model m, const ExecutorParams &p)
    : model(std::move(m)),
      params(p),
      ledger(0),
      store({.ram_bytes = p.spill.ram_bytes, .disk_dir = p.spill.disk_dir, .disk_bytes = p.spill.disk_bytes}) {
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
  cp.flash_attn_type = to_llama(params.flash_attn, model, params.kv_type);
  depth_is_cells = cp.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.no_perf = true;
  take_llama_error();
  ctx = llama_init_from_model(model.impl()->model, cp);
  if (ctx == nullptr) {
    fail(Errc::backend, fmt::format("llama.cpp could not create a context (n_ctx {}, n_batch {}, n_seq_max {}): {}",
                                    params.n_ctx, params.n_batch, params.n_seq_max, take_llama_error()));
  }
  llama_set_abort_callback(ctx, &abort_callback, this);
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
  if (c.seq < 0) {
    // Parked: the blob keeps its positions; restore trims to the history.
    c.history.resize(pos);
    c.has_logits = false;
    if (pos == 0) {
      c.parked.reset();
      c.where = Residency::resident;
    }
    return;
  }
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
  c.parked.reset();
  if (c.seq >= 0) {
    release_kv_from(c, 0);
    llama_memory_seq_rm(llama_get_memory(ctx), c.seq, -1, -1);
    free_seqs.push_back(c.seq);
  }
  convs.erase(c.id);
}

ExecutorCore &live_core(const std::shared_ptr<ExecutorCore> &core) {
  if (!core) fail(Errc::disposed, "the executor was moved from");
  return *core;
}

}  // namespace detail

Executor::Executor(Model model, const ExecutorParams &params)
    : core_(std::make_shared<detail::ExecutorCore>(std::move(model), params)) {}

Executor::~Executor() {
  if (!core_) return;
  stop();
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

StepResult Executor::step(const StepBudget &budget) { return detail::live_core(core_).step(budget); }

std::uint32_t Executor::cells_free() const {
  auto &core = detail::live_core(core_);
  std::lock_guard lock(core.mu);
  return core.ledger.free();
}

const Model &Executor::model() const { return detail::live_core(core_).model; }
const ExecutorParams &Executor::params() const { return detail::live_core(core_).params; }

ExecutorStats Executor::stats() const {
  auto &c = detail::live_core(core_);
  std::lock_guard lock(c.mu);
  ExecutorStats s;
  s.n_ctx = c.n_ctx;
  s.cells_used = c.ledger.used();
  s.cells_free = c.ledger.free();
  s.n_seq_max = c.params.n_seq_max;
  s.slots_used = c.params.n_seq_max - static_cast<std::uint32_t>(c.free_seqs.size());
  s.conversations = static_cast<std::uint32_t>(c.convs.size());

  s.steps = c.steps;
  s.tokens_decoded = c.tokens_decoded;
  s.tokens_sampled = c.tokens_sampled;
  s.decode_failures = c.decode_failures;
  s.deadline_stops = c.deadline_stops;
  {
    std::lock_guard events(c.events_mu);
    s.events_dropped = c.events_dropped;
  }
  s.worker_running = c.worker.joinable();
  s.predicted_ms_per_token = c.cost.predict(1, 0) * 1e3;
  s.cost_model_samples = c.cost.samples();
  for (auto &[id, conv] : c.convs) {
    s.generating += conv->gen ? 1u : 0u;
    s.queued_tokens += conv->n_queued();
    switch (conv->where) {
      case Residency::resident: ++s.resident; break;
      case Residency::ram: ++s.parked_ram; break;
      case Residency::disk: ++s.parked_disk; break;
      case Residency::recompute: ++s.parked_recompute; break;
    }
  }
  s.ram_bytes = c.store.counters().ram_bytes;
  s.disk_bytes = c.store.counters().disk_bytes;
  s.parks = c.parks;
  s.restores = c.restores;
  s.recomputes = c.recomputes;
  s.park_ms = c.park_s * 1e3;
  s.restore_ms = c.restore_s * 1e3;
  s.step_ms_p50 = detail::percentile(c.step_ms, 0.5);
  s.step_ms_p99 = detail::percentile(c.step_ms, 0.99);
  s.decode_ms_p50 = detail::percentile(c.decode_ms, 0.5);
  return s;
}

void detail::set_decode_hook(Executor &executor, DecodeHook hook) {
  auto &core = live_core(executor.impl());
  auto lock = core.kv_lock();
  std::lock_guard guard(core.mu);
  core.decode_hook = std::move(hook);
}

void detail::set_sample_hook(Executor &executor, SampleHook hook) {
  auto &core = live_core(executor.impl());
  auto lock = core.kv_lock();
  std::lock_guard guard(core.mu);
  core.sample_hook = std::move(hook);
}

void detail::set_abort_hook(Executor &executor, AbortHook hook) {
  auto &core = live_core(executor.impl());
  auto lock = core.kv_lock();
  std::lock_guard guard(core.mu);
  core.abort_hook = std::move(hook);
}

}  // namespace weft
