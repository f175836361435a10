// Memory: entries, their embeddings as they arrive, exact search
// (weft/memory.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/internal.hpp"
#include "exec/memory/memory_state.hpp"
#include "state/memory_codec.hpp"
#include "weft/executor.hpp"

namespace weft {
namespace detail {

std::uint64_t embedder_identity(const Executor &executor) {
  const auto &p = executor.params().embedder;
  if (!p) fail(Errc::invalid_argument, "Memory: the executor has no embedder (ExecutorParams::embedder)");
  const Model &m = p->model ? *p->model : executor.model();
  // splitmix64 over the parts: a collision would need another model of equal fingerprint.
  std::uint64_t h = m.fingerprint();
  for (std::uint64_t part : {std::uint64_t(p->pooling) + 1, std::uint64_t(p->normalize) + 7}) {
    h ^= part + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return h == 0 ? 1 : h;
}

void MemoryState::settle_locked() {
  for (Entry &e : entries) {
    if (!e.queued || !e.pending.done()) continue;
    if (!e.pending.error()) {
      e.vector = e.pending.vector(0);
      if (dims == 0) dims = static_cast<std::uint32_t>(e.vector.size());
    }
    e.pending = Embedding();
    e.queued = false;
  }
}

std::vector<MemoryHit> MemoryState::search_locked(std::span<const float> query, std::size_t k) const {
  if (dims != 0 && query.size() != dims) {
    fail(Errc::invalid_argument,
         fmt::format("Memory::search: a query of {} floats in a store of width {}", query.size(), dims));
  }
  std::vector<std::pair<float, std::size_t>> scored;
  scored.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i].vector.empty()) scored.emplace_back(cosine_similarity(query, entries[i].vector), i);
  }
  k = std::min(k, scored.size());
  // Entries are by ascending id: on equal scores the older comes first.
  std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(k), scored.end(),
                    [](const auto &a, const auto &b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<MemoryHit> hits;
  hits.reserve(k);
  for (std::size_t i = 0; i < k; ++i) {
    const Entry &e = entries[scored[i].second];
    hits.push_back({e.id, scored[i].first, e.text, e.metadata});
  }
  return hits;
}

namespace {

// The executor's identity, checked against the store's (set on first use).
void check_source_locked(MemoryState &s, std::uint64_t id) {
  if (s.source == 0) {
    s.source = id;
  } else if (s.source != id) {
    fail(Errc::incompatible, fmt::format("Memory: its vectors came from embedder {:016x}; this executor's is {:016x} "
                                         "(another model, pooling or normalisation)",
                                         s.source, id));
  }
}

MemoryState::Entry *find(MemoryState &s, std::uint64_t id) {
  auto it = std::lower_bound(s.entries.begin(), s.entries.end(), id, [](const auto &e, std::uint64_t v) { return e.id < v; });
  return it != s.entries.end() && it->id == id ? &*it : nullptr;
}

}  // namespace
}  // namespace detail

Memory::Memory() : state_(std::make_shared<detail::MemoryState>()) {}

std::uint64_t Memory::add(Executor &executor, std::string text, std::string metadata) {
  const std::uint64_t source = detail::embedder_identity(executor);
  {
    std::lock_guard lock(state_->mu);
    detail::check_source_locked(*state_, source);
  }
  Embedding e = executor.embed({text});  // throws before anything is added
  std::lock_guard lock(state_->mu);
  const std::uint64_t id = state_->next_id++;
  state_->entries.push_back({id, std::move(text), std::move(metadata), {}, std::move(e), true});
  return id;
}

std::uint64_t Memory::add(std::string text, std::vector<float> vector, std::string metadata) {
  std::lock_guard lock(state_->mu);
  if (vector.empty() || (state_->dims != 0 && vector.size() != state_->dims)) {
    detail::fail(Errc::invalid_argument, fmt::format("Memory::add: a vector of {} floats in a store of width {}",
                                                     vector.size(), state_->dims));
  }
  state_->dims = static_cast<std::uint32_t>(vector.size());
  const std::uint64_t id = state_->next_id++;
  state_->entries.push_back({id, std::move(text), std::move(metadata), std::move(vector), {}, false});
  return id;
}

bool Memory::remove(std::uint64_t id) {
  std::lock_guard lock(state_->mu);
  auto *e = detail::find(*state_, id);
  if (e == nullptr) return false;
  e->pending.cancel();
  state_->entries.erase(state_->entries.begin() + (e - state_->entries.data()));
  return true;
}

void Memory::clear() {
  std::lock_guard lock(state_->mu);
  for (auto &e : state_->entries) e.pending.cancel();
  state_->entries.clear();
}

std::optional<MemoryEntry> Memory::get(std::uint64_t id) const {
  std::lock_guard lock(state_->mu);
  state_->settle_locked();
  const auto *e = detail::find(*state_, id);
  if (e == nullptr) return std::nullopt;
  return MemoryEntry{e->id, e->text, e->metadata, e->vector};
}

std::vector<MemoryEntry> Memory::entries() const {
  std::lock_guard lock(state_->mu);
  state_->settle_locked();
  std::vector<MemoryEntry> out;
  out.reserve(state_->entries.size());
  for (const auto &e : state_->entries) out.push_back({e.id, e.text, e.metadata, e.vector});
  return out;
}

std::size_t Memory::size() const {
  std::lock_guard lock(state_->mu);
  return state_->entries.size();
}

std::size_t Memory::pending() const {
  std::lock_guard lock(state_->mu);
  state_->settle_locked();
  return static_cast<std::size_t>(
      std::count_if(state_->entries.begin(), state_->entries.end(), [](const auto &e) { return e.queued; }));
}

std::size_t Memory::missing() const {
  std::lock_guard lock(state_->mu);
  state_->settle_locked();
  return static_cast<std::size_t>(std::count_if(state_->entries.begin(), state_->entries.end(),
                                                [](const auto &e) { return !e.queued && e.vector.empty(); }));
}

std::size_t Memory::embed_missing(Executor &executor) {
  const std::uint64_t source = detail::embedder_identity(executor);
  std::vector<std::uint64_t> ids;
  std::vector<std::string> texts;
  {
    std::lock_guard lock(state_->mu);
    state_->settle_locked();
    detail::check_source_locked(*state_, source);
    for (const auto &e : state_->entries) {
      if (!e.queued && e.vector.empty()) {
        ids.push_back(e.id);
        texts.push_back(e.text);
      }
    }
  }
  if (ids.empty()) return 0;
  // One embedding per entry, so that each arrives (or fails) on its own.
  std::vector<Embedding> queued;
  for (const auto &t : texts) queued.push_back(executor.embed({t}));
  std::lock_guard lock(state_->mu);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto *e = detail::find(*state_, ids[i]);
    if (e == nullptr || e->queued) {
      queued[i].cancel();  // removed (or queued by another caller) meanwhile
      continue;
    }
    e->pending = std::move(queued[i]);
    e->queued = true;
  }
  return ids.size();
}

std::uint32_t Memory::dimensions() const {
  std::lock_guard lock(state_->mu);
  state_->settle_locked();
  return state_->dims;
}

std::vector<MemoryHit> Memory::search(std::span<const float> query, std::size_t k) const {
  std::lock_guard lock(state_->mu);
  state_->settle_locked();
  return state_->search_locked(query, k);
}

MemorySearch Memory::search(Executor &executor, const std::string &query, std::size_t k) const {
  const std::uint64_t source = detail::embedder_identity(executor);
  {
    std::lock_guard lock(state_->mu);
    detail::check_source_locked(*state_, source);
  }
  return MemorySearch(std::make_shared<detail::MemoryQuery>(detail::MemoryQuery{state_, executor.embed({query}), k}));
}

std::vector<std::uint8_t> Memory::save() const {
  detail::MemoryRecord r;
  std::lock_guard lock(state_->mu);
  state_->settle_locked();
  r.next_id = state_->next_id;
  r.source = state_->source;
  r.dims = state_->dims;
  r.entries.reserve(state_->entries.size());
  for (const auto &e : state_->entries) r.entries.push_back({e.id, e.text, e.metadata, e.vector});
  return detail::encode_memory(r);
}

Memory Memory::load(std::span<const std::uint8_t> bytes) {
  detail::MemoryRecord r = detail::decode_memory(bytes);
  auto s = std::make_shared<detail::MemoryState>();
  s->next_id = r.next_id;
  s->source = r.source;
  s->dims = r.dims;
  s->entries.reserve(r.entries.size());
  for (auto &e : r.entries) s->entries.push_back({e.id, std::move(e.text), std::move(e.metadata), std::move(e.vector), {}, false});
  return Memory(std::move(s));
}

bool MemorySearch::ready() const { return !q_ || q_->query.done(); }

bool MemorySearch::wait_for(std::chrono::milliseconds timeout) const { return !q_ || q_->query.wait_for(timeout); }

std::optional<Error> MemorySearch::error() const { return q_ ? q_->query.error() : std::nullopt; }

std::vector<MemoryHit> MemorySearch::hits() const {
  if (!q_ || !q_->query.done() || q_->query.error()) return {};
  const std::vector<float> v = q_->query.vector(0);
  std::lock_guard lock(q_->store->mu);
  q_->store->settle_locked();
  return q_->store->search_locked(v, q_->k);
}

std::string recall_prompt(const Model &model, std::string_view system, std::span<const MemoryHit> hits,
                          std::span<const ChatMessage> recent, std::string_view heading, std::string_view tmpl) {
  std::string sys(system);
  if (!hits.empty()) {
    if (!sys.empty()) sys += "\n\n";
    sys += heading;
    for (const auto &h : hits) sys += "\n- " + h.text;
  }
  std::vector<ChatMessage> messages;
  messages.reserve(recent.size() + 1);
  if (!sys.empty()) messages.push_back({"system", std::move(sys)});
  messages.insert(messages.end(), recent.begin(), recent.end());
  return model.apply_chat_template(messages, true, tmpl);
}

}  // namespace weft
