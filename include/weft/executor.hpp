// weft/executor.hpp — many conversations on one llama.cpp context.
//
// An Executor owns one llama_context with a unified KV cache and n_seq_max
// sequence slots, the scheduler and the KV ledger. Conversations are created
// from it; step() runs one scheduling round: it samples for generating
// conversations, builds one batch within the budget (their next tokens first,
// then prompt chunks), decodes it, and hands out logits.
//
// Ownership: the Executor object is move-only. Conversations keep the shared
// internals alive; once the Executor object is destroyed their operations
// throw Errc::disposed and the llama_context is freed with the last handle.
// A moved-from Executor is empty: its destructor and stop() do nothing,
// assigning another Executor to it revives it, and every other member throws
// Errc::disposed ("the executor was moved from") — model() and params() too,
// since there is nothing left for their references to name.
// The Model is shared, read-only, by any number of executors.
//
// Thread-safety: any method may be called from any thread. step() calls are
// serialised: a second caller waits for the running step to finish, then runs
// its own. Nothing else waits for a running step — not for its decode, not
// for its sampling — except save_all() (and Conversation::save()), which read
// KV data at a step boundary, and stop() and the destructor, which end the
// worker's step. KV facts (cells_free(), residency) follow an operation at
// the stepper's next boundary (docs/EXECUTOR.md, "Threading").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weft/conversation.hpp"
#include "weft/embedding.hpp"
#include "weft/executor_stats.hpp"
#include "weft/export.hpp"
#include "weft/model.hpp"
#include "weft/projector.hpp"

namespace weft {

// KV cache element types: llama.cpp's at the pin (llama-server's
// --cache-type-k/v). The quantised ones (q8_0 .. iq4_nl) need flash
// attention and heads whose width is a multiple of 32.
enum class KvType { f16, f32, q8_0, bf16, q4_0, q4_1, q5_0, q5_1, iq4_nl };

// What happens when queued input cannot get KV cells now.
enum class PressurePolicy {
  wait,      // leave it queued; it goes on when cells free up (default). A
             // prompt that cannot finish in the free cells (plus what parking
             // idle conversations would free) waits whole, taking no cells,
             // so running generations keep the cells they need
  fail,      // refuse prompt() that cannot fit now; at step time, set the
             // conversation's error() and hold its input back
  callback,  // call ExecutorParams::on_pressure, then retry once, then wait
};

// Where conversations go when they outnumber the sequence slots or the KV
// cells: parked (their KV data copied out of the cache) and restored when
// they next need to decode, without the caller noticing.
struct SpillParams {
  // RAM for parked KV data. Default 1 GiB; 0 = no RAM tier.
  std::uint64_t ram_bytes = 1ull << 30;
  // A directory for parked KV data once RAM is full; empty (the default) =
  // no disk tier. weft makes a private subdirectory and removes it when the
  // executor goes away.
  std::string disk_dir;
  // Disk budget. Default 8 GiB.
  std::uint64_t disk_bytes = 8ull << 30;
  // Last resort when both tiers are full or fail: keep the tokens, drop the
  // KV data, re-decode on return. Default true; false = a conversation that
  // cannot be parked stays resident and others wait.
  bool recompute = true;
};

struct PressureInfo {
  Conversation conversation;    // the one that cannot proceed
  std::uint32_t needed_cells;   // what its next chunk needs
  std::uint32_t free_cells;     // what the cache has free
};

// Who runs the vision (or audio) encoder on queued images
// (ExecutorParams::image_encoding).
enum class ImageEncoding {
  // The executor's encoder thread, as soon as an image is queued; an image
  // queued while a step runs waits for that step's end (at most 25 ms) so
  // its encode does not take the step's cores (default).
  thread,
  // Whoever calls Executor::encode_images(), on their own thread, when they
  // choose: no encoder thread. For a game whose frames leave the cores no
  // idle time, so it places each encode (milliseconds of CPU per image)
  // itself. Until then an image's conversation waits behind it, everyone
  // else goes on.
  caller,
};

// The second model behind Drafter::model. The executor makes a llama.cpp
// context of it (n_ctx cells, n_seq_max sequences, the executor's threads and
// attention kernel), freed with the executor. Each drafting conversation
// keeps a sequence there holding its tokens (the last n_ctx / 2 when longer);
// after a step samples a conversation's next token, the same step catches
// its sequence up and drafts, greedily, every drafting conversation in one
// llama_decode per draft position, with what the step's time budget leaves.
// The next step verifies the drafts (SpeculativeParams). Conversations with
// an image in their history or an adapter setting draft nothing (the draft
// model sees neither).
struct DraftModelParams {
  // The draft model, loaded by the caller and shared read-only. Its
  // vocabulary must be the executor model's, token for token
  // (Errc::invalid_argument naming both sizes, or the first token that
  // differs), causal (not an embedding model or an encoder), and its memory
  // plain attention (a rejected draft is dropped from its cache):
  // Errc::invalid_argument otherwise.
  Model model;
  // Cells of the draft context, shared by the drafting conversations.
  // Default 4096. Must be in [64, the draft model's n_ctx_train * n_seq_max].
  std::uint32_t n_ctx = 4096;
  // Conversations whose tokens the draft context keeps at once. Default 16.
  // Must be in [1, 256]. More drafting conversations than this take turns
  // (the one that drafted longest ago first); a conversation's turn without
  // a sequence decodes its tokens again in the draft model.
  std::uint32_t n_seq_max = 16;
  // A conversation's draft ends before a token the draft model gives less
  // than this probability (llama-server's --draft-p-min). Default 0.5. Must
  // be in [0, 1]; 0 drafts max_draft tokens whatever the confidence.
  float p_min = 0.5f;
};

struct ExecutorParams {
  // KV cells shared by all conversations (the unified cache). Default 4096.
  // Must be in [16, model's n_ctx_train * n_seq_max]. llama.cpp rounds it up
  // to a multiple of 256; stats().n_ctx is the real size, and the limit one
  // conversation's history can reach.
  std::uint32_t n_ctx = 4096;
  // Most tokens per llama_decode call (and per step). Default 512. Must be
  // >= n_seq_max (llama.cpp's output buffer needs it) and <= n_ctx.
  std::uint32_t n_batch = 512;
  // Micro-batch size inside a decode; 0 = n_batch. Default 0. Must be <= n_batch.
  std::uint32_t n_ubatch = 0;
  // Sequence slots: conversations resident in the cache at once. Default 16.
  // Must be in [1, 256].
  std::uint32_t n_seq_max = 16;
  // CPU threads for decoding; 0 = all hardware threads. Default 0. They
  // spin between graph nodes (OpenMP's default): on cores shared with the
  // game's threads use fewer, or OMP_WAIT_POLICY=passive (docs/EXECUTOR.md).
  int n_threads = 0;
  // KV cache element type, for keys and values. Default f16. A quantised
  // type (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) with flash_attn = disabled,
  // or on a model whose heads are not a multiple of 32 wide, is
  // Errc::invalid_argument; one the backend cannot run is Errc::backend
  // when the executor is made.
  KvType kv_type = KvType::f16;
  // Flash attention. Default automatic: with layers on a GPU or a quantised
  // cache llama.cpp decides; on the CPU both kernels are timed on this
  // machine at this executor's shape (n_seq_max conversations, each as deep
  // as an equal share of min(n_ctx, 4096) cells allows, at most 256: one
  // generation step and one 32-token prompt chunk) and the faster is used.
  // Which wins depends on the CPU and the shape (docs/EXECUTOR.md,
  // "Flash attention"). WEFT_FLASH_ATTN=on|off in the environment
  // overrides automatic (not an explicit setting) without a rebuild; weft's
  // test presets set it off so that every logits comparison uses the kernel
  // it was validated with. The probe takes two scratch contexts and about
  // depth + 2x(one step + one chunk) of decoding per kernel, once per
  // model, machine, build and shape: its timings are kept in the process
  // and in tuning_cache_dir. ExecutorStats says what was chosen and why.
  FlashAttention flash_attn = FlashAttention::automatic;
  // Where flash_attn = automatic keeps its probe's timings
  // (attention-probe.txt; a failure to write it is logged, never fatal).
  // nullopt (default): weft::default_cache_dir() (weft/cache.hpp). "" = the
  // process only (every new process probes again). A game passes a folder
  // of its own (Unity: Application.persistentDataPath).
  std::optional<std::string> tuning_cache_dir;
  // Most prompt tokens one conversation gets in one step; 0 = no cap beyond
  // the budget. Default 0.
  std::uint32_t max_prompt_chunk = 0;
  // Parking tiers. Parking comes first; the pressure policy applies only to
  // what parking cannot solve.
  SpillParams spill;
  // See PressurePolicy. Default wait.
  PressurePolicy pressure = PressurePolicy::wait;
  // Called on the stepping thread under PressurePolicy::callback; may rewind,
  // shift, dispose or fork any conversation (applied at once). Must not throw
  // (a throw is treated as "nothing freed").
  std::function<void(const PressureInfo &)> on_pressure;
  // Post generation tokens, finished generations and conversation errors to
  // a queue read with Executor::poll_events(), for threads that must not be
  // called back (a game's main thread). Default false.
  bool events = false;
  // Most events kept unread; beyond it the oldest are dropped (counted in
  // ExecutorStats::events_dropped; results stay complete in each
  // Generation). Default 65536. Must be >= 1 when events is set.
  std::size_t events_capacity = 65536;
  // Prefix reuse (docs/EXECUTOR.md, "Prefix reuse"). Input that continues
  // tokens some sequence in the cache holds shares those KV cells instead of
  // decoding them again — across conversations that were never forked, and
  // from a prefix cache: the cells a conversation lets go of (dispose, park,
  // rewind) stay until real work needs their cells or slot (counted as free
  // by cells_free()). This bounds the cells the prefix cache keeps. nullopt
  // (default) = n_ctx / 4; 0 turns prefix reuse off altogether (no sharing,
  // no cache, as before it existed). Must be <= n_ctx. Without flash
  // attention, cached cells lengthen every decode's attention span.
  std::optional<std::uint32_t> prefix_cache_cells;
  // A vision projector loaded for this executor's model, for
  // Conversation::prompt_image(). Default empty: no images. With one (and
  // image_encoding thread), the executor owns an encoder thread (stopped
  // and joined by its destructor, which waits for at most the image being
  // encoded). Must be loaded for
  // the same Model (Errc::invalid_argument otherwise). A non-causal one
  // (gemma3's) also makes a second llama.cpp context of the model, with a KV
  // cache of min(n_ctx, max(4096, n_ctx_train)) cells in 8 sequences, where
  // its images are decoded so this context never flips its attention
  // (docs/EXECUTOR.md); it is freed with the executor.
  Projector projector;
  // Who encodes queued images (see ImageEncoding). Default thread. Ignored
  // without a projector.
  ImageEncoding image_encoding = ImageEncoding::thread;
  // Text embeddings (Executor::embed, weft/embedding.hpp). Default none:
  // embed() is Errc::invalid_argument. Set, the executor makes a second
  // llama.cpp context (n_ctx cells, n_seq_max sequences, embeddings on) over
  // the embedding model or its own, freed with the executor; its steps
  // decode queued texts beside the conversations (docs/EXECUTOR.md,
  // "Embeddings").
  std::optional<EmbedderParams> embedder;
  // Speculative decoding for generations that do not set
  // GenerateParams::speculative. Default: no drafter.
  SpeculativeParams speculative;
  // The draft model for Drafter::model. Default none: a generation asking
  // for Drafter::model is Errc::invalid_argument (a loaded state's drafts
  // nothing).
  std::optional<DraftModelParams> draft_model;
};

// What one Executor::encode_images() call did.
struct EncodeResult {
  std::uint32_t images = 0;   // images (and audio clips) it encoded, failed ones included
  std::uint32_t failed = 0;   // of which failed: each its conversation's error()
  std::uint32_t pending = 0;  // queued or being encoded (by others) when it returned
  double seconds = 0;         // its time in the encoder
};

struct StepBudget {
  // Most tokens to decode in this step; default (nullopt) or 0 = n_batch,
  // as 0 means in the C ABI and C#. Must be <= n_batch.
  std::optional<std::uint32_t> max_tokens;
  // Wall-clock target: the step decodes as many tokens as its cost model
  // (learned from the batches decoded so far) predicts fit, at least one
  // conversation's worth, never more than max_tokens. A soft target: use
  // `deadline` for a hard stop. Default none. Must be > 0.
  std::optional<std::chrono::microseconds> max_time;
  // Hard deadline: the step submits one micro-batch (n_ubatch tokens) per
  // llama_decode, stops between them once the deadline has passed, and
  // aborts a micro-batch in flight through llama_set_abort_callback — except
  // the step's first, which always completes so that every step makes
  // progress (a deadline already passed when the step starts decodes
  // nothing). Decoded work is kept; the rest stays queued. Default none.
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

struct StepResult {
  std::uint32_t tokens_decoded = 0;   // tokens that entered the KV cache
  std::uint32_t conversations = 0;    // conversations that advanced
  std::uint32_t tokens_sampled = 0;   // tokens sampled for generations
  std::uint32_t decode_calls = 0;     // llama_decode calls (more after a failure split)
  std::uint32_t failed = 0;           // conversations whose decode failed
  std::uint32_t blocked = 0;          // conversations waiting for KV cells or a slot
  double seconds = 0;                 // wall time of the step
  double decode_seconds = 0;          // of which in llama_decode
  // The step changed nothing (no token decoded or sampled, nobody parked or
  // restored), so the next step would not either: nothing is queued, or all
  // that is waits for the caller (`blocked`: freed cells, a dispose, a
  // cleared error). `while (!ex.step().idle) {}` ends.
  bool idle = false;
  bool deadline_hit = false;          // the hard deadline stopped the step early
  std::uint32_t tokens_embedded = 0;  // tokens decoded for Executor::embed (not in tokens_decoded)
  std::uint32_t texts_embedded = 0;   // texts whose vectors this step made
  std::uint32_t tokens_drafted = 0;   // draft tokens verified (in tokens_decoded)
  std::uint32_t drafts_accepted = 0;  // of those, kept (in tokens_sampled)
  double draft_seconds = 0;           // in the draft model's context (Drafter::model)
};

// Background stepping (Executor::start).
struct WorkerParams {
  // The budget of each step the worker runs (max_tokens 0 = n_batch, as in
  // step(); no deadline). Default: n_batch tokens.
  StepBudget budget;
  // Longest sleep while idle before looking again; new work (a prompt, a
  // generation, a cleared error, freed cells) wakes the worker at once.
  // Default 100 ms. Must be > 0.
  std::chrono::milliseconds idle_wait{100};
  // Called on the worker thread after every step it runs, with that step's
  // result (a step that found nothing to do included: StepResult::idle; a
  // step that threw, a weft bug counted in stats().worker_errors, as an
  // idle one), e.g. for a step time histogram. Default none. Must not throw
  // (a throw is ignored) nor call step(); it may call stop().
  std::function<void(const StepResult &result)> on_step;
};

enum class EventKind {
  token,     // a generation produced a token (text: what it released)
  finished,  // a generation ended (reason, error)
  error,     // a step set a conversation's error()
  tool_call, // a generation's tool call is complete (tool_call), just before its finished event
};

struct Event {
  EventKind kind = EventKind::token;
  std::uint64_t conversation = 0;  // Conversation::id()
  Generation generation;           // token, finished, tool_call: the generation
  Token token = -1;                // token
  std::string text;                // token
  FinishReason reason = FinishReason::running;  // finished
  std::optional<Error> error;      // error; finished with reason error
  std::optional<ToolCall> tool_call;  // tool_call: the parsed call (as GenerationResult::tool_call)
};


namespace detail {
struct ExecutorCore;
struct TestAccess;
}

class WEFT_API Executor {
 public:
  // Creates the llama_context. Throws Errc::invalid_argument for parameters
  // outside their documented ranges (naming the value and the limit) and
  // Errc::backend if llama.cpp cannot create the context (e.g. no memory).
  explicit Executor(Model model, const ExecutorParams &params = {});
  ~Executor();
  Executor(Executor &&) noexcept;
  Executor &operator=(Executor &&) noexcept;
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  // A new, empty conversation: nothing queued, nothing decoded, no slot yet.
  Conversation create();

  // One scheduling round. Throws Errc::invalid_argument for a bad budget;
  // decode failures do not throw: they reach the affected conversations.
  // Steps are serialised: a call made while another thread (or the worker)
  // steps waits for that step to end, then runs its own. Called from a
  // callback on the stepping thread (on_token, on_pressure), whose step is
  // still running, it throws Errc::invalid_argument instead of waiting for
  // itself. Liveness: every runnable conversation gets a token within
  // ceil(R / T) steps (R runnable, T tokens a step), plus the steps in which
  // a time budget goes to a whole image alone or to queued embeddings' turn
  // (never two in a row; docs/EXECUTOR.md).
  StepResult step(const StepBudget &budget = {});

  // Runs steps on an executor-owned thread until stop(): it sleeps while
  // there is nothing to do and wakes on new work. Callbacks then run on that
  // thread. Throws Errc::invalid_argument when already running or for bad
  // params. step() may still be called meanwhile (it takes turns).
  void start(const WorkerParams &params = {});
  // Stops the worker after the step it is running (if any) and joins it.
  // Nothing is lost: queued input stays queued, generations stay running,
  // ready for step() or start(). Idempotent. Called by the destructor.
  void stop();
  bool running() const;

  // Takes up to `max` events, oldest first (ExecutorParams::events). Never
  // waits for a decode or a step's sampling: the queue has a lock of its
  // own, held only to append or take events. Empty when events are off.
  std::vector<Event> poll_events(std::size_t max = SIZE_MAX);

  // Runs the vision (or audio) encoder on up to `max_images` queued images,
  // oldest first, on the calling thread, now: each takes milliseconds to
  // seconds of CPU (stats().image_encode_ms / images_encoded is the mean so
  // far). Under ImageEncoding::caller nothing else encodes them; under
  // thread it takes images the encoder thread has not started. A step never
  // waits for it and it never waits for a step: a step running meanwhile
  // shares the cores with it (place it between steps, or where the game's
  // frame has idle cores). Several threads may call it at once, each takes
  // its own images; a projector encodes one image at a time, so a caller
  // may wait for the encode another (or the encoder thread, or an executor
  // sharing the projector) is running. An encoder failure is that conversation's error(), not
  // a throw. Returns at once (images 0) when nothing is queued or the
  // executor has no projector. Throws Errc::disposed after the executor is
  // gone.
  EncodeResult encode_images(std::uint32_t max_images = 1);

  // A conversation from Conversation::save() bytes or file, saved by any
  // executor of the same model (other n_ctx, slots, batch sizes allowed). Its
  // history, queued input, logits, sampler state and running generation (as
  // conv.generation(); callbacks do not travel) come back: sampling works at
  // once. Resident if a slot and cells are free, else parked. Throws
  // Errc::corrupt (damaged, a damaged version field included), incompatible
  // (another model, or an intact state of another format version),
  // out_of_range (longer than this n_ctx), not_found/invalid_argument/io
  // (files: missing, a directory, unreadable); the executor is then unchanged.
  // Never waits for a running step: the KV data goes into the cache at once
  // when nobody else steps (a refusal by llama.cpp, e.g. another cache type,
  // then throws Errc::corrupt), else at the stepper's next boundary (a
  // refusal then means its tokens are decoded again, with a logged warning).
  Conversation load(std::span<const std::uint8_t> state);
  Conversation load(const std::string &path);

  // Every conversation, resident and parked, with its id: an executor
  // snapshot. Waits for a running step (the KV data is read at a boundary).
  std::vector<std::uint8_t> save_all();
  void save_all(const std::string &path);
  // Restores a snapshot into this executor (same model): saved id -> the new
  // conversation. All or nothing: on any error nothing is added.
  std::map<std::uint64_t, Conversation> load_all(std::span<const std::uint8_t> snapshot);
  std::map<std::uint64_t, Conversation> load_all(const std::string &path);

  // Keeps `tokens` decoded in the cache for prefix reuse until unpinned: a
  // game's lore, known to begin many conversations. Decoded by the next
  // steps like a conversation's prompt (it takes a slot and its cells, and
  // is never evicted or parked). Throws Errc::invalid_argument (prefix
  // reuse off, fewer than 16 tokens — prefixes are matched in blocks of 16 —
  // or pinned already), Errc::out_of_range (a token outside the vocabulary,
  // or more than n_ctx - 1 tokens), and as Conversation::prompt when no slot
  // can be had. Safe from any thread; never waits for a step.
  void pin_prefix(std::span<const Token> tokens);
  // Queues `texts` for embedding and returns at once; the steps decode them
  // (each text whole, in one decode with others that fit: one text longer
  // than what a step's budget leaves gets the step's first place every
  // other step, so it never starves nor holds the conversations back two
  // steps running). Tokenized with the embedding model's vocabulary, its
  // BOS/EOS as it declares. Throws Errc::invalid_argument (no embedder, no
  // texts, a text with no tokens), Errc::out_of_range (a text longer than
  // EmbedderParams::n_ctx tokens), Errc::disposed. Never waits for a step.
  Embedding embed(const std::vector<std::string> &texts);
  // The same for token inputs of the embedding model (each id checked:
  // Errc::out_of_range naming it and the vocabulary size).
  Embedding embed_tokens(std::vector<std::vector<Token>> inputs);
  // The vectors' width; 0 without an embedder.
  std::uint32_t embedding_size() const;

  // Lets a pinned prefix go (its cells join the prefix cache). False when
  // `tokens` is not pinned.
  bool unpin_prefix(std::span<const Token> tokens);

  // The KV cache's cells: ExecutorParams::n_ctx as llama.cpp rounded it up
  // (stats().n_ctx without taking the state lock). A conversation holds at
  // most n_ctx() tokens.
  std::uint32_t n_ctx() const;
  // Free KV cells now (cells referenced by several forks count once; the
  // prefix cache's count as free).
  std::uint32_t cells_free() const;
  ExecutorStats stats() const;
  const Model &model() const;
  const ExecutorParams &params() const;

 private:
  friend struct detail::TestAccess;  // weft's own tests (tests/exec/test_access.hpp)
  std::shared_ptr<detail::ExecutorCore> core_;
};

}  // namespace weft
