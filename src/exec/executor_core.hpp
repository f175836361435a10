// ExecutorCore: the executor's layers, and the step that drives them.
//
// One step reads top-down (step.cpp):
//   reconcile   apply the KV work operations left (reconcile.cpp)
//   sample      tokens for generations whose logits are ready (update.cpp)
//   schedule    residency moves, the cost budget, the batch plan and the
//               pressure verdicts -> a StepPlan value (schedule.cpp)
//   run         decode the plan's images, then its token segments in
//               micro-batches, each committed as it completes (run.cpp)
//   update      sample, finish, events, callbacks (update.cpp)
//
// Locks. `gate.mu` is held by a step from start to end (StepGate). `mu`, the
// state lock, guards every Conv and the layers' bookkeeping; it is held
// briefly: never during llama_decode, sampling or a user callback.
// Order: gate.mu, mu, then the event queue's and the worker's own locks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "exec/attention_probe.hpp"
#include "exec/conv.hpp"
#include "exec/decoder.hpp"
#include "exec/draft_model.hpp"
#include "exec/embedder.hpp"
#include "exec/events.hpp"
#include "exec/media/media_state.hpp"
#include "exec/step_plan.hpp"
#include "exec/worker.hpp"
#include "kv/kv_manager.hpp"
#include "sched/cost_model.hpp"
#include "sched/scheduler.hpp"
#include "weft/executor.hpp"

struct llama_context;
struct llama_batch;

namespace weft::detail {

// Counters and the recent step times, for ExecutorStats (under mu).
struct StepStats {
  static constexpr std::size_t kWindow = 1024;
  std::uint64_t steps = 0, tokens_decoded = 0, tokens_sampled = 0, decode_failures = 0, deadline_stops = 0;
  std::uint64_t tokens_drafted = 0, drafts_accepted = 0, draft_model_tokens = 0;
  double draft_model_s = 0;
  std::uint64_t adapter_switches = 0;
  std::uint64_t image_batches = 0;
  double image_decode_s = 0;
  std::vector<float> step_ms, decode_ms;  // rings of kWindow
  std::size_t pos = 0;
  void record(double step_s, double decode_s);
};

// A generation to sample, outside the lock.
struct SampleJob {
  Conv *conv;
  std::shared_ptr<GenState> gen;
  std::shared_ptr<Sampler> sampler;
  std::uint64_t epoch;
  bool new_text = false;  // the generation's first token: its sampler's text starts afresh
  Token token = 0;
  std::optional<TokenLogprob> logprob;  // with GenerateParams::logprobs
  double seconds = 0;  // the sample took
  std::optional<Error> error;
  bool done = false;  // run-stage jobs: handed to finish_sample_locked, or released
  // A part with drafts (speculate.cpp): the draft tokens as planned (the
  // plan's), what the generation may still take, and the end of its text
  // (a stop string's window) when it has stop strings. Out: every token
  // sampled, in order (`token` is the last), with `logprob`s, how many
  // drafts were kept, and whether the generation ends at the last token.
  std::span<const Token> draft;
  std::uint32_t remaining = 0;
  std::string stop_tail;
  std::vector<Token> tokens;
  std::vector<TokenLogprob> logprobs;
  std::uint32_t accepted = 0;
  bool ended = false;
};

// Speculative decoding's plan (speculate.cpp): a draft position on offer,
// with the chance it is kept (rate^j for the j-th draft token) and whether
// it is offered whatever it costs (SpeculativeParams::adaptive false)...
struct DraftOffer {
  double value;
  bool forced;
  std::uint32_t cand;
};
// ...and a generating segment that may draft: its proposal in
// StepPlan::drafts and how much of it is taken.
struct DraftCandidate {
  std::uint32_t seg;
  std::uint32_t at;
  std::uint32_t n;
  std::uint32_t take = 0;
};

// The schedule stage's working buffers (schedule.cpp, groups.cpp,
// media.cpp): read by no other stage, kept only so a steady-state step does
// not allocate.
struct PlanningScratch {
  std::vector<PlanCandidate> candidates;
  std::vector<PlanEntry> entries;        // plan_batch's answer
  std::vector<Conv *> convs;             // each candidate's conversation, by PlanCandidate::index
  std::vector<Token> reuse_want;         // reuse_locked's
  std::vector<Conv *> media_wanting;     // whole images that could go this step
  std::vector<const AdapterConfig *> groups;
  std::vector<std::size_t> group_index;  // replan: each candidate's group
  std::vector<PlanCandidate> group_candidates;  // replan: those of the groups kept
  std::vector<DraftCandidate> draft_candidates;  // plan_drafts_locked's
  std::vector<std::pair<std::uint64_t, Conv *>> drafting;  // run_drafter_locked's: (last turn, conversation)
  std::vector<DraftOffer> draft_offers;
};

// The run stage's buffers (run.cpp, media.cpp, media_side.cpp).
struct RunBuffers {
  std::vector<Part> parts;
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // [begin, end) of `parts` still to decode
  // Logits copied out of llama.cpp with the lock released, then swapped into
  // their conversations under it (a game call never waits for the copy).
  // Swapping hands the old buffers back here: no allocation in steady state.
  std::vector<std::vector<float>> staging;
  // Generating conversations' samples, taken in the run stage straight from
  // llama.cpp's logits before the next decode overwrites them (no copy), and
  // finished as their part commits (update.cpp).
  std::vector<SampleJob> early;
  std::vector<const float *> rows;  // a part with drafts: its logits, a row a position
  std::vector<Token> spec_tokens;   // ...and the tokens it keeps
  // An embeddings batch's rows (media.cpp).
  struct MediaBatch {
    std::vector<float> embd;
    std::vector<std::int32_t> pos, n_seq_id, seq_id;
    std::vector<std::int32_t *> seq_ids;
    std::vector<std::int8_t> logits;
  } media_batch;
};

// Who is stepping, the decode it may abort, and the work that waits for a
// step boundary (step.cpp, reconcile.cpp, run.cpp).
struct StepGate {
  // Held by a step from start to end, and by an operation that applies its
  // KV work itself because no step is running (it only ever try_locks: a
  // game thread never waits for it; save() and the destructor do).
  std::mutex mu;
  std::atomic<std::thread::id> stepping{};
  std::atomic<std::uint64_t> ended{0};  // counts step() returns (the encoder's gate reads it)
  // An image queued while a step runs waits for that step to end, at most
  // kEncodeGate, so its encode does not take the cores from the step's
  // decodes (executor.cpp).
  static constexpr std::chrono::milliseconds kEncodeGate{25};
  void await_end() const;
  // Read by the abort callback on a ggml thread.
  std::atomic<std::int64_t> abort_deadline_ns{0};  // 0 = none
  std::atomic<bool> aborted{false};
  // Work that needs a step boundary (a save while a step runs): run, under
  // ExecutorCore::mu, by the next step at its start or by whoever next
  // settles with no step running. Each must not throw.
  std::vector<std::function<void()>> boundary_tasks;
};

// The adapter setting the context decodes under now (run.cpp switches it
// between a plan's groups), and whether any conversation ever set adapters
// (only then are groups looked for).
struct AdapterState {
  AdapterConfigPtr current;
  bool used = false;
};

// Buffers the stages reuse so that a steady-state step does not allocate.
// The plan itself goes from stage to stage as a value; spare_plan is the
// last one's buffers, taken by the next schedule.
struct StepScratch {
  StepPlan spare_plan;
  PlanningScratch planning;  // the schedule stage's own
  RunBuffers run;            // the run stage's own
  std::vector<SampleJob> sample_jobs;
  std::vector<std::uint64_t> parks_asked;  // reconcile's
};

// What a step hands to user code once it has let go of the state lock.
struct Outbox {
  std::vector<TokenCallback> callbacks;  // on_token calls (deliver_callbacks)
  // Ended generations with an on_finish to run (under mu): taken at the end
  // of a step (or by the destructor) and run by deliver_finished().
  std::vector<std::shared_ptr<GenState>> finished;
};

struct ExecutorCore : std::enable_shared_from_this<ExecutorCore> {
  ExecutorCore(Model model, const ExecutorParams &params);
  ~ExecutorCore();
  void free_context();

  Model model;
  ExecutorParams params;
  llama_context *ctx = nullptr;
  llama_batch *batch = nullptr;  // n_batch tokens, one seq id each
  std::uint32_t n_ctx = 0;
  std::int32_t n_vocab = 0;

  StepGate gate;
  mutable std::mutex mu;  // the state lock
  bool closed = false;    // the Executor object is gone

  // The layers.
  std::unique_ptr<KvManager> kv;     // the cache's one owner
  ConvTable convs;                   // the conversations
  CostModel cost;                    // what a decode costs
  std::unique_ptr<Decoder> decoder;  // llama_decode, or a test's
  EventQueue events;                 // polled events
  Worker worker;                     // the background stepper
  MediaState media;                  // images
  std::unique_ptr<Embedder> embedder;  // ExecutorParams::embedder; its queue has a lock of its own
  std::unique_ptr<DraftModel> drafter;  // ExecutorParams::draft_model; the stepper's alone
  AdapterState adapter_state;        // adapters
  StepStats stats;
  AttentionChoice attention;  // how flash_attn was resolved (stats)
  StepScratch scratch;
  Outbox outbox;

  // media.side_ctx, made on the first call (executor.cpp); null when it cannot be.
  llama_context *media_context();
  // What a decode's cost grows with: without flash attention every token
  // attends over the cells in use (the cost model's depth is then those);
  // with it, over its own position (then the mean position of the batch).
  bool depth_is_cells() const { return attention.type == LLAMA_FLASH_ATTN_TYPE_DISABLED; }

  // --- Conversations (conversation.cpp) ---
  Conv &get(std::uint64_t id);  // under mu; throws Errc::disposed
  // The one way a conversation is made: a new Conv in the table and the
  // user's handle to it.
  std::pair<Conv *, std::shared_ptr<ConvHandle>> create_locked();
  // Gives c (resident, no slot) a free slot now; without one, when spill is
  // off, no slot can come free for it: throws Errc::out_of_range.
  void claim_slot_locked(Conv &c, const char *what);
  void dispose_locked(Conv &c);
  std::shared_ptr<Sampler> sampler_of(Conv &c);
  void notify_work() { worker.notify(); }

  // --- History edits: effective at once, the cache follows (reconcile.cpp) ---
  void truncate_locked(Conv &c, std::uint32_t pos);  // history[pos..) goes
  void ensure_logits_locked(Conv &c);                // re-decode the last token for its logits
  void requeue_locked(Conv &c, std::uint32_t pos);   // history[pos..) goes back to the queue
  // After a failed decode: c's cache back to its history (KvManager::roll_back);
  // where that cannot be done exactly, the next reconcile queues it again.
  void roll_back_locked(Conv &c);
  // The same at a boundary (reconcile, restore): no planned decode to stale,
  // and c is being reconciled already. Returns whether anything moved.
  bool move_to_queue(Conv &c, std::uint32_t pos);
  void bump(Conv &c);                                // a planned decode no longer fits c
  // Applies the KV work now when no step runs (or on the stepping thread);
  // else the next step does, at its start. Under mu. Returns whether applied.
  bool settle_locked();
  // Whether this thread may do KV work now — on the stepping thread, or with
  // no worker and no step running (then `step` holds the step mutex).
  bool claim_boundary(std::unique_lock<std::mutex> &step);
  // Queues `task` (which must not throw) for the next boundary, running it
  // now when settle_locked can. Under mu; the caller then notify_work()s.
  void at_boundary_locked(std::function<void()> task);
  // Disposes conversation `id` if it is still there (the cache follows).
  void dispose_id_locked(std::uint64_t id);
  // Under mu and gate.mu (or on the stepping thread). With `lock` (mu's),
  // parks copy their data with it released.
  void reconcile_locked(std::unique_lock<std::mutex> *lock = nullptr);
  void reconcile_one(Conv &c);
  void fork_kv(Conv &child, std::uint64_t source);
  void run_boundary_tasks_locked();

  // --- Schedule (schedule.cpp) ---
  Conv *pick_victim_locked(const Conv *for_whom, bool idle_only);  // the one eviction policy
  // Moves of KV data. With `lock` (mu's, held by the stepper), the copy
  // itself runs with it released, so game calls never wait for it.
  bool park_locked(Conv &c, std::unique_lock<std::mutex> *lock = nullptr);
  bool restore_locked(Conv &c, std::unique_lock<std::mutex> *lock = nullptr);
  // Before planning. Returns whether someone still waits for a slot that
  // waiting longer will get it (it may then park a busy conversation).
  bool make_resident_locked(std::uint32_t token_budget, std::unique_lock<std::mutex> &lock);
  // PressurePolicy::fail refuses a prompt the free cells cannot take (with
  // what is queued already): throws Errc::out_of_range.
  void admit_locked(const Conv &c, std::size_t n_new) const;
  // c (a slot, the cache reconciled) takes what another sequence holds of
  // its input instead of decoding it (prefix reuse).
  void reuse_locked(Conv &c);
  // Whether a conversation already in this step's plan is decoding at least
  // a block of the input c continues with (c then waits for it).
  bool follows_locked(const Conv &c) const;
  std::uint32_t idle_cells_locked(const Conv *except) const;  // cells the eviction policy may park
  // This step's plan (plan.closed when the callback closed the executor).
  StepPlan schedule_locked(const StepBudget &budget, std::chrono::steady_clock::time_point t0, StepResult &result,
                           std::unique_lock<std::mutex> &lock);

  // --- Adapter groups (groups.cpp) ---
  // Seconds the extra adapter groups add (their calls and switches): of
  // every candidate of this step, or of those `in_plan`.
  double group_overhead_locked(double depth, const std::vector<PlanEntry> *in_plan = nullptr);
  // After plan_batch under a time budget with several adapter groups:
  // plans for the most urgent groups the budget serves best (groups.cpp).
  void replan_for_groups_locked(double left, double depth, std::uint32_t &token_budget, std::uint64_t wanted);
  // Orders `segments` by adapter group (stable within one).
  void group_segments(std::vector<Segment> &segments, bool urgent_first);
  // Switches the context to `cfg` unless it decodes under it already;
  // returns whether it switched.
  bool use_adapters(const AdapterConfigPtr &cfg);

  // --- Media (media.cpp) ---
  // c's queue starts with `m` (or is inside it): true when `m` is ready and
  // causal, so the token plan takes it in pieces like a prompt; else a
  // whole-image candidate when ready, an error on c when its encoding
  // failed, or nothing while it is encoding.
  bool media_candidate_locked(Conv &c, const MediaSpan &m);
  // Plans this step's whole images from media_wanting into `out`, taking
  // their tokens out of the budget and the free cells. With a time budget
  // (`time_left`, seconds), an image goes only when what its embeddings
  // batch costs (CostModel::media_batch_seconds, twice: llama.cpp
  // re-reserves its graph for the batch and again after it) fits, or once
  // overdue; the time it takes comes off time_left.
  void plan_media_locked(std::vector<MediaSegment> &out, std::uint32_t &token_budget, std::uint32_t &free_cells,
                         double *time_left);
  // After plan_batch under a time budget, when causal image rows are among
  // the candidates: shrinks the plan until its token batch and its
  // embeddings batch, predicted apart, fit `seconds` (schedule.cpp).
  // Returns what both are predicted to take then (StepPlan::image_step_need).
  double fit_image_rows_locked(double seconds, double depth, std::uint32_t &token_budget, std::uint32_t free_cells);
  double planned_depth_locked() const;  // mean position of the planned tokens
  // Decodes the plan's images in embeddings batches (mu released around
  // each llama_decode) and commits them.
  void run_media_locked(std::vector<MediaSegment> &segments, StepResult &result, std::unique_lock<std::mutex> &lock);

  // --- Embeddings (step.cpp) ---
  // Decodes queued texts in the embedder's context with mu released: within
  // what the step's budget leaves (tokens, and time from t0 less `reserve`
  // seconds), or, as their turn, the front text whatever it costs.
  void run_embeddings_locked(const StepBudget &budget, std::chrono::steady_clock::time_point t0, bool turn,
                             StepResult &result, std::unique_lock<std::mutex> &lock, double reserve = 0);

  // --- Run (run.cpp) ---
  // Decodes the plan's token segments (mu held on entry and exit, released
  // around each llama_decode), committing each micro-batch as it completes:
  // the next one continues from what it committed, in the cache and in the
  // queues. Returns whether the deadline stopped it.
  bool run_locked(std::vector<Segment> &segments, std::span<const Token> drafts, const StepBudget &budget,
                  StepResult &result, std::unique_lock<std::mutex> &lock);
  void fail_segment_locked(Segment &s, std::uint32_t n, int rc, StepResult &result);
  // Fails every live segment of parts[lo, hi) with Errc::backend: `why`.
  void fail_parts_locked(std::vector<Segment> &segments, std::size_t lo, std::size_t hi, const std::string &why,
                         StepResult &result);

  // --- Update (update.cpp) ---
  void commit_part(Segment &s, const Part &part, StepResult &result);
  // Samples every generation whose logits are ready; the sampling itself
  // runs with the lock released.
  void sample_phase(StepResult &result, std::unique_lock<std::mutex> &lock);
  void finish_sample_locked(SampleJob &job, StepResult &result);
  // One sampled token joins c's generation (g): counted, streamed, checked
  // for an end, posted; queued for the next decode when `queue_it` (a draft
  // token the job kept is in the cache already). Returns why the
  // generation ended, or running.
  FinishReason emit_token_locked(Conv &c, std::shared_ptr<GenState> gen, Token token,
                                 std::optional<TokenLogprob> logprob, bool queue_it, StepResult &result);

  // --- Speculative decoding (speculate.cpp) ---
  // After the plan: drafts for its generating segments, in what the
  // budgets and cells leave (`room`), never more than pays (adaptive).
  struct DraftRoom {
    std::uint32_t tokens = 0, cells = 0;  // left after the plan
    std::optional<double> seconds;        // the time budget's, less the sampling planned
    double depth = 0;                     // the cost model's depth for the step
  };
  void plan_drafts_locked(StepPlan &plan, const DraftRoom &room);
  // Drafter::model: after the run stage, the draft model drafts for every
  // generation whose token it sampled, with mu released, in what `seconds`
  // leaves; the next plan takes the proposals (speculate.cpp).
  void run_drafter_locked(std::optional<double> seconds, StepResult &result, std::unique_lock<std::mutex> &lock);
  // What the plan in scratch.planning leaves: of `token_budget` tokens, of
  // `free_cells`, and of `left` seconds (a time budget's, at `depth`) or a
  // deadline's.
  DraftRoom draft_room_locked(const StepBudget &budget, std::uint32_t token_budget, std::uint32_t free_cells,
                              std::optional<double> left, double depth) const;
  // Verifies a part's drafts on its logits rows (one per position), with the
  // lock released, as sample_job does one row.
  void sample_spec_job(SampleJob &job, std::span<const float *const> rows);
  // A claimed job of a part with drafts: what verifying them needs.
  void prepare_spec_job_locked(SampleJob &job, std::span<const Token> draft);
  // commit_part for a part with drafts: the kept tokens enter the history,
  // the rejected drafts' cells leave the cache.
  void commit_spec_part(Segment &s, const Part &part, StepResult &result);
  // One sample from `logits` (n_vocab floats), with the lock released; the
  // job's sampler is reserved for it (SamplerShare::sampling).
  void sample_job(SampleJob &job, const float *logits);
  // The run stage's samples (run.cpp, update.cpp). claim: c's part ends its
  // queue; when c is generating, reserves its sampler and returns the job's
  // index in RunBuffers::early (else -1); it is sampled right after the
  // decode, from llama.cpp's logits. finish: as the part commits. release:
  // the jobs whose part never committed, at the end of the run stage.
  std::int32_t claim_early_sample_locked(Conv &c, std::uint32_t n);
  void finish_early_locked(SampleJob &job, StepResult &result);
  void release_early_locked();
  // Ends a sampling job's hold on its conversation's sampler: forks taken
  // meanwhile get their copy now.
  void release_sampler_locked(Conv &c);
  // Ends c's running generation (if any); returns the text it still held back.
  // With publish = false, done() turns true only when deliver_callbacks() has
  // run the generation's last callback.
  std::string finish_generation_locked(Conv &c, FinishReason reason, std::optional<Error> error = {},
                                       bool publish = true);
  void post_error_locked(Conv &c, Error e);
  void deliver_callbacks();
  // Runs the on_finish of each of `ended` (taken from `finished`); no lock
  // held.
  static void deliver_finished(const std::vector<std::shared_ptr<GenState>> &ended);

  StepResult step(const StepBudget &budget);
};

// A token g sampled without drafts: checks it against g's shadow proposal
// (GenState::shadow) and learns the acceptance it would have had.
void follow_shadow(GenState &g, Token token);

// Throws Errc::invalid_argument for a StepBudget outside its documented
// ranges; shared by step() and start() so a worker never starts with a
// budget every step would refuse. Returns it normalised (max_tokens = 0
// becomes unset, i.e. n_batch).
StepBudget check_budget(StepBudget b, std::uint32_t n_batch);

// Nearest-rank percentile (q in [0, 1]) of v; 0 when empty. The one used by
// ExecutorStats and, through the same definition, by `weft bench`.
double percentile(std::vector<float> v, double q);

}  // namespace weft::detail
