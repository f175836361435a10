// The shared internals behind Executor, Conversation and Generation.
//
// Locking: `step_mu` serialises steps and every operation that touches the
// KV cache (fork, rewind, remove, dispose); `mu` guards all conversation state
// and the ledger and is held only briefly — never during llama_decode and
// never while user callbacks run. Order: step_mu before mu. Operations called
// from a callback on the stepping thread skip step_mu (it is already held).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <deque>

#include "sched/cost_model.hpp"
#include "kv/kv_ledger.hpp"
#include "core/sampling.hpp"
#include "sched/scheduler.hpp"
#include "kv/spill_store.hpp"
#include "weft/executor.hpp"

struct llama_context;
struct llama_batch;

namespace weft::detail {

// Test hook: when set, called with each batch before llama_decode; a non-zero
// return is treated as llama_decode's return, without decoding.
using DecodeHook = std::function<int(const llama_batch &batch)>;
void set_decode_hook(Executor &executor, DecodeHook hook);
// Test hook: consulted by the abort callback during llama_decode; true
// aborts the micro-batch in flight (as a passed deadline would).
using AbortHook = std::function<bool()>;
void set_abort_hook(Executor &executor, AbortHook hook);
// Test hook: called on the stepping thread for each token sampled, with the
// state lock held (where the sampling itself runs).
using SampleHook = std::function<void()>;
void set_sample_hook(Executor &executor, SampleHook hook);

// Progress of one generation, shared with its Generation handles.
struct GenState {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  GenerationResult result;  // reason == running until finished
  FinishReason pending_reason = FinishReason::running;  // finished, last callback not yet run
  // Below: touched only under the executor's mu.
  GenerateParams params;
  std::optional<Sampler> own_sampler;  // when params.sampler was given
  std::optional<TextStream> stream;
  std::weak_ptr<struct ExecutorCore> core;
  std::uint64_t conv_id = 0;
};

struct Conv {
  std::uint64_t id = 0;
  int seq = -1;                       // llama.cpp sequence slot, -1 = none
  std::vector<Token> history;         // decoded: positions 0..n-1
  std::vector<std::uint32_t> cells;   // ledger id per history position
  std::vector<Token> queue;           // queued input, from queue_head on
  std::size_t queue_head = 0;
  std::vector<float> logits;          // of history.back() when has_logits
  bool has_logits = false;
  SamplerParams sampler_params;
  std::optional<Sampler> sampler;     // built on first use
  std::shared_ptr<GenState> gen;      // running generation
  bool gen_token_queued = false;      // queue holds exactly the sampled token
  int priority = 0;
  std::uint64_t last_served = 0;      // step it last got tokens decoded
  std::uint64_t ready_since = 0;      // step its queue last went from empty to not
  // Its place in the scheduler's turns: since it was served or got new input.
  std::uint64_t turn_since() const { return std::max(last_served, ready_since); }
  std::optional<Error> error;
  std::weak_ptr<struct ConvHandle> handle;  // the user's handles, if any left

  // Residency. Parked: no slot, no cells; the KV data of the first
  // `parked_n` positions is in `parked` (recompute: history moved to queue).
  Residency where = Residency::resident;
  std::shared_ptr<ParkedKv> parked;
  std::uint32_t parked_n = 0;
  bool prefetch = false;
  std::uint64_t pinned_step = 0;      // made resident in this step: not a victim
  std::uint64_t resident_since = 0;   // step it last became resident
  std::uint64_t waiting_since = 0;    // step it started waiting for residency (0 = not)

  std::uint32_t n_queued() const { return static_cast<std::uint32_t>(queue.size() - queue_head); }
  std::uint32_t n_decoded() const { return static_cast<std::uint32_t>(history.size()); }
};

// Work collected under `mu` and delivered after it is released.
struct TokenEvent {
  std::shared_ptr<GenState> gen;
  Token token;
  std::string text;
  bool finished;
};

struct ExecutorCore : std::enable_shared_from_this<ExecutorCore> {
  ExecutorCore(Model model, const ExecutorParams &params);
  ~ExecutorCore();
  void free_context();

  Model model;
  ExecutorParams params;
  llama_context *ctx = nullptr;
  std::uint32_t n_ctx = 0;
  std::int32_t n_vocab = 0;
  bool can_shift = false;

  std::mutex step_mu;
  std::atomic<std::thread::id> stepping{};
  mutable std::mutex mu;
  bool closed = false;  // the Executor object is gone

  KvLedger ledger;
  SpillStore store;
  std::uint64_t parks = 0, restores = 0, recomputes = 0;
  double park_s = 0, restore_s = 0;
  std::unordered_map<std::uint64_t, std::unique_ptr<Conv>> convs;
  std::vector<int> free_seqs;
  std::uint64_t next_id = 1;

  // Stats (under mu).
  std::uint64_t steps = 0, tokens_decoded = 0, tokens_sampled = 0, decode_failures = 0;
  std::vector<float> step_ms, decode_ms;  // rings of kStatWindow
  std::size_t stat_pos = 0;
  static constexpr std::size_t kStatWindow = 1024;

  // A conversation's share of the planned batch, decoded over one or more
  // llama_decode calls.
  struct Segment {
    Conv *conv;
    std::uint32_t n;          // planned tokens
    std::uint32_t done = 0;   // committed so far
    std::uint32_t sliced = 0; // handed to micro-batches so far
    bool failed = false;
    bool counted = false;     // counted in StepResult::conversations
  };
  // Part of one llama_decode call: `n` tokens of segment `seg`.
  struct Part {
    std::uint32_t seg;
    std::uint32_t n;
  };

  // Step scratch, reused so a steady-state step does not allocate.
  std::vector<Segment> segments;
  std::vector<Part> parts;
  std::vector<PlanCandidate> candidates;
  std::vector<PlanEntry> plan;
  std::vector<Conv *> plan_convs;
  std::vector<TokenEvent> events;
  std::vector<std::pair<std::size_t, std::size_t>> work_ranges;
  DecodeHook decode_hook;
  AbortHook abort_hook;
  SampleHook sample_hook;
  CostModel cost;
  // What a decode's cost grows with: without flash attention every token
  // attends over the cells in use (the cost model's depth is then those);
  // with it, over its own position (then the mean position of the batch).
  bool depth_is_cells = false;
  double sample_seconds = 0;  // running time of one sample (weight 0.2 for the newest)

  // Read by the abort callback on a ggml thread.
  std::atomic<std::int64_t> abort_deadline_ns{0};  // 0 = none
  std::atomic<bool> aborted{false};

  // Background worker.
  std::thread worker;
  bool worker_stop = false;   // under mu
  bool work_pending = false;  // under mu: something may have become runnable
  std::condition_variable work_cv;
  WorkerParams worker_params;

  // Event queue (params.events), under its own lock so poll_events() never
  // waits for a step's sampling phase (which holds `mu`). Order: mu, then
  // events_mu.
  mutable std::mutex events_mu;
  std::deque<Event> event_queue;    // under events_mu
  std::uint64_t events_dropped = 0;  // under events_mu
  std::uint64_t deadline_stops = 0;
  void post_event_locked(Event ev);
  void notify_work_locked() {
    work_pending = true;
    work_cv.notify_one();
  }
  void worker_loop();
  struct llama_batch *batch = nullptr;  // n_batch tokens, one seq id each

  // Guards for KV-cache operations: waits for the running step unless called
  // from the stepping thread.
  std::unique_lock<std::mutex> kv_lock();

  Conv &get(std::uint64_t id);  // under mu; throws Errc::disposed
  // Whether any spill tier exists, i.e. a slot can ever be freed by parking.
  bool spill_on() const {
    return params.spill.recompute || params.spill.ram_bytes > 0 || !params.spill.disk_dir.empty();
  }
  // Gives c (resident, no slot) a free slot now; without one, when spill is
  // off, no slot can come free for it: throws Errc::out_of_range.
  void claim_slot_locked(Conv &c, const char *what);
  void dispose_locked(Conv &c);
  // Ends c's running generation (if any); returns the text it still held back.
  // With publish = false, done() turns true only when deliver_events() has
  // run the generation's last callback.
  std::string finish_generation_locked(Conv &c, FinishReason reason, std::optional<Error> error = {},
                                       bool publish = true);
  Sampler &sampler_of(Conv &c);
  void release_kv_from(Conv &c, std::uint32_t pos);  // seq_rm + ledger, keeps the slot
  void ensure_logits_locked(Conv &c);

  // Residency (src/residency.cpp).
  bool park_locked(Conv &c);                 // false: no tier could take it
  void to_recompute_locked(Conv &c);         // drop KV, keep tokens
  bool restore_locked(Conv &c);              // needs a free slot and cells
  Conv *pick_victim_locked(const Conv &for_whom, bool idle_only);
  // Before planning. Returns whether someone still waits for a slot that
  // waiting longer will get it (it may then park a busy conversation).
  bool make_resident_locked(std::uint32_t token_budget);
  std::uint32_t idle_cells_locked(const Conv *except) const;  // parkable cells

  StepResult step(const StepBudget &budget);
  // Decodes the planned segments (mu held on entry and exit, released
  // around each llama_decode). Returns whether the deadline stopped it.
  bool decode_plan(const StepBudget &budget, StepResult &result, std::unique_lock<std::mutex> &lock);
  void commit_part(const Part &part, int last_row, StepResult &result);
  void sample_phase_locked(StepResult &result);
  void deliver_events();
};

// Throws Errc::invalid_argument for a StepBudget outside its documented
// ranges; shared by step() and start() so a worker never starts with a
// budget every step would refuse.
// Returns it normalised (max_tokens = 0 becomes unset, i.e. n_batch).
StepBudget check_budget(StepBudget b, std::uint32_t n_batch);

struct ConvHandle {
  std::shared_ptr<ExecutorCore> core;
  std::uint64_t id = 0;
  ~ConvHandle();
};

}  // namespace weft::detail
