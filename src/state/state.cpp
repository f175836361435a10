// Saving and loading conversations and whole executors; park/prefetch hints.
#include <llama.h>

#include <fmt/format.h>

#include "exec/executor_core.hpp"
#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "state/state_codec.hpp"

namespace weft {
namespace detail {
namespace {

constexpr std::uint64_t kMaxStateFile = kMaxKvBytes + (64ull << 20);

// Everything of `c` but its KV data (under mu).
ConvRecord record_of(const ExecutorCore &x, const Conv &c) {
  ConvRecord r;
  r.history = c.history;
  r.queue.assign(c.queue.begin() + static_cast<std::ptrdiff_t>(c.queue_head), c.queue.end());
  if (c.has_logits) r.logits = c.logits;
  r.sampler_params = c.sampler_params;
  if (c.sampler) r.sampler_state = c.sampler->state();
  r.priority = c.priority;
  r.gen_token_queued = c.gen_token_queued;
  if (c.gen) {
    const GenState &g = *c.gen;
    GenRecord gr;
    gr.max_tokens = g.params.max_tokens;
    gr.stop = g.params.stop;
    gr.sampler = g.params.sampler;
    if (g.own_sampler) gr.sampler_state = g.own_sampler->state();
    {
      std::lock_guard lock(g.mu);
      gr.tokens = g.result.tokens;
      gr.text = g.result.text;
    }
    gr.stream_text = g.stream->text();
    gr.stream_released = g.stream->released();
    r.gen = std::move(gr);
  }
  (void)x;
  return r;
}

std::vector<std::uint8_t> kv_of(ExecutorCore &x, const Conv &c) {
  if (c.history.empty()) return {};
  if (c.seq < 0) return c.parked->bytes();  // parked: its blob (maybe more positions; load trims)
  const std::size_t size = llama_state_seq_get_size_ext(x.ctx, c.seq, 0);
  std::vector<std::uint8_t> out(size);
  if (size == 0 || llama_state_seq_get_data_ext(x.ctx, out.data(), size, c.seq, 0) != size) {
    fail(Errc::backend, fmt::format("llama.cpp could not copy out the KV data of conversation {}", c.id));
  }
  return out;
}

std::vector<std::uint8_t> save_locked(ExecutorCore &x, const Conv &c) {
  auto r = record_of(x, c);
  if (c.where == Residency::recompute) {
    // Tokens only: the history travels as input, to be decoded on arrival.
    r.queue.insert(r.queue.begin(), r.history.begin(), r.history.end());
    r.history.clear();
    r.gen_token_queued = false;
  } else {
    r.kv = kv_of(x, c);
  }
  return encode_conversation(r, x.model.fingerprint(), x.n_vocab);
}

// Builds a conversation from a decoded record (under mu, at a step boundary).
Conversation adopt_locked(ExecutorCore &x, ConvRecord &&r, Sampler &&sampler, std::optional<Sampler> &&gen_sampler) {
  auto c = std::make_unique<Conv>();
  c->id = x.next_id++;
  c->history = std::move(r.history);
  c->queue = std::move(r.queue);
  c->has_logits = !r.logits.empty();
  c->logits = std::move(r.logits);
  c->sampler_params = r.sampler_params;
  if (r.sampler_state) c->sampler.emplace(std::move(sampler));
  c->priority = r.priority;
  c->gen_token_queued = r.gen_token_queued;
  if (r.gen) {
    auto g = std::make_shared<GenState>();
    g->params.max_tokens = r.gen->max_tokens;
    g->params.stop = r.gen->stop;
    g->params.sampler = r.gen->sampler;
    if (gen_sampler) g->own_sampler.emplace(std::move(*gen_sampler));
    g->stream.emplace(r.gen->stop);
    g->stream->restore(std::move(r.gen->stream_text), static_cast<std::size_t>(r.gen->stream_released));
    g->result.tokens = std::move(r.gen->tokens);
    g->result.text = std::move(r.gen->text);
    g->core = x.weak_from_this();
    g->conv_id = c->id;
    c->gen = std::move(g);
  }
  const auto n = c->n_decoded();
  if (n > 0) {
    // Resident at once when there is room; else parked in RAM (or further).
    auto *mem = llama_get_memory(x.ctx);
    bool resident = false;
    if (!x.free_seqs.empty() && x.ledger.free() >= n) {
      const int seq = x.free_seqs.back();
      resident = llama_state_seq_set_data_ext(x.ctx, r.kv.data(), r.kv.size(), seq, 0) != 0 &&
                 llama_memory_seq_pos_min(mem, seq) == 0 && llama_memory_seq_pos_max(mem, seq) >= static_cast<llama_pos>(n) - 1;
      if (!resident) {
        llama_memory_seq_rm(mem, seq, -1, -1);
        fail(Errc::corrupt, fmt::format("llama.cpp refused the KV data of the conversation state ({} bytes for {} "
                                        "tokens): another context type or a damaged file",
                                        r.kv.size(), n));
      }
      x.free_seqs.pop_back();
      llama_memory_seq_rm(mem, seq, static_cast<llama_pos>(n), -1);  // a parked blob may hold more
      c->seq = seq;
      x.ledger.alloc(n, c->cells);
      c->resident_since = x.steps;
    } else {
      const auto kv_size = r.kv.size();
      c->parked = x.store.put(std::move(r.kv), c->id);
      c->parked_n = n;
      if (c->parked) {
        c->where = c->parked->tier() == Tier::ram ? Residency::ram : Residency::disk;
      } else {
        (void)kv_size;
        x.to_recompute_locked(*c);
      }
    }
  }
  auto handle = std::make_shared<ConvHandle>();
  handle->core = x.shared_from_this();
  handle->id = c->id;
  c->handle = handle;
  x.convs.emplace(c->id, std::move(c));
  x.notify_work_locked();
  return Conversation(handle);
}

struct Decoded {
  ConvRecord rec;
  Sampler sampler;
  std::optional<Sampler> gen_sampler;
};

// Pure decoding and sampler replay: no executor state touched.
Decoded decode_for(ExecutorCore &x, std::span<const std::uint8_t> bytes) {
  auto rec = decode_conversation(bytes, x.model.fingerprint(), x.n_vocab, x.n_ctx);
  const auto n_ctx = static_cast<std::int32_t>(x.n_ctx);
  Sampler s = rec.sampler_state ? Sampler::restore(x.model, rec.sampler_params, n_ctx, *rec.sampler_state)
                                : Sampler(x.model, rec.sampler_params, n_ctx);
  std::optional<Sampler> gs;
  if (rec.gen && rec.gen->sampler) {
    gs.emplace(rec.gen->sampler_state ? Sampler::restore(x.model, *rec.gen->sampler, n_ctx, *rec.gen->sampler_state)
                                      : Sampler(x.model, *rec.gen->sampler, n_ctx));
  }
  return {std::move(rec), std::move(s), std::move(gs)};
}

}  // namespace
}  // namespace detail

using detail::Conv;
using detail::ExecutorCore;

std::vector<std::uint8_t> Conversation::save() const {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  auto &x = *handle_->core;
  auto kv = x.kv_lock();
  std::lock_guard lock(x.mu);
  return detail::save_locked(x, x.get(handle_->id));
}

void Conversation::save(const std::string &path) const { detail::write_file_atomic(path, save()); }

Residency Conversation::residency() const {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  std::lock_guard lock(handle_->core->mu);
  return handle_->core->get(handle_->id).where;
}

bool Conversation::park() {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  auto &x = *handle_->core;
  auto kv = x.kv_lock();
  std::lock_guard lock(x.mu);
  auto &c = x.get(handle_->id);
  if (c.seq < 0) return c.where != Residency::resident || c.history.empty();
  return x.park_locked(c);
}

void Conversation::prefetch() {
  if (!handle_) detail::fail(Errc::disposed, "empty Conversation handle");
  auto &x = *handle_->core;
  std::lock_guard lock(x.mu);
  auto &c = x.get(handle_->id);
  if (c.where != Residency::resident) {
    c.prefetch = true;
    x.notify_work_locked();
  }
}

Conversation Executor::load(std::span<const std::uint8_t> state) {
  auto &x = detail::live_core(core_);
  auto d = detail::decode_for(x, state);  // validates before anything changes
  auto kv = x.kv_lock();
  std::lock_guard lock(x.mu);
  if (x.closed) detail::fail(Errc::disposed, "the executor was destroyed");
  return detail::adopt_locked(x, std::move(d.rec), std::move(d.sampler), std::move(d.gen_sampler));
}

Conversation Executor::load(const std::string &path) {
  detail::live_core(core_);  // disposed before any file error
  return load(detail::read_file(path, detail::kMaxStateFile));
}

std::vector<std::uint8_t> Executor::save_all() {
  auto &x = detail::live_core(core_);
  auto kv = x.kv_lock();
  std::lock_guard lock(x.mu);
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> all;
  for (auto &[id, c] : x.convs) all.emplace_back(id, detail::save_locked(x, *c));
  std::sort(all.begin(), all.end(), [](auto &a, auto &b) { return a.first < b.first; });
  return detail::encode_snapshot(all, x.model.fingerprint());
}

void Executor::save_all(const std::string &path) { detail::write_file_atomic(path, save_all()); }

std::map<std::uint64_t, Conversation> Executor::load_all(std::span<const std::uint8_t> snapshot) {
  auto &x = detail::live_core(core_);
  const auto parts = detail::decode_snapshot(snapshot, x.model.fingerprint());
  std::vector<std::pair<std::uint64_t, detail::Decoded>> decoded;
  for (const auto &[id, bytes] : parts) decoded.emplace_back(id, detail::decode_for(x, bytes));
  // Declared before the locks: on failure its handles go after they are released.
  std::map<std::uint64_t, Conversation> out;
  auto kv = x.kv_lock();
  std::lock_guard lock(x.mu);
  if (x.closed) detail::fail(Errc::disposed, "the executor was destroyed");
  try {
    for (auto &[id, d] : decoded) {
      out.emplace(id, detail::adopt_locked(x, std::move(d.rec), std::move(d.sampler), std::move(d.gen_sampler)));
    }
  } catch (...) {
    // All or nothing.
    for (auto &[id, conv] : out) {
      auto it = x.convs.find(conv.id());
      if (it != x.convs.end()) x.dispose_locked(*it->second);
    }
    throw;
  }
  return out;
}

std::map<std::uint64_t, Conversation> Executor::load_all(const std::string &path) {
  detail::live_core(core_);  // disposed before any file error
  return load_all(detail::read_file(path, detail::kMaxStateFile * 4));
}

}  // namespace weft
