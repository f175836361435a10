// weft serve: the redis:// state store, through hiredis.
//
// Per conversation id two keys, hash-tagged so a Redis Cluster keeps them on
// one shard: `weft:{id}:meta`, a hash (version, holder, lease_node,
// lease_until in ms of the Redis server's clock, bytes, written_ms, owner:
// the owning API key's id, empty without keys), and
// `weft:{id}:state`, the state bytes. Every change is one Lua script, which
// Redis runs atomically: the compare-and-set on the version and the lease
// check happen with nothing in between, and leases use the server's clock,
// so nodes' clocks need not agree.
//
// One connection, used under a mutex; after an error it is dropped and the
// next call connects again (at most once a second: in between, calls fail at
// once with the last reason, so an unreachable Redis costs a request no wait).
#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <mutex>

#include "serve/state_store.hpp"

namespace weft_cli::serve {

namespace {

constexpr const char *kAcquire = R"lua(
local v = redis.call('HGET', KEYS[1], 'version')
if not v then return {0, '', 0, 0, ''} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ln = redis.call('HGET', KEYS[1], 'lease_node') or ''
local lu = tonumber(redis.call('HGET', KEYS[1], 'lease_until') or '0')
if ln ~= '' and ln ~= ARGV[1] and lu > now then return {-1, ln, lu - now, 0} end
redis.call('HSET', KEYS[1], 'lease_node', ARGV[1], 'lease_until', now + tonumber(ARGV[2]))
return {tonumber(v), redis.call('HGET', KEYS[1], 'holder') or '', 0, tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0'),
        redis.call('HGET', KEYS[1], 'owner') or ''}
)lua";

constexpr const char *kPeek = R"lua(
local v = redis.call('HGET', KEYS[1], 'version')
if not v then return {0, '', 0, 0, ''} end
return {tonumber(v), redis.call('HGET', KEYS[1], 'holder') or '', 0, tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0'),
        redis.call('HGET', KEYS[1], 'owner') or ''}
)lua";

constexpr const char *kCommit = R"lua(
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[2]) then return {-1, '', v} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ln = redis.call('HGET', KEYS[1], 'lease_node') or ''
local lu = tonumber(redis.call('HGET', KEYS[1], 'lease_until') or '0')
if ln ~= '' and ln ~= ARGV[1] and lu > now then return {-2, ln, lu - now} end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[1], 'version', v + 1, 'holder', ARGV[1], 'lease_node', '', 'lease_until', 0,
           'bytes', string.len(ARGV[3]), 'written_ms', now, 'owner', ARGV[4])
return {v + 1, '', 0}
)lua";

constexpr const char *kLoad = R"lua(
local v = redis.call('HGET', KEYS[1], 'version')
if not v then return {0} end
return {tonumber(v), redis.call('GET', KEYS[2]), redis.call('HGET', KEYS[1], 'owner') or ''}
)lua";

constexpr const char *kRenew = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ln = redis.call('HGET', KEYS[1], 'lease_node') or ''
local lu = tonumber(redis.call('HGET', KEYS[1], 'lease_until') or '0')
if ln ~= ARGV[1] or lu <= now then return 0 end
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[2]))
return 1
)lua";

constexpr const char *kRelease = R"lua(
if redis.call('HGET', KEYS[1], 'lease_node') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'lease_node', '', 'lease_until', 0)
end
return 0
)lua";

constexpr const char *kRemove = R"lua(
if not redis.call('HGET', KEYS[1], 'version') then return {0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ln = redis.call('HGET', KEYS[1], 'lease_node') or ''
local lu = tonumber(redis.call('HGET', KEYS[1], 'lease_until') or '0')
if ln ~= '' and ln ~= ARGV[1] and lu > now then return {-1, ln, lu - now} end
redis.call('DEL', KEYS[1], KEYS[2])
return {1}
)lua";

struct ReplyDeleter {
  void operator()(redisReply *r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisStore final : public StateStore {
 public:
  RedisStore(std::string host, int port, int db, std::uint64_t max_bytes)
      : StateStore(max_bytes), host_(std::move(host)), port_(port), db_(db) {}
  ~RedisStore() override {
    if (c_ != nullptr) redisFree(c_);
  }

  StoreRecord acquire(const std::string &id, const std::string &node, std::chrono::milliseconds lease) override {
    const std::string ms = std::to_string(lease.count());
    Reply r = eval(kAcquire, id, {node, ms});
    const auto v = int_at(r.get(), 0);
    if (v < 0) leased(id, str_at(r.get(), 1), int_at(r.get(), 2));
    return record(r.get());
  }

  StoreRecord peek(const std::string &id) override { return record(eval(kPeek, id, {}).get()); }

  std::optional<StoredState> load(const std::string &id) override {
    Reply r = eval(kLoad, id, {});
    const auto v = int_at(r.get(), 0);
    if (v == 0) return std::nullopt;
    if (r->elements < 2 || r->element[1]->type != REDIS_REPLY_STRING)
      throw StoreError(StoreErrc::corrupt, fmt::format("conversation '{}' has a record (version {}) but no state", id, v));
    const auto *e = r->element[1];
    StoredState s{static_cast<std::uint64_t>(v), {}, str_at(r.get(), 2)};
    s.bytes.assign(reinterpret_cast<const std::uint8_t *>(e->str), reinterpret_cast<const std::uint8_t *>(e->str) + e->len);
    return s;
  }

  std::uint64_t commit(const std::string &id, const std::string &node, std::uint64_t expected,
                       const std::vector<std::uint8_t> &bytes, const std::string &owner) override {
    check_size(id, bytes.size());
    Reply r = eval(kCommit, id,
                   {node, std::to_string(expected), std::string(reinterpret_cast<const char *>(bytes.data()), bytes.size()),
                    owner});
    const auto v = int_at(r.get(), 0);
    if (v == -1) {
      const auto now = int_at(r.get(), 2);
      throw StoreError(StoreErrc::conflict,
                       expected == 0 ? fmt::format("conversation '{}' already exists in the store", id)
                                     : fmt::format("conversation '{}' is at version {} in the store, not {}: another "
                                                   "node advanced it", id, now, expected));
    }
    if (v == -2) leased(id, str_at(r.get(), 1), int_at(r.get(), 2));
    return static_cast<std::uint64_t>(v);
  }

  bool renew(const std::string &id, const std::string &node, std::chrono::milliseconds lease) override {
    Reply r = eval(kRenew, id, {node, std::to_string(lease.count())});
    return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  }
  void release(const std::string &id, const std::string &node) override { eval(kRelease, id, {node}); }

  void remove(const std::string &id, const std::string &node) override {
    Reply r = eval(kRemove, id, {node});
    if (int_at(r.get(), 0) < 0) leased(id, str_at(r.get(), 1), int_at(r.get(), 2));
  }

  void ping() override { command({"PING"}); }

  std::string describe() const override { return fmt::format("redis://{}:{}/{}", host_, port_, db_); }

 private:
  [[noreturn]] static void leased(const std::string &id, const std::string &holder, long long left) {
    throw StoreError(StoreErrc::leased,
                     fmt::format("conversation '{}' is being advanced by node '{}' (lease ends in {} ms)", id, holder,
                                 left),
                     holder, left);
  }

  [[noreturn]] void unavailable(const std::string &why) {
    last_error_ = why;
    throw StoreError(StoreErrc::unavailable, fmt::format("the state store {} is unavailable: {}", describe(), why));
  }

  // {version, holder, _, bytes, owner}, as kAcquire and kPeek answer.
  static StoreRecord record(const redisReply *r) {
    return {static_cast<std::uint64_t>(int_at(r, 0)), str_at(r, 1), static_cast<std::uint64_t>(int_at(r, 3)),
            str_at(r, 4)};
  }

  static long long int_at(const redisReply *r, std::size_t i) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements <= i || r->element[i]->type != REDIS_REPLY_INTEGER)
      throw StoreError(StoreErrc::corrupt, "the state store answered a script with an unexpected reply");
    return r->element[i]->integer;
  }
  static std::string str_at(const redisReply *r, std::size_t i) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements <= i) return {};
    const auto *e = r->element[i];
    return e->type == REDIS_REPLY_STRING ? std::string(e->str, e->len) : std::string();
  }

  Reply eval(const char *script, const std::string &id, std::vector<std::string> args) {
    std::vector<std::string> argv{"EVAL", script, "2", "weft:{" + id + "}:meta", "weft:{" + id + "}:state"};
    for (auto &a : args) argv.push_back(std::move(a));
    return command(argv);
  }

  // Under mu_: connects when needed (SELECT db), sends, and on any error
  // drops the connection and throws unavailable.
  Reply command(const std::vector<std::string> &argv) {
    std::lock_guard lk(mu_);
    connect();
    std::vector<const char *> p;
    std::vector<std::size_t> n;
    for (const auto &a : argv) {
      p.push_back(a.data());
      n.push_back(a.size());
    }
    Reply r(static_cast<redisReply *>(redisCommandArgv(c_, static_cast<int>(p.size()), p.data(), n.data())));
    if (!r) {
      const std::string why = c_->errstr[0] != '\0' ? c_->errstr : "the connection failed";
      drop();
      unavailable(why);
    }
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string why(r->str, r->len);
      // LOADING, MASTERDOWN, OOM...: Redis is there but cannot serve now.
      unavailable(why);
    }
    return r;
  }

  void connect() {
    if (c_ != nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < retry_at_) unavailable(last_error_ + " (retrying within 1 s)");
    retry_at_ = now + std::chrono::seconds(1);
    const timeval tv{0, 500'000};
    c_ = redisConnectWithTimeout(host_.c_str(), port_, tv);
    if (c_ == nullptr) unavailable("out of memory");
    if (c_->err != 0) {
      const std::string why = fmt::format("cannot connect to {}:{}: {}", host_, port_, c_->errstr);
      drop();
      unavailable(why);
    }
    const timeval io{2, 0};
    redisSetTimeout(c_, io);
    if (db_ != 0) {
      Reply r(static_cast<redisReply *>(redisCommand(c_, "SELECT %d", db_)));
      if (!r || r->type == REDIS_REPLY_ERROR) {
        const std::string why = r ? std::string(r->str, r->len) : std::string(c_->errstr);
        drop();
        unavailable(fmt::format("SELECT {}: {}", db_, why));
      }
    }
    retry_at_ = {};
  }

  void drop() {
    if (c_ != nullptr) redisFree(c_);
    c_ = nullptr;
  }

  std::string host_;
  int port_, db_;
  std::mutex mu_;
  redisContext *c_ = nullptr;
  std::chrono::steady_clock::time_point retry_at_{};
  std::string last_error_;
};

}  // namespace

std::unique_ptr<StateStore> open_redis_store(const std::string &host, int port, int db, std::uint64_t max_bytes) {
  return std::make_unique<RedisStore>(host, port, db, max_bytes);
}

}  // namespace weft_cli::serve
