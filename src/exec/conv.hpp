// A conversation's state inside the executor, and the table that holds them.
//
// A Conv has two sides. Its history, queue, logits, sampler and generation
// are what the user sees: every operation changes them at once, under the
// executor's state lock, whether or not a step is running. Its KvHandle is
// what the KV cache holds: only a step boundary changes it (reconcile.cpp),
// so an operation that needs the cache changed (a rewind, a fork, a dispose)
// leaves an intent and marks the conversation dirty. Between boundaries the
// cache may hold more than the history (a rewind not applied yet) or less (a
// fork not copied yet); reconcile brings it back to "the cache holds exactly
// history[0, kv.n())", which every step relies on.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/projector_impl.hpp"
#include "core/sampling.hpp"
#include "core/text_stream.hpp"
#include "core/token_queue.hpp"
#include "exec/adapter_spans.hpp"
#include "kv/kv_manager.hpp"
#include "weft/executor.hpp"

namespace weft::detail {

struct ExecutorCore;

// Progress of one generation, shared with its Generation handles.
struct GenState {
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  GenerationResult result;  // reason == running until finished
  FinishReason pending_reason = FinishReason::running;  // finished, last callback not yet run
  // Below: touched only under the executor's state lock.
  GenerateParams params;
  std::shared_ptr<Sampler> own_sampler;  // when params.sampler was given
  std::optional<TextStream> stream;
  std::weak_ptr<ExecutorCore> core;
  std::uint64_t conv_id = 0;
  bool tools = false;  // sampled under tools_grammar(): the call is parsed when it ends
  ToolFormat tool_format = ToolFormat::hermes;  // with tools: the one sampled and parsed
  // Speculative decoding: as resolved (GenerateParams's or the executor's),
  // and its drafts' recent acceptance, each position tested counted (a
  // draft token after a rejected one is not), older ones weighing less.
  SpeculativeParams spec;
  double spec_kept = 0, spec_tested = 0;
  // The chance that the next draft token is kept (1 kept of 2 tested before any).
  double spec_rate() const { return (spec_kept + 1) / (spec_tested + 2); }
  // A proposal the plan did not draft (it did not pay at the rate then),
  // checked against the tokens sampled after it: acceptance is learned
  // without drafting, so a rate that starts low can rise (speculate.cpp).
  std::vector<Token> shadow;
  std::uint32_t shadow_at = 0;  // its tokens matched so far
  // Drafter::model: the draft model's tokens after `proposal_next` at
  // history position proposal_at (the step before made them).
  std::vector<Token> proposal;
  std::size_t proposal_at = 0;
  Token proposal_next = -1;
  std::uint64_t draft_turn = 0;  // step it last drafted with the model
  void learn_spec(double kept, double tested) {
    spec_kept = spec_kept * 0.9 + kept;
    spec_tested = spec_tested * 0.9 + tested;
  }
};

// KV work an operation asked for, done at the next step boundary.
struct KvIntent {
  bool park = false;
  std::uint64_t copy_from = 0;                           // a fork: share this conversation's prefix
  std::vector<std::pair<std::uint32_t, std::uint32_t>> erase;  // remove(): shift these out, in order
  std::optional<std::vector<std::uint8_t>> import;       // load(): KV data of the first history.size()
  std::uint32_t import_exact = 0, import_from = 0;       // ...as ConvRecord's kv_exact, kv_from
  std::uint64_t import_salt = 0;                         // ...decoded under this adapter setting
  bool any() const { return park || copy_from != 0 || !erase.empty() || import.has_value(); }
};

// An image in a conversation: positions [begin, begin + n_tokens) of its
// history followed by its queue, each holding image_token(id). Decoded
// whole, from its embeddings, in one step (media.cpp).
struct MediaSpan {
  std::uint32_t begin = 0;
  std::shared_ptr<MediaChunk> chunk;
  std::uint32_t end() const { return begin + chunk->n_tokens; }
};

// Where a conversation stands in the scheduler's turns and the eviction
// policy's order (schedule.cpp, media.cpp). Steps count StepStats::steps.
struct ConvTurns {
  std::uint64_t last_served = 0;     // step it last got tokens decoded
  std::uint64_t ready_since = 0;     // step its queue last went from empty to not
  std::uint64_t waiting_since = 0;   // step it started waiting for residency (0 = not)
  std::uint64_t resident_since = 0;  // step it last became resident
  std::uint64_t pinned_step = 0;     // made resident in this step: not a victim
  bool prefetch = false;             // Conversation::prefetch(): made resident with nothing queued
  bool pinned = false;  // a pinned prefix (Executor::pin_prefix): no user handle, never a victim
  // Its place in the turns: since it was served or got new input.
  std::uint64_t since() const { return std::max(last_served, ready_since); }
};

// A conversation's sampler while a step's sampling phase uses it outside the
// lock (update.cpp): forks taken meanwhile get their copy of it after.
struct SamplerShare {
  bool sampling = false;
  std::vector<std::uint64_t> clone_to;  // the forks waiting for a copy
  bool pending = false;                 // this one is such a fork
};

struct Conv {
  std::uint64_t id = 0;
  std::vector<MediaSpan> media;  // its images, by position (empty for text-only ones)
  std::vector<Token> history;  // decoded (or to be, once reconciled): positions 0..n-1
  TokenQueue queue;            // input waiting to be decoded
  std::vector<float> logits;   // of history.back() when has_logits
  bool has_logits = false;
  SamplerParams sampler_params;
  std::shared_ptr<Sampler> sampler;  // built on first use; shared so a step can sample outside the lock
  std::shared_ptr<GenState> gen;     // running generation
  bool gen_token_queued = false;     // queue holds exactly the sampled token
  int priority = 0;
  std::optional<Memory> memory;  // Conversation::set_memory: saved with the conversation
  AdapterConfigPtr adapters;  // the setting new input decodes under (null: none)
  AdapterSpans spans;         // ...and the one each history position was decoded under
  // The setting its next queued token decodes under.
  const AdapterConfigPtr &next_adapters() const { return spans.at(n_decoded(), adapters); }
  std::optional<Error> error;
  std::weak_ptr<struct ConvHandle> handle;  // the user's handles, if any left

  KvHandle kv;
  KvIntent intent;
  bool dirty = false;     // in ConvTable::dirty: its cache is to be reconciled
  bool disposed = false;  // gone for the user; reaped at the boundary
  // Bumped whenever its history or queued input changes other than by
  // appending: a decode planned before then is not committed to it.
  std::uint64_t epoch = 0;
  SamplerShare share;
  ConvTurns turns;

  std::uint32_t n_queued() const { return queue.size(); }
  std::uint32_t n_decoded() const { return static_cast<std::uint32_t>(history.size()); }
  bool resident() const { return kv.where == Residency::resident; }
};

struct ConvHandle {
  std::shared_ptr<ExecutorCore> core;
  std::uint64_t id = 0;
  ~ConvHandle();
};

// The conversations, by id. (Walk order decides the order of rows in a
// batch, and so where tokens land in the cache: kept as it was, so seeded
// runs give the same bytes.)
struct ConvTable {
  std::unordered_map<std::uint64_t, std::unique_ptr<Conv>> all;  // disposed ones until reaped
  std::vector<std::uint64_t> dirty;                    // in the order they were changed
  std::uint64_t next_id = 1;  // 0 is no conversation
  std::uint32_t live = 0;  // not disposed
  std::map<std::vector<Token>, std::uint64_t> pins;  // pinned prefix -> its Conv (prefix.cpp)

  Conv *find(std::uint64_t id) const {
    auto it = all.find(id);
    return it == all.end() || it->second->disposed ? nullptr : it->second.get();
  }
  void mark_dirty(Conv &c) {
    if (!c.dirty) dirty.push_back(c.id);
    c.dirty = true;
  }
};

}  // namespace weft::detail
