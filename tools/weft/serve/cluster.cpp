// weft serve: conversations shared by several nodes through a state store.
#include "serve/cluster.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <set>
#include <vector>

#include "serve/serve_context.hpp"

namespace weft_cli::serve {

Cluster::Cluster(ServeContext &ctx, std::unique_ptr<StateStore> store, std::string node_id,
                 std::chrono::milliseconds lease)
    : ctx_(ctx), store_(std::move(store)), node_(std::move(node_id)), lease_(lease) {
  if (store_) keeper_ = std::thread([this] { keeper(); });
}

Cluster::~Cluster() {
  stop_ = true;
  {
    std::lock_guard lk(wake_mu_);
  }
  wake_.notify_all();
  if (keeper_.joinable()) keeper_.join();
}

void Cluster::raise(const StoreError &e, const std::string &id) {
  switch (e.code) {
    case StoreErrc::unavailable:
      note_store(false, e.what());
      throw ApiError(503, "server_error", "store_unavailable", e.what());
    case StoreErrc::leased:
      throw ApiError(409, "invalid_request_error", "conversation_leased",
                     fmt::format("{}; retry when it ends", e.what()));
    case StoreErrc::conflict: throw ApiError(409, "invalid_request_error", "conflict", e.what());
    case StoreErrc::too_large: throw ApiError(507, "server_error", "state_too_large", e.what());
    case StoreErrc::corrupt: break;
  }
  throw ApiError(500, "server_error", "store_corrupt",
                 fmt::format("conversation '{}': {}", id.substr(0, 80), e.what()));
}

void Cluster::note_store(bool ok, const std::string &why) {
  bool was = false;
  {
    std::lock_guard lk(health_mu_);
    was = store_ok_;
    store_ok_ = ok;
    if (!ok) store_error_ = why;
  }
  if (was != ok) {
    if (ok) std::fprintf(stderr, "weft serve: the state store is back\n");
    else std::fprintf(stderr, "weft serve: %s\n", why.c_str());
    if (ok) wake_.notify_all();  // deferred writes go now
  }
}

std::shared_ptr<ConvEntry> Cluster::load_into_registry(const std::string &id, const StoredState &s) {
  weft::Conversation conv;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    conv = ctx_.ex->load(std::span<const std::uint8_t>(s.bytes.data(), s.bytes.size()));
    count(op_restore, t0, s.bytes.size());
  } catch (const weft::Error &e) {
    throw from_weft(e);
  }
  ctx_.registry.remove(id);
  auto entry = ctx_.registry.add(std::move(conv), "conversation", id, s.owner);
  return entry;
}

std::shared_ptr<ConvEntry> Cluster::find(const std::string &id, const Caller &who) {
  if (!store_) return ctx_.registry.get(id, who);
  auto mine = [&](std::shared_ptr<ConvEntry> e) {
    if (!who.may_use(e->owner)) throw conversation_not_found(id);
    return e;
  };
  if (auto e = ctx_.registry.find(id)) return mine(std::move(e));
  std::lock_guard lk(mu_);
  if (auto e = ctx_.registry.find(id)) return mine(std::move(e));  // loaded meanwhile
  std::optional<StoredState> s;
  try {
    // The record first: another key's state is not even read.
    const StoreRecord rec = store_->peek(id);
    if (rec.version == 0 || !who.may_use(rec.owner)) throw conversation_not_found(id);
    const auto t0 = std::chrono::steady_clock::now();
    s = store_->load(id);
    count(op_read, t0, s ? s->bytes.size() : 0);
    note_store(true, "");
  } catch (const StoreError &e) {
    raise(e, id);
  }
  // Another key's (made again since the peek): as if there were none, and not loaded.
  if (!s || !who.may_use(s->owner)) throw conversation_not_found(id);
  auto entry = load_into_registry(id, *s);
  local_[id] = Local{.version = s->version};
  return entry;
}

Turn Cluster::begin_turn(const std::string &id, const Caller &who, std::optional<std::uint64_t> if_version) {
  Turn t;
  if (!store_) {
    t.entry = ctx_.registry.get(id, who);
    if (if_version)
      throw ApiError(400, "invalid_request_error", "invalid_value",
                     "'if_version' needs a state store (weft serve --store)", "if_version");
    t.n_before = t.entry->conv.n_tokens();
    return t;
  }
  std::shared_ptr<ConvEntry> held = ctx_.registry.find(id);
  // Another key's copy here: 404 before the store is asked (no lease taken).
  if (held && !who.may_use(held->owner)) throw conversation_not_found(id);
  if (held) {
    const auto g = held->generation();
    if (g && !g->done())
      throw ApiError(409, "invalid_request_error", "conversation_busy",
                     fmt::format("conversation '{}' is generating for another request", id));
  }
  StoreRecord rec;
  try {
    // Not held here: another key's conversation is refused before its lease is taken.
    if (!held) {
      const StoreRecord peeked = store_->peek(id);
      if (peeked.version > 0 && !who.may_use(peeked.owner)) throw conversation_not_found(id);
    }
    const auto t0 = std::chrono::steady_clock::now();
    rec = store_->acquire(id, node_, lease_);
    count(op_acquire, t0);
    note_store(true, "");
  } catch (const StoreError &e) {
    if (e.code != StoreErrc::unavailable) raise(e, id);
    // Unreachable: a conversation this node holds goes on, written later.
    std::lock_guard lk(mu_);
    const auto it = local_.find(id);
    if (!held || it == local_.end() || it->second.stale || if_version) raise(e, id);
    note_store(false, e.what());
    ++it->second.leases;
    t.entry = held;
    t.n_before = held->conv.n_tokens();
    return t;
  }
  std::lock_guard lk(mu_);
  auto it = local_.find(id);
  if (rec.version == 0) {
    // Not in the store (never, or deleted by another node): nothing to advance.
    if (held && it != local_.end()) {
      local_.erase(it);
      ctx_.registry.remove(id);
    }
    throw conversation_not_found(id);
  }
  if (!who.may_use(rec.owner)) {
    // Made again by another key since this node's copy (or since the peek).
    try {
      store_->release(id, node_);
    } catch (const StoreError &) {
    }
    throw conversation_not_found(id);
  }
  if (if_version && *if_version != rec.version) {
    try {
      store_->release(id, node_);
    } catch (const StoreError &) {
    }
    throw ApiError(409, "invalid_request_error", "version_mismatch",
                   fmt::format("conversation '{}' is at version {} in the store, not {} (if_version)", id, rec.version,
                               *if_version),
                   "if_version");
  }
  const bool fresh = held && it != local_.end() && !it->second.stale && it->second.version == rec.version;
  if (!fresh) {
    std::optional<StoredState> s;
    try {
      const auto t0 = std::chrono::steady_clock::now();
      s = store_->load(id);
      count(op_read, t0, s ? s->bytes.size() : 0);
    } catch (const StoreError &e) {
      try {
        store_->release(id, node_);
      } catch (const StoreError &) {
      }
      raise(e, id);
    }
    if (!s) throw conversation_not_found(id);
    try {
      held = load_into_registry(id, *s);
    } catch (...) {
      try {
        store_->release(id, node_);
      } catch (const StoreError &) {
      }
      throw;
    }
    local_[id] = Local{.version = s->version};
    it = local_.find(id);
  }
  ++it->second.leases;
  t.entry = held;
  t.n_before = held->conv.n_tokens();
  t.leased = true;
  return t;
}

Json Cluster::commit(Turn &t) {
  if (!store_ || t.done) return nullptr;
  t.done = true;
  const std::string id = t.entry->id;
  std::uint64_t base = 0;
  {
    std::lock_guard lk(mu_);
    base = local_[id].version;
  }
  auto finish = [&](auto &&f) {
    std::lock_guard lk(mu_);
    auto &loc = local_[id];
    if (loc.leases > 0) --loc.leases;
    f(loc);
  };
  std::vector<std::uint8_t> bytes;
  try {
    auto t0 = std::chrono::steady_clock::now();
    bytes = t.entry->conv.save();
    count(op_save, t0, bytes.size());
    t0 = std::chrono::steady_clock::now();
    const auto v = store_->commit(id, node_, base, bytes, t.entry->owner);
    count(op_write, t0, bytes.size());
    note_store(true, "");
    finish([&](Local &l) {
      l.version = v;
      l.dirty = false;
      l.stale = false;
    });
    return Json{{"version", v}, {"holder", node_}, {"bytes", bytes.size()}};
  } catch (const StoreError &e) {
    switch (e.code) {
      case StoreErrc::unavailable:
        note_store(false, e.what());
        finish([](Local &l) { l.dirty = true; });
        return Json{{"version", base}, {"holder", node_}, {"deferred", e.what()}};
      case StoreErrc::too_large: {
        // The turn is undone here, so this copy stays the store's.
        finish([](Local &) {});
        try {
          const auto n = t.entry->conv.n_tokens();
          if (n > t.n_before) t.entry->conv.rewind(n - t.n_before);
          store_->release(id, node_);
        } catch (const std::exception &) {
        }
        raise(e, id);
      }
      default:
        // Another node advanced it: this copy is out of date.
        {
          std::lock_guard lk(mu_);
          local_.erase(id);
        }
        ctx_.registry.remove(id);
        raise(e, id);
    }
  } catch (const weft::Error &e) {
    abandon(t);
    throw from_weft(e);
  }
}

void Cluster::abandon(Turn &t) noexcept {
  if (!store_ || t.done || !t.entry) return;
  t.done = true;
  bool release = false;
  {
    std::lock_guard lk(mu_);
    auto it = local_.find(t.entry->id);
    if (it == local_.end()) return;
    auto &loc = it->second;
    if (loc.leases > 0) --loc.leases;
    try {
      if (t.entry->conv.n_tokens() != t.n_before) loc.stale = true;
    } catch (const std::exception &) {
      loc.stale = true;
    }
    release = t.leased && loc.leases == 0;
  }
  if (release) {
    try {
      store_->release(t.entry->id, node_);
    } catch (const StoreError &) {
      // It expires.
    }
  }
}

Json Cluster::write_whole(ConvEntry &e, std::uint64_t expected) {
  const auto bytes = e.conv.save();
  const auto v = store_->commit(e.id, node_, expected, bytes, e.owner);
  note_store(true, "");
  std::lock_guard lk(mu_);
  local_[e.id] = Local{.version = v};
  return Json{{"version", v}, {"holder", node_}, {"bytes", bytes.size()}};
}

Json Cluster::publish(ConvEntry &e) {
  if (!store_) return nullptr;
  try {
    return write_whole(e, 0);
  } catch (const StoreError &err) {
    raise(err, e.id);
  }
}

Json Cluster::replace(ConvEntry &e) {
  if (!store_) return nullptr;
  try {
    const StoreRecord rec = store_->acquire(e.id, node_, lease_);
    if (rec.version > 0 && rec.owner != e.owner) {
      // Made meanwhile by another key (the caller looked with stored_owner).
      store_->release(e.id, node_);
      throw conversation_not_found(e.id);
    }
    return write_whole(e, rec.version);
  } catch (const StoreError &err) {
    raise(err, e.id);
  }
}

std::optional<std::string> Cluster::stored_owner(const std::string &id) {
  if (!store_) return std::nullopt;
  try {
    const StoreRecord rec = store_->peek(id);
    note_store(true, "");
    if (rec.version == 0) return std::nullopt;
    return rec.owner;
  } catch (const StoreError &e) {
    raise(e, id);
  }
}

bool Cluster::remove(const std::string &id, const Caller &who) {
  if (!store_) return false;
  try {
    const StoreRecord rec = store_->peek(id);
    if (rec.version > 0 && !who.may_use(rec.owner)) throw conversation_not_found(id);
    const bool had = rec.version > 0;
    store_->remove(id, node_);
    note_store(true, "");
    std::lock_guard lk(mu_);
    local_.erase(id);
    return had;
  } catch (const StoreError &e) {
    raise(e, id);
  }
}

const char *Cluster::op_name(int op) {
  static const char *const names[] = {"acquire", "save", "write", "read", "restore"};
  return names[op];
}

void Cluster::count(Op op, std::chrono::steady_clock::time_point since, std::uint64_t bytes) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  std::lock_guard lk(stats_mu_);
  auto &o = stats_[op];
  ++o.n;
  o.seconds += s;
  o.bytes += bytes;
}

std::vector<Cluster::OpStats> Cluster::op_stats() {
  std::lock_guard lk(stats_mu_);
  return {std::begin(stats_), std::end(stats_)};
}

Json Cluster::health() {
  Json j{{"node", node_}};
  if (!store_) {
    j["store"] = nullptr;
    return j;
  }
  j["store"] = store_->describe();
  {
    std::lock_guard lk(health_mu_);
    j["store_ok"] = store_ok_;
    if (!store_ok_) j["store_error"] = store_error_;
  }
  std::lock_guard lk(mu_);
  std::size_t deferred = 0;
  for (const auto &[id, l] : local_) deferred += l.dirty ? 1 : 0;
  j["deferred"] = deferred;
  return j;
}

Json Cluster::describe(const std::string &id) {
  if (!store_) return nullptr;
  std::lock_guard lk(mu_);
  const auto it = local_.find(id);
  if (it == local_.end()) return nullptr;
  return Json{{"version", it->second.version}, {"deferred", it->second.dirty}, {"stale", it->second.stale}};
}

void Cluster::keeper() {
  const auto period = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(1000), lease_ / 3);
  while (!stop_.load()) {
    {
      std::unique_lock lk(wake_mu_);
      wake_.wait_for(lk, period, [this] { return stop_.load(); });
    }
    if (stop_.load()) break;
    std::vector<std::string> renew, flush;
    {
      std::lock_guard lk(mu_);
      for (const auto &[id, l] : local_) {
        if (l.leases > 0) renew.push_back(id);
        else if (l.dirty) flush.push_back(id);
      }
    }
    bool ok = true;
    try {
      store_->ping();
    } catch (const StoreError &e) {
      note_store(false, e.what());
      ok = false;
    }
    if (!ok) continue;
    note_store(true, "");
    // Turns running here keep their lease while they run. Only a lease
    // still held is extended: a turn that committed meanwhile ended it, and
    // taking it again would lock the conversation out for a lease period.
    for (const auto &id : renew) {
      try {
        store_->renew(id, node_, lease_);
      } catch (const StoreError &) {
        // Lost it (or the store went): the turn's commit finds out.
      }
    }
    // Turns written late, now that the store answers.
    for (const auto &id : flush) {
      std::shared_ptr<ConvEntry> e;
      try {
        e = ctx_.registry.get(id);
      } catch (const ApiError &) {
        std::lock_guard lk(mu_);
        local_.erase(id);
        continue;
      }
      if (!e->try_claim()) continue;  // a turn runs: it writes it
      try {
        std::uint64_t base = 0;
        {
          std::lock_guard lk(mu_);
          base = local_[id].version;
        }
        store_->acquire(id, node_, lease_);
        const auto bytes = e->conv.save();
        const auto v = store_->commit(id, node_, base, bytes, e->owner);
        std::lock_guard lk(mu_);
        auto &l = local_[id];
        l.version = v;
        l.dirty = false;
      } catch (const StoreError &err) {
        if (err.code == StoreErrc::conflict) {
          std::fprintf(stderr, "weft serve: conversation '%s' was advanced by another node while the store was "
                               "away; this node's turns on it are dropped: %s\n", id.c_str(), err.what());
          e->release();
          {
            std::lock_guard lk(mu_);
            local_.erase(id);
          }
          ctx_.registry.remove(id);
          continue;
        }
      } catch (const std::exception &) {
      }
      e->release();
    }
  }
}

}  // namespace weft_cli::serve
