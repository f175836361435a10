// Residency: parking conversations out of the KV cache and restoring them,
// so conversations can outnumber the sequence slots and the cells.
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "exec/executor_core.hpp"
#include "core/internal.hpp"

namespace weft {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Parked ones with input (or a prefetch hint), and new ones that need a slot.
bool wants_residency(const Conv &c) {
  return !c.error && (c.n_queued() > 0 || c.prefetch) && (c.where != Residency::resident || c.seq < 0);
}

}  // namespace

void ExecutorCore::to_recompute_locked(Conv &c) {
  // Tokens only: the history (and its logits) stay as they are until the
  // conversation next runs, when restore_locked re-queues it for decoding.
  c.parked.reset();
  c.parked_n = 0;
  c.where = c.history.empty() ? Residency::resident : Residency::recompute;
}

bool ExecutorCore::park_locked(Conv &c) {
  if (c.seq < 0 || c.history.empty()) return false;
  const auto t0 = Clock::now();
  auto *mem = llama_get_memory(ctx);
  std::shared_ptr<ParkedKv> blob;
  const std::size_t size = llama_state_seq_get_size_ext(ctx, c.seq, 0);
  if (size > 0) {
    std::vector<std::uint8_t> bytes = store.buffer(size);  // recycled: no zero fill, no page faults
    if (llama_state_seq_get_data_ext(ctx, bytes.data(), bytes.size(), c.seq, 0) == size) {
      blob = store.put(std::move(bytes), c.id);
    } else {
      store.recycle(std::move(bytes));
    }
  }
  if (!blob && !params.spill.recompute) return false;
  llama_memory_seq_rm(mem, c.seq, -1, -1);
  ledger.release(c.cells);
  c.cells.clear();
  free_seqs.push_back(c.seq);
  c.seq = -1;
  ++parks;
  if (blob) {
    c.where = blob->tier() == Tier::ram ? Residency::ram : Residency::disk;
    c.parked = std::move(blob);
    c.parked_n = c.n_decoded();
  } else {
    to_recompute_locked(c);
  }
  park_s += since(t0);
  return true;
}

bool ExecutorCore::restore_locked(Conv &c) {
  if (c.where == Residency::resident || c.where == Residency::recompute) {
    // Nothing to copy in; it needs only a slot.
    if (c.seq < 0) {
      if (free_seqs.empty()) return false;
      c.seq = free_seqs.back();
      free_seqs.pop_back();
    }
    if (c.where == Residency::recompute) {
      // Its history becomes input again; the re-decode brings the logits back.
      c.queue.insert(c.queue.begin() + static_cast<std::ptrdiff_t>(c.queue_head), c.history.begin(),
                     c.history.end());
      c.history.clear();
      c.has_logits = false;
      c.gen_token_queued = false;
      ++recomputes;
    }
    c.where = Residency::resident;
    c.resident_since = steps;
    c.pinned_step = steps;
    return true;
  }
  const std::uint32_t need = c.parked_n;
  if (free_seqs.empty() || ledger.free() < need) return false;
  const auto t0 = Clock::now();
  const int seq = free_seqs.back();
  auto *mem = llama_get_memory(ctx);
  bool ok = false;
  std::string why;
  try {
    // RAM: straight from the blob; disk: read into a buffer first.
    std::vector<std::uint8_t> read;
    std::span<const std::uint8_t> bytes = c.parked->ram();
    if (c.parked->tier() != Tier::ram) bytes = read = c.parked->bytes();
    ok = llama_state_seq_set_data_ext(ctx, bytes.data(), bytes.size(), seq, 0) != 0 &&
         llama_memory_seq_pos_min(mem, seq) == 0 &&
         llama_memory_seq_pos_max(mem, seq) == static_cast<llama_pos>(need) - 1;
    if (!ok) why = "llama.cpp refused the KV data";
  } catch (const Error &e) {
    why = e.what();
  }
  if (!ok) {
    // Nothing is lost: the tokens are still here.
    llama_memory_seq_rm(mem, seq, -1, -1);
    log_warning(fmt::format("restoring conversation {} failed ({}); re-decoding it from its tokens", c.id, why));
    to_recompute_locked(c);
    restore_s += since(t0);
    return restore_locked(c);
  }
  free_seqs.pop_back();
  c.seq = seq;
  if (c.n_decoded() < need) {
    llama_memory_seq_rm(mem, seq, static_cast<llama_pos>(c.n_decoded()), -1);  // rewound while parked
  }
  ledger.alloc(c.n_decoded(), c.cells);
  c.parked.reset();
  c.parked_n = 0;
  c.where = Residency::resident;
  c.resident_since = steps;
  c.pinned_step = steps;
  ++restores;
  restore_s += since(t0);
  return true;
}

std::uint32_t ExecutorCore::idle_cells_locked(const Conv *except) const {
  std::uint32_t n = 0;
  for (const auto &[id, cp] : convs) {
    const Conv &c = *cp;
    if (&c != except && c.seq >= 0 && c.n_queued() == 0 && !c.gen) n += static_cast<std::uint32_t>(c.cells.size());
  }
  return n;
}

// Idle conversations (nothing queued, not generating) first, least recently
// served and lowest priority first. A busy one only when `idle_only` is
// false, longest resident first (time-slicing the slots).
Conv *ExecutorCore::pick_victim_locked(const Conv &for_whom, bool idle_only) {
  Conv *best = nullptr;
  auto better = [](const Conv &a, const Conv &b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.last_served < b.last_served;
  };
  for (auto &[id, cp] : convs) {
    Conv &c = *cp;
    if (&c == &for_whom || c.seq < 0 || c.history.empty() || c.pinned_step == steps) continue;
    if (c.n_queued() > 0 || c.gen || c.prefetch) continue;
    if (best == nullptr || better(c, *best)) best = &c;
  }
  if (best != nullptr || idle_only) return best;
  for (auto &[id, cp] : convs) {
    Conv &c = *cp;
    if (&c == &for_whom || c.seq < 0 || c.history.empty() || c.pinned_step == steps) continue;
    if (c.priority > for_whom.priority) continue;
    if (best == nullptr || c.resident_since < best->resident_since) best = &c;
  }
  return best;
}

bool ExecutorCore::make_resident_locked(std::uint32_t token_budget) {
  // Who waits to become resident, most urgent first.
  std::vector<Conv *> &wanting = plan_convs;  // scratch; the plan rebuilds it
  wanting.clear();
  for (auto &[id, cp] : convs) {
    Conv &c = *cp;
    if (wants_residency(c)) {
      if (c.waiting_since == 0) c.waiting_since = steps;
      wanting.push_back(&c);
    }
  }
  std::sort(wanting.begin(), wanting.end(), [](const Conv *a, const Conv *b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->waiting_since < b->waiting_since;
  });
  bool may_age = false;
  for (Conv *w : wanting) {
    const std::uint32_t need = w->where == Residency::recompute ? 0 : w->parked_n;
    // A busy conversation gives up its slot only to one that has waited a
    // while, so slots are time-sliced rather than thrashed.
    const bool may_evict_busy = steps - w->waiting_since >= kAgingSteps;
    bool ok = true;
    while (ok && (free_seqs.empty() || ledger.free() < need)) {
      Conv *v = pick_victim_locked(*w, !may_evict_busy);
      ok = v != nullptr && park_locked(*v);
    }
    if (ok && restore_locked(*w)) {
      w->waiting_since = 0;
      w->prefetch = false;
      w->pinned_step = steps;
    } else if (!may_evict_busy) {
      may_age = true;
    }
  }
  // Resident conversations with input may need cells that idle ones hold.
  std::uint64_t wanted = 0;
  for (auto &[id, cp] : convs) {
    const Conv &c = *cp;
    if (c.where == Residency::resident && !c.error) wanted += c.n_queued();
  }
  const std::uint64_t target = std::min<std::uint64_t>(wanted, token_budget);
  while (ledger.free() < target) {
    Conv *v = nullptr;
    for (auto &[id, cp] : convs) {
      Conv &c = *cp;
      if (c.seq < 0 || c.history.empty() || c.n_queued() > 0 || c.gen || c.prefetch || c.pinned_step == steps) continue;
      if (v == nullptr || c.last_served < v->last_served) v = &c;
    }
    if (v == nullptr || !park_locked(*v)) break;
  }
  return may_age;
}

}  // namespace detail

const char *residency_name(Residency r) noexcept {
  switch (r) {
    case Residency::resident: return "resident";
    case Residency::ram: return "ram";
    case Residency::disk: return "disk";
    case Residency::recompute: return "recompute";
  }
  return "unknown";
}

}  // namespace weft
