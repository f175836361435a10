// weft/memory.hpp — what an NPC remembers: texts with their embeddings,
// searched by cosine similarity, brought back into its prompt.
//
// A Memory holds entries (text, caller metadata, vector). add() queues the
// text's embedding on an executor (Executor::embed) and returns at once; the
// entry is found by searches once its vector has arrived. Search is exact
// (every entry scored): about 10 ms for 100k entries of 64 floats here
// (docs/BENCHMARKS.md, "Memory search"). A Memory can travel with a
// conversation's saved state (Conversation::set_memory) or on its own
// (save/load).
//
// Ownership: Memory is a shared handle: copies name the same store (a
// conversation and the game may hold it both). Thread-safety: every method
// may be called from any thread (one lock per store, held only while
// entries are read or changed, never while an embedding is decoded); none
// waits for a step.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/embedding.hpp"
#include "weft/export.hpp"
#include "weft/model.hpp"

namespace weft {

class Executor;

struct MemoryEntry {
  std::uint64_t id = 0;
  std::string text;
  std::string metadata;       // the caller's, opaque to weft (a time, a place, JSON)
  std::vector<float> vector;  // empty until embedded (or when its embedding failed)
};

struct MemoryHit {
  std::uint64_t id = 0;
  float score = 0;  // cosine similarity to the query, in [-1, 1]
  std::string text;
  std::string metadata;
};

namespace detail {
struct MemoryState;
struct MemoryQuery;
}

// A search whose query is being embedded (Memory::search with an executor).
class WEFT_API MemorySearch {
 public:
  MemorySearch() = default;  // empty: ready(), no hits
  // True once the query is embedded (or its embedding failed: error()).
  bool ready() const;
  // Waits until ready or `timeout` passes; returns ready().
  bool wait_for(std::chrono::milliseconds timeout) const;
  std::optional<Error> error() const;
  // The best k entries for the query among those embedded now, best first
  // (equal scores: the older entry first); empty until ready().
  std::vector<MemoryHit> hits() const;

  explicit MemorySearch(std::shared_ptr<detail::MemoryQuery> q) : q_(std::move(q)) {}

 private:
  std::shared_ptr<detail::MemoryQuery> q_;
};

class WEFT_API Memory {
 public:
  // A new, empty store.
  Memory();

  // Adds `text` (with `metadata`) and queues its embedding on `executor`;
  // returns the entry's id (ids grow from 1 and are never reused). Throws as
  // Executor::embed does (no embedder, a text longer than its n_ctx), and
  // Errc::incompatible when this store's vectors came from another embedder
  // (another model, pooling or normalisation).
  std::uint64_t add(Executor &executor, std::string text, std::string metadata = {});
  // Adds an entry with a vector the caller made. Throws Errc::invalid_argument
  // for an empty vector or one whose width differs from the store's.
  std::uint64_t add(std::string text, std::vector<float> vector, std::string metadata = {});
  // Removes an entry (a queued embedding is dropped); false when absent.
  bool remove(std::uint64_t id);
  void clear();
  std::optional<MemoryEntry> get(std::uint64_t id) const;
  // Every entry, by id.
  std::vector<MemoryEntry> entries() const;
  std::size_t size() const;
  // Entries whose embedding is queued, and entries without a vector whose
  // embedding failed or never ran (a store loaded before they arrived).
  std::size_t pending() const;
  std::size_t missing() const;
  // Queues the embedding of every entry without a vector and not queued on
  // `executor`; returns how many. Throws as add().
  std::size_t embed_missing(Executor &executor);
  // The vectors' width (0 while no entry has one).
  std::uint32_t dimensions() const;

  // The best k entries for `query` (a vector of the store's width), best
  // first; equal scores: the older entry first. Throws Errc::invalid_argument
  // for another width.
  std::vector<MemoryHit> search(std::span<const float> query, std::size_t k) const;
  // Queues `query`'s embedding on `executor` and returns at once; the
  // handle's hits() are searched when read. Throws as add().
  MemorySearch search(Executor &executor, const std::string &query, std::size_t k) const;

  // The store as bytes (entries, ids, the embedder it was filled by; queued
  // embeddings are saved as entries without a vector: embed_missing() after
  // load queues them again). load() throws Errc::corrupt for damaged bytes
  // and Errc::incompatible for another format version.
  std::vector<std::uint8_t> save() const;
  static Memory load(std::span<const std::uint8_t> bytes);

  explicit Memory(std::shared_ptr<detail::MemoryState> state) : state_(std::move(state)) {}
  const std::shared_ptr<detail::MemoryState> &state() const noexcept { return state_; }

 private:
  std::shared_ptr<detail::MemoryState> state_;
};

// A prompt that brings memories back: `system`, then the hits as a list
// under `heading`, as the system message, followed by `recent` (the last
// turns of the conversation), formatted with the model's chat template (or
// `tmpl`, as Model::apply_chat_template) and ending with the assistant's
// turn opener. Throws as apply_chat_template does.
WEFT_API std::string recall_prompt(const Model &model, std::string_view system, std::span<const MemoryHit> hits,
                                   std::span<const ChatMessage> recent,
                                   std::string_view heading = "What you remember:", std::string_view tmpl = {});

}  // namespace weft
