// Saving and loading conversations and whole executors; park/prefetch hints.
#include <fmt/format.h>

#include <chrono>
#include <future>

#include "exec/executor_core.hpp"
#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "exec/media/media.hpp"
#include "exec/adapter_record.hpp"
#include "state/state_codec.hpp"
#include "exec/media/media_record.hpp"

namespace weft {
namespace detail {
namespace {

constexpr std::uint64_t kMaxStateFile = kMaxKvBytes + (64ull << 20);

// Everything of `c` but its KV data (under mu).
ConvRecord record_of(const ExecutorCore &x, const Conv &c) {
  ConvRecord r;
  r.history = c.history;
  const auto queued = c.queue.view();
  r.queue.assign(queued.begin(), queued.end());
  // Only with nothing queued (has_logits()): queued input's decode replaces them.
  if (c.has_logits && c.n_queued() == 0) r.logits = c.logits;
  r.sampler_params = c.sampler_params;
  if (c.sampler) r.sampler_state = c.sampler->state();
  r.priority = c.priority;
  if (c.memory) r.memory = c.memory->save();
  r.gen_token_queued = c.gen_token_queued;
  if (c.gen) {
    const GenState &g = *c.gen;
    GenRecord gr;
    gr.max_tokens = g.params.max_tokens;
    gr.ignore_eos = g.params.ignore_eos;
    gr.logprobs = g.params.logprobs;
    gr.top_logprobs = g.params.top_logprobs;
    gr.tools = g.tools;
    gr.tool_format = g.tool_format;
    if (g.spec.drafter != Drafter::none) gr.speculative = g.spec;
    gr.stop = g.params.stop;
    gr.sampler = g.params.sampler;
    if (g.own_sampler) gr.sampler_state = g.own_sampler->state();
    {
      std::lock_guard lock(g.mu);
      gr.tokens = g.result.tokens;
      gr.text = g.result.text;
      gr.logprob_entries = g.result.logprobs;
      gr.drafted = g.result.drafted;
      gr.accepted = g.result.accepted;
    }
    gr.stream_text = g.stream->text();
    gr.stream_released = g.stream->released();
    r.gen = std::move(gr);
  }
  record_adapters(c, r);
  record_media(x, c, r);
  return r;
}

// `kv_from` > 0 (snapshots): the KV of positions [kv_from, n) only; the
// first kv_from are an earlier conversation's of the same snapshot.
std::vector<std::uint8_t> save_locked(ExecutorCore &x, const Conv &c, bool tokens_only = false,
                                      std::uint32_t kv_from = 0) {
  auto r = record_of(x, c);
  if (tokens_only || c.kv.where == Residency::recompute) {
    // Tokens only: the history travels as input, to be decoded on arrival.
    r.queue.insert(r.queue.begin(), r.history.begin(), r.history.end());
    r.history.clear();
    r.gen_token_queued = false;
    if (tokens_only) r.logits.clear();  // the re-decode on load brings them back
  } else {
    r.kv_exact = std::min<std::uint32_t>(c.kv.exact, c.n_decoded());
    if (kv_from > 0) r.kv = x.kv->export_tail(c.kv, kv_from);
    if (!r.kv.empty()) {
      r.kv_from = kv_from;
    } else {
      r.kv = x.kv->export_kv(c.kv);
    }
  }
  return encode_conversation(r, x.model.fingerprint(), x.n_vocab);
}

// What conversation c can take from those saved before it in a snapshot:
// the longest exact prefix one of them holds (resident both).
std::uint32_t shared_with_earlier(const Conv &c, std::span<const Conv *const> earlier) {
  if (!c.kv.has_slot()) return 0;
  const auto mine = std::span(c.kv.tokens).first(std::min<std::uint32_t>(c.kv.exact, c.n_decoded()));
  std::uint32_t best = 0;
  for (const Conv *e : earlier) {
    if (!e->kv.has_slot() || e->kv.salt != c.kv.salt) continue;  // another adapter setting's KV
    const auto theirs = std::span(e->kv.tokens).first(e->kv.exact);
    const auto n = std::min(mine.size(), theirs.size());
    const auto m = static_cast<std::uint32_t>(std::mismatch(mine.begin(), mine.begin() + n, theirs.begin()).first -
                                              mine.begin());
    best = std::max(best, m);
  }
  // Not worth a reference below one index block; never the whole history
  // (a tail of at least one position carries the data).
  // Nor inside an image: its cells go whole.
  best = jump_floor(c.kv.jumps, std::min(best, c.n_decoded() - 1));
  return best < PrefixIndex::kBlock ? 0 : best;
}

// Builds a conversation from a decoded record (under mu). Its KV data goes
// into the cache now when no step runs (a refusal throws, the executor
// unchanged), else at the next step boundary.
Conversation adopt_locked(ExecutorCore &x, ConvRecord &&r, Sampler &&sampler, std::optional<Sampler> &&gen_sampler,
                          ResolvedAdapters &&adapters, ResolvedMedia &&media, std::optional<Memory> &&memory) {
  if (x.closed) fail(Errc::disposed, "the executor was destroyed");
  // As settle_locked: into the cache at once only when nobody else steps,
  // before the conversation exists, so a refusal leaves nothing behind.
  const auto n = static_cast<std::uint32_t>(r.history.size());
  std::unique_lock<std::mutex> step;
  const bool now = n > 0 && x.claim_boundary(step);
  // Exact (shareable) only as far as one adapter setting reaches.
  const std::uint32_t exact = adapters.spans.run(0, r.kv_exact, adapters.current);
  const std::uint64_t salt = adapter_key(adapters.spans.at(0, adapters.current).get());
  KvHandle kv_now;
  if (now) {
    x.kv->import_kv(kv_now, std::move(r.kv), r.history, exact, r.kv_from, x.convs.next_id, salt,
                    media_jumps(media.spans, n));
  }
  auto [c, handle] = x.create_locked();
  c->history = std::move(r.history);
  c->queue.assign(r.queue);
  c->has_logits = !r.logits.empty();
  c->logits = std::move(r.logits);
  c->sampler_params = r.sampler_params;
  if (r.sampler_state) c->sampler = std::make_shared<Sampler>(std::move(sampler));
  c->priority = r.priority;
  c->memory = std::move(memory);
  c->gen_token_queued = r.gen_token_queued;
  c->adapters = std::move(adapters.current);
  c->spans = std::move(adapters.spans);
  x.adapter_state.used = x.adapter_state.used || adapters.any;
  c->media = std::move(media.spans);
  for (auto &m : media.to_encode) x.media.encoder->push(std::move(m));  // resolve_media checked the projector
  if (r.gen) {
    auto g = std::make_shared<GenState>();
    g->params.max_tokens = r.gen->max_tokens;
    g->params.ignore_eos = r.gen->ignore_eos;
    g->params.logprobs = r.gen->logprobs;
    g->params.top_logprobs = r.gen->top_logprobs;
    g->tools = r.gen->tools;
    g->tool_format = r.gen->tool_format;
    g->params.speculative = r.gen->speculative;
    g->spec = r.gen->speculative.value_or(x.params.speculative);
    g->result.drafted = r.gen->drafted;
    g->result.accepted = r.gen->accepted;
    g->params.stop = r.gen->stop;
    g->params.sampler = r.gen->sampler;
    if (gen_sampler) g->own_sampler = std::make_shared<Sampler>(std::move(*gen_sampler));
    g->stream.emplace(r.gen->stop);
    g->stream->restore(std::move(r.gen->stream_text), static_cast<std::size_t>(r.gen->stream_released));
    g->result.tokens = std::move(r.gen->tokens);
    g->result.text = std::move(r.gen->text);
    g->result.logprobs = std::move(r.gen->logprob_entries);
    g->core = x.weak_from_this();
    g->conv_id = c->id;
    c->gen = std::move(g);
  }
  if (now) {
    x.kv->move(c->kv, std::move(kv_now));
  } else if (n > 0) {
    c->intent.import = std::move(r.kv);  // the stepper imports it at its boundary
    c->intent.import_exact = exact;
    c->intent.import_from = r.kv_from;
    c->intent.import_salt = salt;
    x.convs.mark_dirty(*c);
  }
  return Conversation(std::move(handle));
}

// Runs fn() (under mu, the cache reconciled) at a step boundary and returns
// its result: at once on the stepping thread or when nobody steps; else the
// stepper runs it at the end of its running step. Waiting on gate.mu itself
// could take seconds: a worker takes it again as soon as it lets go.
template <class Fn>
auto at_boundary(ExecutorCore &x, Fn &&fn) {
  using T = decltype(fn());
  if (x.gate.stepping.load() == std::this_thread::get_id()) {
    std::lock_guard lock(x.mu);
    x.reconcile_locked();
    return fn();
  }
  // The result or the error's code and text, never an exception object:
  // one thrown on the stepper and caught here would be freed by whichever
  // thread lets go last, through reference counts ThreadSanitizer cannot see.
  struct Outcome {
    std::optional<T> value;
    Errc code = Errc::backend;
    std::string message;
  };
  auto promise = std::make_shared<std::promise<Outcome>>();
  auto future = promise->get_future();
  {
    std::lock_guard lock(x.mu);
    if (x.closed) fail(Errc::disposed, "the executor was destroyed");
    x.at_boundary_locked([&x, &fn, promise] {
      Outcome out;
      try {
        if (x.closed) fail(Errc::disposed, "the executor was destroyed");
        out.value.emplace(fn());
      } catch (const Error &e) {
        out.code = e.code();
        out.message = e.what();
      } catch (const std::exception &e) {
        out.message = e.what();
      }
      promise->set_value(std::move(out));
    });
  }
  x.notify_work();
  // A step that ended just before the task was queued leaves it to the next
  // one: without a worker, take the boundary ourselves once the step is over.
  while (future.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
    std::lock_guard lock(x.mu);
    x.settle_locked();
  }
  Outcome out = future.get();
  if (!out.value) fail(out.code, out.message);
  return std::move(*out.value);
}

struct Decoded {
  ConvRecord rec;
  Sampler sampler;
  std::optional<Sampler> gen_sampler;
  ResolvedAdapters adapters;
  ResolvedMedia media;
  std::optional<Memory> memory;
};

// Pure decoding, sampler replay and images made ready: no executor state
// touched but media ids taken.
Decoded decode_for(ExecutorCore &x, std::span<const std::uint8_t> bytes, MediaIds &ids) {
  auto rec = decode_conversation(bytes, x.model.fingerprint(), x.n_vocab, x.n_ctx);
  const auto n_ctx = static_cast<std::int32_t>(x.n_ctx);
  Sampler s = rec.sampler_state ? Sampler::restore(x.model, rec.sampler_params, n_ctx, *rec.sampler_state)
                                : Sampler(x.model, rec.sampler_params, n_ctx);
  std::optional<Sampler> gs;
  if (rec.gen && rec.gen->sampler) {
    gs.emplace(rec.gen->sampler_state ? Sampler::restore(x.model, *rec.gen->sampler, n_ctx, *rec.gen->sampler_state)
                                      : Sampler(x.model, *rec.gen->sampler, n_ctx));
  }
  auto adapters = resolve_adapters(x, rec);
  auto media = resolve_media(x, rec, ids);
  std::optional<Memory> memory;
  if (!rec.memory.empty()) memory = Memory::load(rec.memory);  // a damaged store: Errc::corrupt, nothing changed
  return {std::move(rec), std::move(s), std::move(gs), std::move(adapters), std::move(media), std::move(memory)};
}

}  // namespace
}  // namespace detail

using detail::Conv;
using detail::ExecutorCore;

std::vector<std::uint8_t> Conversation::save() const {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  auto &x = *handle_->core;
  return detail::at_boundary(x, [&] { return detail::save_locked(x, x.get(handle_->id)); });
}

void Conversation::save(const std::string &path) const { detail::write_file_atomic(path, save()); }

std::vector<std::uint8_t> Conversation::save(const SaveOptions &options) const {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  auto &x = *handle_->core;
  return detail::at_boundary(x, [&] { return detail::save_locked(x, x.get(handle_->id), options.tokens_only); });
}

void Conversation::save(const std::string &path, const SaveOptions &options) const {
  detail::write_file_atomic(path, save(options));
}

void Conversation::save_async(std::function<void(std::vector<std::uint8_t>, std::exception_ptr)> done) const {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  if (!done) detail::fail(Errc::invalid_argument, "save_async: empty callback");
  auto &x = *handle_->core;
  {
    std::lock_guard lock(x.mu);
    x.get(handle_->id);  // disposed: throws now
    x.at_boundary_locked([&x, id = handle_->id, done = std::move(done)] {
      std::vector<std::uint8_t> bytes;
      std::exception_ptr error;
      try {
        bytes = detail::save_locked(x, x.get(id));
      } catch (...) {
        error = std::current_exception();
      }
      try {
        done(std::move(bytes), error);
      } catch (...) {
        // Documented as must-not-throw; a boundary task never throws.
      }
    });  // exactly once, now or at the boundary
  }
  x.notify_work();
}

std::future<std::vector<std::uint8_t>> Conversation::save_async() const {
  auto promise = std::make_shared<std::promise<std::vector<std::uint8_t>>>();
  auto future = promise->get_future();
  save_async([promise](std::vector<std::uint8_t> bytes, std::exception_ptr error) {
    if (error) {
      promise->set_exception(error);
    } else {
      promise->set_value(std::move(bytes));
    }
  });
  return future;
}

Residency Conversation::residency() const {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  std::lock_guard lock(handle_->core->mu);
  return handle_->core->get(handle_->id).kv.where;
}

bool Conversation::park() {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  auto &x = *handle_->core;
  bool parked = false;
  {
    std::lock_guard lock(x.mu);
    auto &c = x.get(handle_->id);
    if (!c.kv.has_slot()) return !c.resident() || c.history.empty();
    c.intent.park = true;
    x.convs.mark_dirty(c);
    // With a step running it is parked at that step's end: whether a tier
    // can take it is what can be said now.
    parked = x.settle_locked() ? !c.resident() : x.kv->spill_on();
  }
  x.notify_work();
  return parked;
}

void Conversation::prefetch() {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  auto &x = *handle_->core;
  {
    std::lock_guard lock(x.mu);
    auto &c = x.get(handle_->id);
    if (c.resident()) return;
    c.turns.prefetch = true;
  }
  x.notify_work();
}

Conversation Executor::load(std::span<const std::uint8_t> state) {
  auto &x = detail::live_core(core_);
  detail::MediaIds ids;
  auto d = detail::decode_for(x, state, ids);  // validates before anything changes
  Conversation conv;
  {
    std::lock_guard lock(x.mu);
    conv = detail::adopt_locked(x, std::move(d.rec), std::move(d.sampler), std::move(d.gen_sampler),
                                std::move(d.adapters), std::move(d.media), std::move(d.memory));
  }
  x.notify_work();
  return conv;
}

Conversation Executor::load(const std::string &path) {
  detail::live_core(core_);  // disposed before any file error
  return load(detail::read_file(path, detail::kMaxStateFile));
}

std::vector<std::uint8_t> Executor::save_all() {
  auto &x = detail::live_core(core_);
  return detail::at_boundary(x, [&] {
    std::vector<const Conv *> order;
    for (auto &[id, c] : x.convs.all) {
      if (!c->disposed && !c->turns.pinned) order.push_back(c.get());
    }
    std::sort(order.begin(), order.end(), [](auto *a, auto *b) { return a->id < b->id; });
    // Loaded in this order: a prefix an earlier one holds is stored once,
    // and shared again on load.
    std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> all;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Conv &c = *order[i];
      const std::uint32_t from = x.kv->reuse_on() ? detail::shared_with_earlier(c, std::span(order).first(i)) : 0;
      all.emplace_back(c.id, detail::save_locked(x, c, false, from));
    }
    return detail::encode_snapshot(all, x.model.fingerprint());
  });
}

void Executor::save_all(const std::string &path) { detail::write_file_atomic(path, save_all()); }

std::map<std::uint64_t, Conversation> Executor::load_all(std::span<const std::uint8_t> snapshot) {
  auto &x = detail::live_core(core_);
  const auto parts = detail::decode_snapshot(snapshot, x.model.fingerprint());
  std::vector<std::pair<std::uint64_t, detail::Decoded>> decoded;
  detail::MediaIds ids;  // one image shared by forks stays one
  for (const auto &[id, bytes] : parts) decoded.emplace_back(id, detail::decode_for(x, bytes, ids));
  // Declared before the locks: on failure its handles go after they are released.
  std::map<std::uint64_t, Conversation> out;
  {
    std::lock_guard lock(x.mu);
    try {
      for (auto &[id, d] : decoded) {
        out.emplace(id, detail::adopt_locked(x, std::move(d.rec), std::move(d.sampler), std::move(d.gen_sampler),
                                             std::move(d.adapters), std::move(d.media), std::move(d.memory)));
      }
    } catch (...) {
      // All or nothing.
      for (auto &[id, conv] : out) {
        if (detail::Conv *c = x.convs.find(conv.id())) x.dispose_locked(*c);
      }
      x.settle_locked();
      throw;
    }
  }
  x.notify_work();
  return out;
}

std::map<std::uint64_t, Conversation> Executor::load_all(const std::string &path) {
  detail::live_core(core_);  // disposed before any file error
  return load_all(detail::read_file(path, detail::kMaxStateFile * 4));
}

}  // namespace weft
