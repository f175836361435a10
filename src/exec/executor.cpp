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
#include "exec/kv_type.hpp"

namespace weft {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

void validate(const Model &model, const ExecutorParams &p) {
  auto bad = [](const std::string &msg) { fail(Errc::invalid_argument, msg); };
  if (p.projector && p.projector.impl()->model.impl() != model.impl()) {
    bad("ExecutorParams.projector was loaded for another Model (load it with this executor's)");
  }
  // Images reach the cache as KV data made on a side context and copied in
  // (media.cpp): cells a window or a recurrent state cannot take exactly.
  if (p.projector && model.memory() != Model::Memory::plain) {
    bad(fmt::format("ExecutorParams.projector: images need a model with plain attention; this model's memory is {} "
                    "(docs/EXECUTOR.md, \"Model families\")",
                    memory_name(model.memory())));
  }
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
  if (static_cast<int>(p.kv_type) < 0 || static_cast<int>(p.kv_type) > static_cast<int>(KvType::iq4_nl)) {
    bad(fmt::format("ExecutorParams.kv_type = {} is not a KvType (0..8)", static_cast<int>(p.kv_type)));
  }
  if (kv_quantised(p.kv_type)) {
    if (p.flash_attn == FlashAttention::disabled) {
      bad(fmt::format("ExecutorParams.kv_type = {} needs flash attention (flash_attn = disabled)",
                      kv_type_name(p.kv_type)));
    }
    const int block = static_cast<int>(ggml_blck_size(to_ggml(p.kv_type)));
    if (const int width = head_width(model.impl()->model); width % block != 0) {
      bad(fmt::format("ExecutorParams.kv_type = {} stores heads in blocks of {}; this model's heads are {} wide",
                      kv_type_name(p.kv_type), block, width));
    }
  }
  if (p.events && p.events_capacity == 0) bad("ExecutorParams.events_capacity = 0 must be >= 1");
  if (p.prefix_cache_cells && *p.prefix_cache_cells > p.n_ctx) {
    bad(fmt::format("ExecutorParams.prefix_cache_cells = {} exceeds n_ctx = {}", *p.prefix_cache_cells, p.n_ctx));
  }
  if (p.pressure == PressurePolicy::callback && !p.on_pressure) {
    bad("ExecutorParams.pressure = callback without on_pressure");
  }
  if (p.image_encoding != ImageEncoding::thread && p.image_encoding != ImageEncoding::caller) {
    bad(fmt::format("ExecutorParams.image_encoding = {} is not an ImageEncoding (0..1)",
                    static_cast<int>(p.image_encoding)));
  }
}

// Called by ggml after each graph node, on its first thread.
bool abort_callback(void *data) {
  auto *core = static_cast<ExecutorCore *>(data);
  const std::int64_t deadline = core->gate.abort_deadline_ns.load(std::memory_order_relaxed);
  bool stop = deadline != 0 && std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    Clock::now().time_since_epoch()).count() >= deadline;
  if (!stop && core->decoder) stop = core->decoder->abort_now();
  if (stop) core->gate.aborted.store(true, std::memory_order_relaxed);
  return stop;
}

}  // namespace

double percentile(std::vector<float> v, double q) {
  if (v.empty()) return 0;
  // Nearest rank: the smallest value with at least q of them at or below it.
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  const std::size_t k = std::min(v.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

void StepStats::record(double step_s, double decode_s) {
  const auto slot = pos++ % kWindow;
  if (step_ms.size() < kWindow) {
    step_ms.push_back(static_cast<float>(step_s * 1e3));
    decode_ms.push_back(static_cast<float>(decode_s * 1e3));
  } else {
    step_ms[slot] = static_cast<float>(step_s * 1e3);
    decode_ms[slot] = static_cast<float>(decode_s * 1e3);
  }
}

int LlamaDecoder::decode(llama_context *ctx, llama_batch &batch) { return llama_decode(ctx, batch); }

// Polled: the encoder thread's wait is at most StepGate::kEncodeGate and costs the
// step nothing (no lock, no notification on its path).
void StepGate::await_end() const {
  if (stepping.load() == std::thread::id{}) return;
  const std::uint64_t seen = ended.load();
  const auto until = std::chrono::steady_clock::now() + kEncodeGate;
  while (stepping.load() != std::thread::id{} && ended.load() == seen && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

ExecutorCore::ExecutorCore(Model m, const ExecutorParams &p)
    : model(std::move(m)),
      params(p),
      decoder(std::make_unique<LlamaDecoder>()),
      events(p.events, p.events_capacity) {
  ensure_backend();
  validate(model, params);
  validate_speculative(params.speculative, "ExecutorParams.speculative");
  if (params.n_ubatch == 0) params.n_ubatch = params.n_batch;
  auto cp = llama_context_default_params();
  cp.n_ctx = params.n_ctx;
  cp.n_batch = params.n_batch;
  cp.n_ubatch = params.n_ubatch;
  // One sequence more than the slots, when llama.cpp allows it: the KV
  // manager's scratch (partial exports for compact snapshots).
  const bool spare_seq = params.n_seq_max < llama_max_parallel_sequences() && params.n_batch > params.n_seq_max;
  cp.n_seq_max = params.n_seq_max + (spare_seq ? 1 : 0);
  const int threads = params.n_threads > 0 ? params.n_threads
                                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.kv_unified = true;  // forks share cells; per-slot caches split the context
  // A sliding window's layers get as many cells as the others, so they can
  // keep cells the window has passed (rewinds and forks stay cheap) and the
  // ledger counts for both; llama.cpp may still reuse those (KvFamily).
  cp.swa_full = true;
  cp.type_k = to_ggml(params.kv_type);
  cp.type_v = to_ggml(params.kv_type);
  attention = choose_attention(model, params, threads);
  cp.flash_attn_type = attention.type;
  cp.no_perf = true;
  if (const std::string lost = model.impl()->failure(); !lost.empty()) {
    fail(Errc::backend, fmt::format("the model can no longer decode: {}", lost));
  }
  take_llama_error();
  ctx = llama_init_from_model(model.impl()->model, cp);
  if (const std::string lost = model.impl()->failure(); ctx != nullptr && !lost.empty()) {
    llama_free(ctx);
    fail(Errc::backend, fmt::format("creating a context: {}", lost));
  }
  if (ctx == nullptr) {
    fail(Errc::backend, fmt::format("llama.cpp could not create a context (n_ctx {}, n_batch {}, n_seq_max {}): {}",
                                    params.n_ctx, params.n_batch, params.n_seq_max, take_llama_error()));
  }
  llama_set_abort_callback(ctx, &abort_callback, this);
  n_ctx = llama_n_ctx(ctx);
  n_vocab = model.n_vocab();
  kv = std::make_unique<KvManager>(
      ctx, params.n_seq_max,
      SpillConfig{.ram_bytes = p.spill.ram_bytes, .disk_dir = p.spill.disk_dir, .disk_bytes = p.spill.disk_bytes},
      p.spill.recompute, p.prefix_cache_cells.value_or(n_ctx / 4), spare_seq ? static_cast<int>(params.n_seq_max) : -1);
  // V is transposed without flash attention; where llama.cpp decides, the
  // first data copied out tells.
  if (attention.type != LLAMA_FLASH_ATTN_TYPE_AUTO) kv->set_v_transposed(attention.type == LLAMA_FLASH_ATTN_TYPE_DISABLED);
  if (!model.impl()->rpc.empty()) kv->set_failure_probe([impl = model.impl()] { return impl->failure(); });
  batch = new llama_batch(llama_batch_init(static_cast<int32_t>(params.n_batch), 0, 1));
  if (params.projector) {
    media.projector = params.projector.impl();
    media.encoder = std::make_shared<MediaEncoder>(media.projector, [this] { notify_work(); }, [this] { gate.await_end(); },
                                             params.image_encoding == ImageEncoding::thread);
    // Made now, not in the step of the first image (tens of milliseconds).
    if (media.projector->non_causal) media_context();
  }
  if (params.speculative.drafter == Drafter::model && !params.draft_model) {
    free_context();
    fail(Errc::invalid_argument, "ExecutorParams.speculative.drafter = model needs ExecutorParams::draft_model");
  }
  try {
    if (params.embedder) embedder = std::make_unique<Embedder>(model, *params.embedder, threads, attention.type);
    if (params.draft_model) drafter = std::make_unique<DraftModel>(model, *params.draft_model, threads, attention.type);
  } catch (...) {
    free_context();  // a throwing constructor runs no destructor: the context would leak
    throw;
  }
  stats.step_ms.reserve(StepStats::kWindow);
  stats.decode_ms.reserve(StepStats::kWindow);
  scratch.planning.candidates.reserve(params.n_seq_max * 4);
  scratch.planning.entries.reserve(params.n_seq_max * 4);
  scratch.planning.convs.reserve(params.n_seq_max * 4);
}

ExecutorCore::~ExecutorCore() { free_context(); }

llama_context *ExecutorCore::media_context() {
  if (media.side_tried) return media.side_ctx;
  media.side_tried = true;
  // The main context's cache types and attention kernel, so the KV data of
  // one loads in the other; one sequence, as long as a conversation may be.
  auto cp = llama_context_default_params();
  cp.n_ctx = std::min<std::uint32_t>(n_ctx, static_cast<std::uint32_t>(std::max(4096, model.n_ctx_train())));
  cp.n_batch = params.n_batch;
  cp.n_ubatch = params.n_batch;  // an image is decoded in one micro-batch
  cp.n_seq_max = MediaState::kSideSeqs;
  cp.kv_unified = true;  // the conversations of a batch share its cells
  cp.swa_full = true;    // as the main context: its data loads there
  cp.n_threads = llama_n_threads(ctx);
  cp.n_threads_batch = llama_n_threads_batch(ctx);
  cp.type_k = to_ggml(params.kv_type);
  cp.type_v = to_ggml(params.kv_type);
  cp.flash_attn_type = attention.type;
  cp.no_perf = true;
  take_llama_error();
  media.side_ctx = llama_init_from_model(model.impl()->model, cp);
  if (media.side_ctx == nullptr) {
    log_warning(fmt::format("no second context for non-causal images ({}): they flip the main one's attention",
                            take_llama_error()));
    return nullptr;
  }
  llama_set_causal_attn(media.side_ctx, false);
  return media.side_ctx;
}

void ExecutorCore::free_context() {
  kv.reset();
  if (batch != nullptr) {
    llama_batch_free(*batch);
    delete batch;
    batch = nullptr;
  }
  if (media.side_ctx != nullptr) llama_free(media.side_ctx);
  media.side_ctx = nullptr;
  embedder.reset();  // its queued texts end with Errc::disposed
  drafter.reset();
  if (ctx != nullptr) llama_free(ctx);
  ctx = nullptr;
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
  // The one place besides save() that waits for a running step: the context
  // goes away. (From a callback on the stepping thread, that step is ours.)
  std::unique_lock<std::mutex> step;
  if (core_->gate.stepping.load() != std::this_thread::get_id()) step = std::unique_lock(core_->gate.mu);
  std::vector<std::shared_ptr<detail::GenState>> ended;
  {
    std::lock_guard guard(core_->mu);
    // Handles may outlive us: end generations, free the context now, and
    // make every later operation on them throw Errc::disposed.
    for (auto &[id, c] : core_->convs.all) core_->finish_generation_locked(*c, FinishReason::cancelled);
    core_->convs.all.clear();
    core_->convs.dirty.clear();
    core_->convs.live = 0;
    core_->closed = true;
    // Joined: waits for at most the image being encoded (its thread never
    // takes the state lock).
    core_->media.encoder.reset();
    core_->run_boundary_tasks_locked();  // a pending save learns it is disposed
    core_->free_context();
    ended.swap(core_->outbox.finished);
  }
  detail::ExecutorCore::deliver_finished(ended);
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

std::uint32_t Executor::n_ctx() const { return detail::live_core(core_).n_ctx; }

std::uint32_t Executor::cells_free() const {
  auto &core = detail::live_core(core_);
  std::lock_guard lock(core.mu);
  return core.kv->cells_free();
}

const Model &Executor::model() const { return detail::live_core(core_).model; }
const ExecutorParams &Executor::params() const { return detail::live_core(core_).params; }

void Executor::start(const WorkerParams &params) {
  auto &c = detail::live_core(core_);
  if (params.idle_wait.count() <= 0) {
    detail::fail(Errc::invalid_argument,
                 fmt::format("WorkerParams.idle_wait = {} ms must be > 0", params.idle_wait.count()));
  }
  WorkerParams wp = params;
  wp.budget = detail::check_budget(params.budget, c.params.n_batch);
  if (params.budget.deadline) {
    detail::fail(Errc::invalid_argument, "WorkerParams.budget.deadline: an absolute deadline cannot repeat; use max_time");
  }
  std::lock_guard lock(c.mu);
  if (c.closed) detail::fail(Errc::disposed, "the executor was destroyed");
  c.worker.start([&c, budget = wp.budget] { return c.step(budget); }, wp.idle_wait, std::move(wp.on_step));
}

void Executor::stop() {
  if (core_) core_->worker.stop();
}

bool Executor::running() const { return detail::live_core(core_).worker.running(); }

std::vector<Event> Executor::poll_events(std::size_t max) { return detail::live_core(core_).events.poll(max); }

EncodeResult Executor::encode_images(std::uint32_t max_images) {
  auto &c = detail::live_core(core_);
  std::shared_ptr<detail::MediaEncoder> encoder;
  {
    std::lock_guard lock(c.mu);
    if (c.closed) detail::fail(Errc::disposed, "the executor was destroyed");
    encoder = c.media.encoder;
  }
  if (!encoder) return {};
  const auto done = encoder->encode(max_images);  // no lock held: steps go on
  return {.images = static_cast<std::uint32_t>(done.encoded),
          .failed = static_cast<std::uint32_t>(done.failed),
          .pending = static_cast<std::uint32_t>(encoder->pending()),
          .seconds = done.seconds};
}

ExecutorStats Executor::stats() const {
  auto &c = detail::live_core(core_);
  std::lock_guard lock(c.mu);
  if (c.closed) detail::fail(Errc::disposed, "the executor was destroyed");
  const auto &kv = *c.kv;
  ExecutorStats s;
  s.n_ctx = c.n_ctx;
  s.cells_used = kv.cells_used();
  s.cells_free = kv.cells_free();
  s.n_seq_max = c.params.n_seq_max;
  s.slots_used = c.params.n_seq_max - kv.slots_free();
  s.conversations = c.convs.live - static_cast<std::uint32_t>(c.convs.pins.size());
  s.pinned_prefixes = static_cast<std::uint32_t>(c.convs.pins.size());
  s.prefix_tokens_reused = kv.counters().reused_tokens;
  s.prefix_hits = kv.counters().prefix_hits;
  s.prefix_cache_hits = kv.counters().prefix_cache_hits;
  s.prefix_misses = kv.counters().prefix_misses;
  s.prefix_evictions = kv.counters().prefix_evictions;
  s.adapter_switches = c.stats.adapter_switches;
  s.adapter_switch_ms = c.cost.switch_seconds() * 1e3;
  if (c.media.encoder) {
    const auto e = c.media.encoder->counters();
    s.images_encoded = e.encoded;
    s.image_encode_ms = e.seconds * 1e3;
    s.images_pending = static_cast<std::uint32_t>(c.media.encoder->pending());
  }
  s.image_batches = c.stats.image_batches;
  s.image_decode_ms = c.stats.image_decode_s * 1e3;
  if (c.embedder) {
    const auto e = c.embedder->counters();
    s.texts_embedded = e.texts;
    s.embed_tokens = e.tokens;
    s.embed_decodes = e.decodes;
    s.embed_ms = e.seconds * 1e3;
    s.embed_pending = static_cast<std::uint32_t>(c.embedder->pending());
  }
  s.prefix_cache_cells = kv.cache_cells();
  s.cells_saved = kv.cells_saved();

  s.steps = c.stats.steps;
  s.tokens_decoded = c.stats.tokens_decoded;
  s.tokens_sampled = c.stats.tokens_sampled;
  s.tokens_drafted = c.stats.tokens_drafted;
  s.drafts_accepted = c.stats.drafts_accepted;
  s.draft_model_tokens = c.stats.draft_model_tokens;
  s.draft_model_seconds = c.stats.draft_model_s;
  s.decode_failures = c.stats.decode_failures;
  s.deadline_stops = c.stats.deadline_stops;
  s.worker_errors = c.worker.errors();
  s.events_dropped = c.events.dropped();
  s.worker_running = c.worker.running();
  s.predicted_ms_per_token = c.cost.predict(1, 0) * 1e3;
  s.cost_model_samples = c.cost.samples();
  s.flash_attn = c.attention.reported;
  s.flash_attn_source = c.attention.source;
  s.flash_attn_probe_ms = c.attention.flash_ms;
  s.plain_attn_probe_ms = c.attention.plain_ms;
  s.attn_probe_seqs = c.attention.shape.seqs;
  s.attn_probe_depth = c.attention.shape.depth;
  for (auto &[id, conv] : c.convs.all) {
    if (conv->disposed || conv->turns.pinned) continue;
    s.generating += conv->gen ? 1u : 0u;
    s.queued_tokens += conv->n_queued();
    switch (conv->kv.where) {
      case Residency::resident: ++s.resident; break;
      case Residency::ram: ++s.parked_ram; break;
      case Residency::disk: ++s.parked_disk; break;
      case Residency::recompute: ++s.parked_recompute; break;
    }
  }
  s.ram_bytes = kv.store().counters().ram_bytes;
  s.disk_bytes = kv.store().counters().disk_bytes;
  s.parks = kv.counters().parks;
  s.restores = kv.counters().restores;
  s.recomputes = kv.counters().recomputes;
  s.redecodes = kv.counters().redecodes;
  s.redecode_tokens = kv.counters().redecode_tokens;
  s.park_ms = kv.counters().park_s * 1e3;
  s.restore_ms = kv.counters().restore_s * 1e3;
  s.step_ms_p50 = detail::percentile(c.stats.step_ms, 0.5);
  s.step_ms_p99 = detail::percentile(c.stats.step_ms, 0.99);
  s.decode_ms_p50 = detail::percentile(c.stats.decode_ms, 0.5);
  return s;
}

}  // namespace weft
