// The C ABI, part 2: executor, step budgets, the worker, events.
#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <vector>

#include "capi/c_api_internal.hpp"

namespace weft::capi {
namespace {

static_assert(WEFT_KV_F16 == static_cast<int>(KvType::f16) && WEFT_KV_Q8_0 == static_cast<int>(KvType::q8_0));
static_assert(WEFT_KV_IQ4_NL == static_cast<int>(KvType::iq4_nl));
static_assert(WEFT_FLASH_ATTN_DISABLED == static_cast<int>(FlashAttention::disabled));
static_assert(WEFT_ATTENTION_ENVIRONMENT == static_cast<int>(weft::AttentionSource::environment));
static_assert(WEFT_ATTENTION_MEASURED == static_cast<int>(weft::AttentionSource::measured));
static_assert(WEFT_PRESSURE_CALLBACK == static_cast<int>(PressurePolicy::callback));
static_assert(WEFT_EVENT_ERROR == static_cast<int>(EventKind::error));
static_assert(WEFT_EVENT_TOOL_CALL == static_cast<int>(EventKind::tool_call));
static_assert(WEFT_IMAGE_ENCODING_CALLER == static_cast<int>(ImageEncoding::caller));

// Sizes of every released weft_executor_params: the fields after a smaller
// one keep their defaults.
const std::initializer_list<std::size_t> kExecutorParamsSizes = {offsetof(weft_executor_params, prefix_cache_cells),
                                                                  offsetof(weft_executor_params, projector),
                                                                  offsetof(weft_executor_params, image_encoding),
                                                                  offsetof(weft_executor_params, tuning_cache_dir),
                                                                  offsetof(weft_executor_params, embedder),
                                                                  offsetof(weft_executor_params, speculative),
                                                                  offsetof(weft_executor_params, draft_model),
                                                                  sizeof(weft_executor_params)};

weft_executor_params executor_defaults() {
  const ExecutorParams d;
  weft_executor_params p{};
  p.struct_size = sizeof p;
  p.on_pressure = nullptr;
  p.pressure_user_data = nullptr;
  p.pressure_user_data_free = nullptr;
  p.spill_disk_dir = nullptr;
  p.spill_ram_bytes = d.spill.ram_bytes;
  p.spill_disk_bytes = d.spill.disk_bytes;
  p.events_capacity = d.events_capacity;
  p.n_ctx = d.n_ctx;
  p.n_batch = d.n_batch;
  p.n_ubatch = d.n_ubatch;
  p.n_seq_max = d.n_seq_max;
  p.n_threads = d.n_threads;
  p.kv_type = static_cast<int32_t>(d.kv_type);
  p.flash_attn = static_cast<int32_t>(d.flash_attn);
  p.pressure = static_cast<int32_t>(d.pressure);
  p.max_prompt_chunk = d.max_prompt_chunk;
  p.events = d.events ? 1 : 0;
  p.spill_recompute = d.spill.recompute ? 1 : 0;
  p.prefix_cache_cells = -1;
  p.projector = nullptr;
  p.image_encoding = static_cast<int32_t>(d.image_encoding);
  p.tuning_cache_dir = nullptr;
  embedder_defaults(p);
  p.speculative = nullptr;
  p.draft_model = nullptr;
  return p;
}

weft_step_budget budget_defaults() {
  weft_step_budget b{};
  b.struct_size = sizeof b;
  b.max_time_us = 0;
  b.deadline_us = 0;
  b.max_tokens = 0;
  return b;
}

// Before the embedding counts were appended, before the draft counts, before
// the draft model's seconds, and now.
const std::initializer_list<std::size_t> kStepResultSizes = {offsetof(weft_step_result, tokens_embedded),
                                                             offsetof(weft_step_result, tokens_drafted),
                                                             offsetof(weft_step_result, draft_seconds),
                                                             sizeof(weft_step_result)};

// Before `on_step` and its user data were appended, and now.
const std::initializer_list<std::size_t> kWorkerParamsSizes = {offsetof(weft_worker_params, on_step),
                                                               sizeof(weft_worker_params)};

weft_step_result step_result_to_c(const weft::StepResult &r) {
  weft_step_result c{};
  c.struct_size = sizeof c;
  c.seconds = r.seconds;
  c.decode_seconds = r.decode_seconds;
  c.tokens_decoded = r.tokens_decoded;
  c.conversations = r.conversations;
  c.tokens_sampled = r.tokens_sampled;
  c.decode_calls = r.decode_calls;
  c.failed = r.failed;
  c.blocked = r.blocked;
  c.idle = r.idle ? 1 : 0;
  c.deadline_hit = r.deadline_hit ? 1 : 0;
  c.tokens_embedded = r.tokens_embedded;
  c.texts_embedded = r.texts_embedded;
  c.tokens_drafted = r.tokens_drafted;
  c.drafts_accepted = r.drafts_accepted;
  c.draft_seconds = r.draft_seconds;
  return c;
}

weft_worker_params worker_defaults() {
  weft_worker_params w{};
  w.struct_size = sizeof w;
  w.budget = nullptr;
  w.idle_wait_ms = static_cast<uint32_t>(WorkerParams{}.idle_wait.count());
  w.on_step = nullptr;
  w.user_data = nullptr;
  w.user_data_free = nullptr;
  return w;
}

int32_t enum_field(int32_t value, int32_t last, const char *field, const char *type) {
  if (value < 0 || value > last) {
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("{} = {} is not a {} (0..{})", field, value, type, last));
  }
  return value;
}

// A C budget as a C++ one; a relative deadline starts now.
StepBudget to_budget(const weft_step_budget *in, bool for_worker) {
  weft_step_budget b = budget_defaults();
  if (in != nullptr) read_struct(in, "weft_step_budget", b, {sizeof(weft_step_budget)});
  StepBudget out;
  if (b.max_tokens > 0) out.max_tokens = b.max_tokens;
  if (b.max_time_us < 0) {
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("weft_step_budget.max_time_us = {} must be >= 0", b.max_time_us));
  }
  if (b.max_time_us > 0) out.max_time = std::chrono::microseconds(b.max_time_us);
  if (b.deadline_us < 0) {
    fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("weft_step_budget.deadline_us = {} must be >= 0", b.deadline_us));
  }
  if (b.deadline_us > 0) {
    if (for_worker) {
      fail(WEFT_ERR_INVALID_ARGUMENT,
           fmt::format("weft_step_budget.deadline_us = {}: the worker's steps take no deadline (use max_time_us)",
                       b.deadline_us));
    }
    out.deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(b.deadline_us);
  }
  return out;
}

// Events taken by one poll, with their strings.
struct EventList {
  std::vector<Event> events;
};

}  // namespace
}  // namespace weft::capi

using namespace weft::capi;

extern "C" {

weft_status weft_executor_params_init(weft_executor_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_executor_params", executor_defaults(), kExecutorParamsSizes);
  });
}

weft_status weft_executor_create(const weft_model *model, const weft_executor_params *params, weft_executor **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto m = get<weft::Model>(model, Kind::model);
    weft_executor_params p = executor_defaults();
    if (params != nullptr) read_struct(params, "weft_executor_params", p, kExecutorParamsSizes);
    weft::ExecutorParams ep;
    ep.n_ctx = p.n_ctx;
    ep.n_batch = p.n_batch;
    ep.n_ubatch = p.n_ubatch;
    ep.n_seq_max = p.n_seq_max;
    ep.n_threads = p.n_threads;
    ep.kv_type = static_cast<weft::KvType>(enum_field(p.kv_type, WEFT_KV_IQ4_NL, "weft_executor_params.kv_type", "weft_kv_type"));
    ep.flash_attn = static_cast<weft::FlashAttention>(
        enum_field(p.flash_attn, WEFT_FLASH_ATTN_DISABLED, "weft_executor_params.flash_attn", "weft_flash_attn"));
    ep.pressure = static_cast<weft::PressurePolicy>(
        enum_field(p.pressure, WEFT_PRESSURE_CALLBACK, "weft_executor_params.pressure", "weft_pressure_policy"));
    ep.max_prompt_chunk = p.max_prompt_chunk;
    ep.events = p.events != 0;
    ep.events_capacity = p.events_capacity;
    ep.spill.ram_bytes = p.spill_ram_bytes;
    ep.spill.disk_dir = std::string(cstr_arg(p.spill_disk_dir, "weft_executor_params.spill_disk_dir", true));
    ep.spill.disk_bytes = p.spill_disk_bytes;
    ep.spill.recompute = p.spill_recompute != 0;
    if (p.prefix_cache_cells < -1 || p.prefix_cache_cells > UINT32_MAX) {
      fail(WEFT_ERR_INVALID_ARGUMENT, fmt::format("weft_executor_params.prefix_cache_cells = {} is outside [-1, n_ctx]",
                                                  p.prefix_cache_cells));
    }
    if (p.prefix_cache_cells >= 0) ep.prefix_cache_cells = static_cast<std::uint32_t>(p.prefix_cache_cells);
    if (p.projector != nullptr) ep.projector = *get<weft::Projector>(p.projector, Kind::projector);
    if (p.tuning_cache_dir != nullptr) {
      ep.tuning_cache_dir = std::string(cstr_arg(p.tuning_cache_dir, "weft_executor_params.tuning_cache_dir", true));
    }
    ep.image_encoding = static_cast<weft::ImageEncoding>(enum_field(
        p.image_encoding, WEFT_IMAGE_ENCODING_CALLER, "weft_executor_params.image_encoding", "weft_image_encoding"));
    embedder_from_c(p, ep);
    if (p.speculative != nullptr) ep.speculative = speculative_from_c(p.speculative, "weft_executor_params.speculative");
    if (p.draft_model != nullptr) ep.draft_model = draft_model_from_c(p.draft_model, "weft_executor_params.draft_model");
    std::shared_ptr<UserData> ud;
    if (p.on_pressure != nullptr) {
      ud = std::make_shared<UserData>(p.pressure_user_data, p.pressure_user_data_free);
      ep.on_pressure = [cb = p.on_pressure, ud](const weft::PressureInfo &info) {
        // A borrowed handle, live for the callback only.
        auto *conv = make_handle<weft_conversation>(Kind::conversation,
                                                    std::make_shared<weft::Conversation>(info.conversation));
        cb(conv, info.needed_cells, info.free_cells, ud->data());
        remove_handle_quietly(conv, Kind::conversation);
      };
    }
    auto ex = std::make_shared<weft::Executor>(*m, ep);
    *out = make_handle<weft_executor>(Kind::executor, std::move(ex));
    if (ud) ud->arm();
  });
}

weft_status weft_executor_free(weft_executor *executor) { return free_handle(__func__, executor, Kind::executor); }

weft_status weft_step_budget_init(weft_step_budget *budget, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(budget, struct_size, "weft_step_budget", budget_defaults(), {sizeof(weft_step_budget)});
  });
}

weft_status weft_executor_step(weft_executor *executor, const weft_step_budget *budget, weft_step_result *out) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    // Checked before stepping, so a bad result struct does not lose a step's report.
    if (out != nullptr) check_struct_size("weft_step_result", out->struct_size, kStepResultSizes);
    const weft::StepResult r = ex->step(to_budget(budget, false));
    if (out == nullptr) return;
    write_struct(out, "weft_step_result", step_result_to_c(r), kStepResultSizes);
  });
}

weft_status weft_executor_get_stats(const weft_executor *executor, weft_executor_stats *out) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    const weft::ExecutorStats s = ex->stats();
    weft_executor_stats c{};
    c.queued_tokens = s.queued_tokens;
    c.steps = s.steps;
    c.tokens_decoded = s.tokens_decoded;
    c.tokens_sampled = s.tokens_sampled;
    c.decode_failures = s.decode_failures;
    c.deadline_stops = s.deadline_stops;
    c.events_dropped = s.events_dropped;
    c.cost_model_samples = s.cost_model_samples;
    c.ram_bytes = s.ram_bytes;
    c.disk_bytes = s.disk_bytes;
    c.parks = s.parks;
    c.restores = s.restores;
    c.recomputes = s.recomputes;
    c.park_ms = s.park_ms;
    c.restore_ms = s.restore_ms;
    c.resident = s.resident;
    c.parked_ram = s.parked_ram;
    c.parked_disk = s.parked_disk;
    c.parked_recompute = s.parked_recompute;
    c.step_ms_p50 = s.step_ms_p50;
    c.step_ms_p99 = s.step_ms_p99;
    c.decode_ms_p50 = s.decode_ms_p50;
    c.predicted_ms_per_token = s.predicted_ms_per_token;
    c.n_ctx = s.n_ctx;
    c.cells_used = s.cells_used;
    c.cells_free = s.cells_free;
    c.n_seq_max = s.n_seq_max;
    c.slots_used = s.slots_used;
    c.conversations = s.conversations;
    c.generating = s.generating;
    c.worker_running = s.worker_running ? 1 : 0;
    c.prefix_tokens_reused = s.prefix_tokens_reused;
    c.prefix_hits = s.prefix_hits;
    c.prefix_cache_hits = s.prefix_cache_hits;
    c.prefix_misses = s.prefix_misses;
    c.prefix_evictions = s.prefix_evictions;
    c.cells_saved = s.cells_saved;
    c.prefix_cache_cells = s.prefix_cache_cells;
    c.pinned_prefixes = s.pinned_prefixes;
    c.adapter_switches = s.adapter_switches;
    c.adapter_switch_ms = s.adapter_switch_ms;
    c.images_encoded = s.images_encoded;
    c.image_encode_ms = s.image_encode_ms;
    c.image_batches = s.image_batches;
    c.image_decode_ms = s.image_decode_ms;
    c.images_pending = s.images_pending;
    c.flash_attn_probe_ms = s.flash_attn_probe_ms;
    c.plain_attn_probe_ms = s.plain_attn_probe_ms;
    c.flash_attn = static_cast<int32_t>(s.flash_attn);
    c.flash_attn_source = static_cast<int32_t>(s.flash_attn_source);
    c.attn_probe_seqs = s.attn_probe_seqs;
    c.attn_probe_depth = s.attn_probe_depth;
    c.redecodes = s.redecodes;
    c.redecode_tokens = s.redecode_tokens;
    c.texts_embedded = s.texts_embedded;
    c.embed_tokens = s.embed_tokens;
    c.embed_decodes = s.embed_decodes;
    c.embed_ms = s.embed_ms;
    c.embed_pending = s.embed_pending;
    c.tokens_drafted = s.tokens_drafted;
    c.drafts_accepted = s.drafts_accepted;
    c.draft_model_tokens = s.draft_model_tokens;
    c.draft_model_seconds = s.draft_model_seconds;
    write_struct(out, "weft_executor_stats", c,
                 {sizeof(weft_executor_stats), offsetof(weft_executor_stats, draft_model_tokens),
                  offsetof(weft_executor_stats, tokens_drafted),
                  offsetof(weft_executor_stats, texts_embedded),
                  offsetof(weft_executor_stats, redecodes),
                  offsetof(weft_executor_stats, flash_attn_probe_ms),
                  offsetof(weft_executor_stats, images_pending),
                  offsetof(weft_executor_stats, images_encoded),
                  offsetof(weft_executor_stats, adapter_switches),
                  offsetof(weft_executor_stats, prefix_tokens_reused)});
  });
}

weft_status weft_executor_pin_prefix(weft_executor *executor, const int32_t *tokens, size_t n_tokens) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    if (tokens == nullptr && n_tokens > 0) fail(WEFT_ERR_INVALID_ARGUMENT, "tokens is NULL");
    ex->pin_prefix(std::span<const weft::Token>(tokens, n_tokens));
  });
}

weft_status weft_executor_unpin_prefix(weft_executor *executor, const int32_t *tokens, size_t n_tokens,
                                       weft_bool *out_was_pinned) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    if (tokens == nullptr && n_tokens > 0) fail(WEFT_ERR_INVALID_ARGUMENT, "tokens is NULL");
    const bool was = ex->unpin_prefix(std::span<const weft::Token>(tokens, n_tokens));
    if (out_was_pinned != nullptr) *out_was_pinned = was ? 1 : 0;
  });
}

weft_status weft_executor_cells_free(const weft_executor *executor, uint32_t *out) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    need(out, "out");
    *out = ex->cells_free();
  });
}

weft_status weft_executor_n_ctx(const weft_executor *executor, uint32_t *out) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    need(out, "out");
    *out = ex->n_ctx();
  });
}

// --- Worker --------------------------------------------------------------------

weft_status weft_worker_params_init(weft_worker_params *params, size_t struct_size) {
  return guarded(__func__, [&] {
    init_struct(params, struct_size, "weft_worker_params", worker_defaults(), kWorkerParamsSizes);
  });
}

weft_status weft_executor_start(weft_executor *executor, const weft_worker_params *params) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    weft_worker_params p = worker_defaults();
    if (params != nullptr) read_struct(params, "weft_worker_params", p, kWorkerParamsSizes);
    weft::WorkerParams wp;
    if (p.budget != nullptr) wp.budget = to_budget(p.budget, true);
    wp.idle_wait = std::chrono::milliseconds(p.idle_wait_ms);
    std::shared_ptr<UserData> ud;
    if (p.on_step != nullptr) {
      ud = std::make_shared<UserData>(p.user_data, p.user_data_free);
      wp.on_step = [cb = p.on_step, ud](const weft::StepResult &r) {
        const weft_step_result c = step_result_to_c(r);
        cb(&c, ud->data());
      };
    }
    ex->start(wp);
    if (ud) ud->arm();
  });
}

weft_status weft_executor_stop(weft_executor *executor) {
  return guarded(__func__, [&] { get<weft::Executor>(executor, Kind::executor)->stop(); });
}

weft_status weft_executor_is_running(const weft_executor *executor, weft_bool *out) {
  return guarded(__func__, [&] {
    auto ex = get<weft::Executor>(executor, Kind::executor);
    need(out, "out");
    *out = ex->running() ? 1 : 0;
  });
}

// --- Events ----------------------------------------------------------------------

weft_status weft_executor_poll_events(weft_executor *executor, size_t max, weft_event_list **out) {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = nullptr;
    auto ex = get<weft::Executor>(executor, Kind::executor);
    auto list = std::make_shared<EventList>();
    list->events = ex->poll_events(max == 0 ? SIZE_MAX : max);
    *out = make_handle<weft_event_list>(Kind::event_list, std::move(list));
  });
}

weft_status weft_event_list_count(const weft_event_list *list, size_t *out) {
  return guarded(__func__, [&] {
    auto l = get<EventList>(list, Kind::event_list);
    need(out, "out");
    *out = l->events.size();
  });
}

weft_status weft_event_list_get(const weft_event_list *list, size_t index, weft_event *out) {
  return guarded(__func__, [&] {
    auto l = get<EventList>(list, Kind::event_list);
    if (index >= l->events.size()) {
      fail(WEFT_ERR_OUT_OF_RANGE, fmt::format("index {} is past the list's {} events", index, l->events.size()));
    }
    // The strings point into the list's own events, which live as long as it.
    const weft::Event &e = l->events[index];
    weft_event c{};
    c.conversation = e.conversation;
    const bool call = e.kind == weft::EventKind::tool_call && e.tool_call;
    c.text = call ? e.tool_call->arguments.c_str() : e.text.c_str();
    c.text_len = call ? e.tool_call->arguments.size() : e.text.size();
    c.tool_name = call ? e.tool_call->name.c_str() : "";
    c.error_message = e.error ? e.error->what() : "";
    c.kind = static_cast<int32_t>(e.kind);
    c.token = e.kind == weft::EventKind::token ? e.token : -1;
    c.reason = static_cast<int32_t>(e.reason);
    c.error_code = e.error ? from_errc(e.error->code()) : WEFT_OK;
    write_struct(out, "weft_event", c, {offsetof(weft_event, tool_name), sizeof(weft_event)});
  });
}

weft_status weft_event_list_free(weft_event_list *list) { return free_handle(__func__, list, Kind::event_list); }

}  // extern "C"
