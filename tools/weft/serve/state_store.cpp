// weft serve: the state store's URL, and the dir:// store.
//
// dir:///path: per conversation id, `<id>.meta` (one line: version, holder,
// lease node, lease expiry in ms since the epoch, state size, and the
// owner's key id when it has one) and
// `<id>.<version>.state` (the bytes). Every change takes an exclusive
// flock(2) on `<id>.lock`, writes the new state file and then the record
// (each a temporary file, fsync, rename), and only then removes the older
// state file: a crash at any point leaves a record naming a state file that
// is there. Nodes sharing the directory must share flock (a local disk; NFS
// only with working locks) and roughly agree on the clock (leases).
#include "serve/state_store.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "weft/error.hpp"

namespace weft_cli::serve {

void StateStore::check_size(const std::string &id, std::size_t n) const {
  if (n > max_bytes_)
    throw StoreError(StoreErrc::too_large,
                     fmt::format("conversation '{}' has {} bytes of state; the store takes at most {} "
                                 "(--store-max-bytes)", id, n, max_bytes_));
}

namespace {

namespace fs = std::filesystem;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct DirRecord {
  std::uint64_t version = 0;
  std::string holder;
  std::string lease_node;
  std::int64_t lease_until = 0;
  std::uint64_t bytes = 0;
  std::string owner;
};

class DirStore final : public StateStore {
 public:
  DirStore(fs::path dir, std::uint64_t max_bytes) : StateStore(max_bytes), dir_(std::move(dir)) {
    std::error_code ec;
    fs::create_directories(dir_, ec);  // a failure shows at the first request, as unavailable
  }

  StoreRecord acquire(const std::string &id, const std::string &node, std::chrono::milliseconds lease) override {
    Locked l(*this, id, LOCK_EX);
    DirRecord r = read_record(id);
    if (r.version == 0) return {};
    check_lease(r, node, id);
    r.lease_node = node;
    r.lease_until = now_ms() + lease.count();
    write_record(id, r);
    return {r.version, r.holder, r.bytes, r.owner};
  }

  StoreRecord peek(const std::string &id) override {
    Locked l(*this, id, LOCK_SH);
    const DirRecord r = read_record(id);
    return {r.version, r.holder, r.bytes, r.owner};
  }

  std::optional<StoredState> load(const std::string &id) override {
    Locked l(*this, id, LOCK_SH);
    const DirRecord r = read_record(id);
    if (r.version == 0) return std::nullopt;
    StoredState s{r.version, {}, r.owner};
    const fs::path p = state_path(id, r.version);
    std::ifstream in(p, std::ios::binary);
    if (!in) unavailable(fmt::format("cannot read {}", p.string()));
    s.bytes.assign(std::istreambuf_iterator<char>(in), {});
    if (s.bytes.size() != r.bytes)
      throw StoreError(StoreErrc::corrupt, fmt::format("{} has {} bytes; its record says {}", p.string(),
                                                       s.bytes.size(), r.bytes));
    return s;
  }

  std::uint64_t commit(const std::string &id, const std::string &node, std::uint64_t expected,
                       const std::vector<std::uint8_t> &bytes, const std::string &owner) override {
    check_size(id, bytes.size());
    Locked l(*this, id, LOCK_EX);
    DirRecord r = read_record(id);
    if (r.version != expected)
      throw StoreError(StoreErrc::conflict,
                       expected == 0 ? fmt::format("conversation '{}' already exists in the store", id)
                                     : fmt::format("conversation '{}' is at version {} in the store, not {}: another "
                                                   "node advanced it", id, r.version, expected));
    check_lease(r, node, id);
    const std::uint64_t old = r.version;
    write_file(state_path(id, old + 1), bytes.data(), bytes.size());
    r.version = old + 1;
    r.holder = node;
    r.owner = owner;
    r.lease_node.clear();
    r.lease_until = 0;
    r.bytes = bytes.size();
    write_record(id, r);
    if (old > 0) {
      std::error_code ec;
      fs::remove(state_path(id, old), ec);
    }
    return r.version;
  }

  bool renew(const std::string &id, const std::string &node, std::chrono::milliseconds lease) override {
    Locked l(*this, id, LOCK_EX);
    DirRecord r = read_record(id);
    if (r.version == 0 || r.lease_node != node || r.lease_until <= now_ms()) return false;
    r.lease_until = now_ms() + lease.count();
    write_record(id, r);
    return true;
  }

  void release(const std::string &id, const std::string &node) override {
    Locked l(*this, id, LOCK_EX);
    DirRecord r = read_record(id);
    if (r.version == 0 || r.lease_node != node) return;
    r.lease_node.clear();
    r.lease_until = 0;
    write_record(id, r);
  }

  void remove(const std::string &id, const std::string &node) override {
    Locked l(*this, id, LOCK_EX);
    const DirRecord r = read_record(id);
    if (r.version == 0) return;
    check_lease(r, node, id);
    std::error_code ec;
    fs::remove(record_path(id), ec);
    if (ec) unavailable(fmt::format("cannot remove {}: {}", record_path(id).string(), ec.message()));
    fs::remove(state_path(id, r.version), ec);
  }

  void ping() override {
    std::error_code ec;
    if (!fs::is_directory(dir_, ec)) unavailable(fmt::format("{} is not a directory", dir_.string()));
    if (::access(dir_.c_str(), W_OK) != 0)
      unavailable(fmt::format("{} is not writable: {}", dir_.string(), std::strerror(errno)));
  }

  std::string describe() const override { return "dir://" + dir_.string(); }

 private:
  // The flock on <id>.lock, held for one operation; a mutex too, since
  // flock on separate descriptors of one process excludes them as well but
  // costs an open each time anyway.
  struct Locked {
    Locked(DirStore &s, const std::string &id, int how) {
      const fs::path p = s.dir_ / (id + ".lock");
      fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) unavailable(fmt::format("cannot open {}: {}", p.string(), std::strerror(errno)));
      while (::flock(fd, how) != 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        ::close(fd);
        unavailable(fmt::format("cannot lock {}: {}", p.string(), std::strerror(e)));
      }
    }
    ~Locked() {
      if (fd >= 0) ::close(fd);  // closing drops the lock
    }
    Locked(const Locked &) = delete;
    Locked &operator=(const Locked &) = delete;
    int fd = -1;
  };

  [[noreturn]] static void unavailable(const std::string &why) {
    throw StoreError(StoreErrc::unavailable, "the state store is unavailable: " + why);
  }

  fs::path record_path(const std::string &id) const { return dir_ / (id + ".meta"); }
  fs::path state_path(const std::string &id, std::uint64_t v) const {
    return dir_ / fmt::format("{}.{}.state", id, v);
  }

  static void check_lease(const DirRecord &r, const std::string &node, const std::string &id) {
    const std::int64_t left = r.lease_until - now_ms();
    if (!r.lease_node.empty() && r.lease_node != node && left > 0)
      throw StoreError(StoreErrc::leased,
                       fmt::format("conversation '{}' is being advanced by node '{}' (lease ends in {} ms)", id,
                                   r.lease_node, left),
                       r.lease_node, left);
  }

  DirRecord read_record(const std::string &id) const {
    const fs::path p = record_path(id);
    std::ifstream in(p);
    DirRecord r;
    if (!in) {
      std::error_code ec;
      if (fs::exists(p, ec) || !fs::is_directory(dir_, ec))
        unavailable(fmt::format("cannot read {}", p.string()));
      return r;  // never stored
    }
    std::string line;
    std::getline(in, line);
    std::istringstream ss(line);
    std::string holder, lease;
    if (!(ss >> r.version >> holder >> lease >> r.lease_until >> r.bytes))
      throw StoreError(StoreErrc::corrupt, fmt::format("{} is not a store record: '{}'", p.string(), line.substr(0, 200)));
    r.holder = holder == "-" ? "" : holder;
    r.lease_node = lease == "-" ? "" : lease;
    ss >> r.owner;  // absent in records written without keys
    return r;
  }

  void write_record(const std::string &id, const DirRecord &r) const {
    const std::string line = fmt::format("{} {} {} {} {}{}{}\n", r.version, r.holder.empty() ? "-" : r.holder,
                                         r.lease_node.empty() ? "-" : r.lease_node, r.lease_until, r.bytes,
                                         r.owner.empty() ? "" : " ", r.owner);
    write_file(record_path(id), line.data(), line.size());
  }

  // Temporary file, fsync, rename: readers see the old file or the new one.
  static void write_file(const fs::path &p, const void *data, std::size_t n) {
    const fs::path tmp = p.string() + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) unavailable(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(errno)));
    const auto *b = static_cast<const char *>(data);
    std::size_t done = 0;
    while (done < n) {
      const ssize_t w = ::write(fd, b + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int e = errno;
        ::close(fd);
        unavailable(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(e)));
      }
      done += static_cast<std::size_t>(w);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0)
      unavailable(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(errno)));
    if (::rename(tmp.c_str(), p.c_str()) != 0)
      unavailable(fmt::format("cannot rename {}: {}", tmp.string(), std::strerror(errno)));
  }

  fs::path dir_;
};

}  // namespace

std::unique_ptr<StateStore> open_dir_store(const std::string &path, std::uint64_t max_bytes) {
  return std::make_unique<DirStore>(fs::path(path), max_bytes);
}

#ifndef WEFT_SERVE_REDIS
std::unique_ptr<StateStore> open_redis_store(const std::string &, int, int, std::uint64_t) {
  throw weft::Error(weft::Errc::invalid_argument,
                    "this weft was built without hiredis, so without redis:// stores (install libhiredis-dev and "
                    "configure again)");
}
#endif

std::unique_ptr<StateStore> open_store(const std::string &url, std::uint64_t max_bytes) {
  auto bad = [&](const std::string &why) {
    return weft::Error(weft::Errc::invalid_argument,
                       fmt::format("--store '{}': {} (dir:///path or redis://host[:port][/db])", url, why));
  };
  if (url.rfind("dir://", 0) == 0) {
    const std::string path = url.substr(6);
    if (path.empty() || path[0] != '/') throw bad("a dir:// store needs an absolute path, as dir:///var/lib/weft");
    return open_dir_store(path, max_bytes);
  }
  if (url.rfind("redis://", 0) == 0) {
    std::string rest = url.substr(8);
    int db = 0;
    if (const auto slash = rest.find('/'); slash != std::string::npos) {
      const std::string d = rest.substr(slash + 1);
      rest = rest.substr(0, slash);
      if (!d.empty()) {
        try {
          std::size_t used = 0;
          db = std::stoi(d, &used);
          if (used != d.size() || db < 0) throw std::invalid_argument(d);
        } catch (const std::exception &) {
          throw bad(fmt::format("the database '{}' is not a number", d));
        }
      }
    }
    int port = 6379;
    if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
      const std::string p = rest.substr(colon + 1);
      rest = rest.substr(0, colon);
      try {
        std::size_t used = 0;
        port = std::stoi(p, &used);
        if (used != p.size() || port < 1 || port > 65535) throw std::invalid_argument(p);
      } catch (const std::exception &) {
        throw bad(fmt::format("the port '{}' is not a port", p));
      }
    }
    if (rest.empty()) throw bad("no host");
    return open_redis_store(rest, port, db, max_bytes);
  }
  throw bad("unknown scheme");
}

}  // namespace weft_cli::serve
