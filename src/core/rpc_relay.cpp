// The RPC relay: ggml-rpc's framing read just far enough to answer for a
// dead peer. Protocol facts below are those of ggml-rpc 6.0 (ggml-rpc.cpp in
// the pinned llama.cpp); the static_assert stops a pin bump that changes them.
#include "core/rpc_relay.hpp"

#include <ggml-rpc.h>
#include <ggml.h>

#include <fmt/format.h>

#include <arpa/inet.h>
#ifdef __linux__
#include <dirent.h>
#endif
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/internal.hpp"
#include "core/rpc.hpp"

namespace weft::detail {

static_assert(RPC_PROTO_MAJOR_VERSION == 6 && RPC_PROTO_MINOR_VERSION == 0,
              "ggml-rpc's protocol changed: check the relay's command table against ggml-rpc.cpp");

namespace {

// rpc_cmd in ggml-rpc.cpp.
enum Cmd : std::uint8_t {
  kAllocBuffer = 0, kGetAlignment, kGetMaxSize, kBufferGetBase, kFreeBuffer, kBufferClear, kSetTensor,
  kSetTensorHash, kGetTensor, kCopyTensor, kGraphCompute, kGetDeviceMemory, kInitTensor, kGetAllocSize,
  kHello, kDeviceCount, kGraphRecompute, kMemsetTensor, kCmdCount = 19,
};

// rpc_tensor (packed): id u64, type u32, buffer u64, ne[4] u32, nb[4] u32,
// op u32, op_params, flags i32, src[], view_src, view_offs, data u64, name, use_count.
constexpr std::size_t kTensorTypeAt = 8;
constexpr std::size_t kTensorNeAt = 20;
constexpr std::size_t kTensorNbAt = 36;
constexpr std::size_t kRpcTensorSize = 8 + 4 + 8 + 4 * GGML_MAX_DIMS * 2 + 4 + GGML_MAX_OP_PARAMS + 4 +
                                       8 * GGML_MAX_SRC + 8 * 3 + GGML_MAX_NAME + 4;
constexpr std::size_t kConnCapsSize = 24;
constexpr std::size_t kKeep = 4096;       // requests up to this size are read whole (all but tensor data and graphs)
constexpr std::size_t kChunk = 1 << 20;   // tensor data moves in chunks of this size

const char *cmd_name(std::uint8_t c) {
  static const char *names[] = {"ALLOC_BUFFER", "GET_ALIGNMENT", "GET_MAX_SIZE", "BUFFER_GET_BASE", "FREE_BUFFER",
                                "BUFFER_CLEAR", "SET_TENSOR", "SET_TENSOR_HASH", "GET_TENSOR", "COPY_TENSOR",
                                "GRAPH_COMPUTE", "GET_DEVICE_MEMORY", "INIT_TENSOR", "GET_ALLOC_SIZE", "HELLO",
                                "DEVICE_COUNT", "GRAPH_RECOMPUTE", "MEMSET_TENSOR", "NONE"};
  return c < std::size(names) ? names[c] : "?";
}

template <typename T>
T read_at(const std::vector<std::uint8_t> &b, std::size_t at) {
  T v{};
  if (at + sizeof(T) <= b.size()) std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

template <typename T>
void write_at(std::vector<std::uint8_t> &b, std::size_t at, T v) {
  if (at + sizeof(T) <= b.size()) std::memcpy(b.data() + at, &v, sizeof(T));
}

// The answer's size, or -1 for a command that has none.
long long reply_size(std::uint8_t cmd, const std::vector<std::uint8_t> &req) {
  switch (cmd) {
    case kAllocBuffer: return 16;
    case kGetAlignment: case kGetMaxSize: case kBufferGetBase: case kGetAllocSize: return 8;
    case kSetTensorHash: case kCopyTensor: return 1;
    case kGetTensor: return static_cast<long long>(read_at<std::uint64_t>(req, kRpcTensorSize + 8));
    case kGetDeviceMemory: return 16;
    case kHello: return 4 + kConnCapsSize;
    case kDeviceCount: return 4;
    default: return -1;
  }
}

// What a dead peer "answers": allocations fail (null buffer, no devices),
// reads give zeros, sizes stay sane so nothing in ggml divides by zero.
void fake_reply(std::uint8_t cmd, const std::vector<std::uint8_t> &req, std::vector<std::uint8_t> &out) {
  std::fill(out.begin(), out.end(), 0);
  switch (cmd) {
    case kGetAlignment: write_at<std::uint64_t>(out, 0, 32); break;
    case kGetMaxSize: write_at<std::uint64_t>(out, 0, std::uint64_t{1} << 40); break;
    case kBufferGetBase: write_at<std::uint64_t>(out, 0, 4096); break;  // ggml asserts a non-null base
    case kGetDeviceMemory:
      write_at<std::uint64_t>(out, 0, std::uint64_t{1} << 30);
      write_at<std::uint64_t>(out, 8, std::uint64_t{1} << 30);
      break;
    case kGetAllocSize: {
      ggml_tensor t{};
      t.type = static_cast<ggml_type>(read_at<std::uint32_t>(req, 4 + kTensorTypeAt));
      if (t.type >= GGML_TYPE_COUNT) t.type = GGML_TYPE_F32;
      for (int i = 0; i < GGML_MAX_DIMS; ++i) {
        t.ne[i] = read_at<std::uint32_t>(req, 4 + kTensorNeAt + 4 * i);
        t.nb[i] = read_at<std::uint32_t>(req, 4 + kTensorNbAt + 4 * i);
      }
      write_at<std::uint64_t>(out, 0, ggml_nbytes(&t));
      break;
    }
    case kHello:
      out[0] = RPC_PROTO_MAJOR_VERSION;
      out[1] = RPC_PROTO_MINOR_VERSION;
      out[2] = RPC_PROTO_PATCH_VERSION;
      break;
    default: break;  // null buffer, no devices, "not cached", "not copied", zeros
  }
}

constexpr auto kForever = NetClock::time_point::max();

}  // namespace

struct RpcRelay::Conn {
  Fd client;
  Fd upstream;
  std::atomic<bool> lost{false};         // the peer failed; set by this connection's thread only
  std::atomic<bool> open{true};
};

namespace {

// ggml-rpc opens its sockets without close-on-exec: a child process started
// while a model is loaded (a game's helper, a test's peer) would keep the
// connection open after the model is freed. Its end of a connection the
// relay just accepted is found among this process's descriptors and marked.
void mark_if_ggml_end(int fd, const sockaddr_in &ggml_end) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0 || a.sin_family != AF_INET) return;
  if (a.sin_port == ggml_end.sin_port && a.sin_addr.s_addr == ggml_end.sin_addr.s_addr) {
    ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  }
}

void mark_cloexec(const sockaddr_in &ggml_end) {
#ifdef __linux__
  DIR *d = ::opendir("/proc/self/fd");
  if (d == nullptr) return;
  while (const dirent *e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == ::dirfd(d)) continue;
    mark_if_ggml_end(fd, ggml_end);
  }
  ::closedir(d);
#else
  // No /proc (macOS, iOS): every descriptor number up to a bound.
  const long max = std::min<long>(::sysconf(_SC_OPEN_MAX), 4096);
  for (int fd = 3; fd < max; ++fd) mark_if_ggml_end(fd, ggml_end);
#endif
}

bool held(const RpcRelay::Conn &c) {
  if (!c.open.load()) return false;
#ifdef POLLRDHUP
  pollfd p{c.client.fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0;
#else
  // No POLLRDHUP (macOS, iOS): readable with nothing to peek means hung up.
  pollfd p{c.client.fd, POLLIN, 0};
  if (::poll(&p, 1, 0) == 0) return true;
  if ((p.revents & (POLLHUP | POLLERR)) != 0) return false;
  char b = 0;
  return ::recv(c.client.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
#endif
}

}  // namespace

RpcRelay::RpcRelay(std::string peer, std::chrono::milliseconds connect_timeout, std::chrono::milliseconds reply_timeout)
    : peer_(std::move(peer)), connect_ms_(connect_timeout.count()), reply_ms_(reply_timeout.count()) {
  peer_ep_ = parse_rpc_endpoint(peer_);
  listen_ = Fd(open_socket(AF_INET, SOCK_STREAM, 0, /*nonblocking=*/false));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (listen_.fd < 0 || ::bind(listen_.fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 ||
      ::listen(listen_.fd, 4) != 0 || ::getsockname(listen_.fd, reinterpret_cast<sockaddr *>(&a), &len) != 0) {
    fail(Errc::io, fmt::format("cannot listen on loopback for the relay to RPC peer {}: {}", peer_, std::strerror(errno)));
  }
  local_ = fmt::format("127.0.0.1:{}", ntohs(a.sin_port));
  acceptor_ = std::thread([this] { accept_loop(); });
}

RpcRelay::~RpcRelay() {
  stop_.store(true);
  ::shutdown(listen_.fd, SHUT_RDWR);
  {
    std::lock_guard lock(mu_);
    for (auto &c : conns_) {
      ::shutdown(c->client.fd, SHUT_RDWR);
      if (c->upstream.fd >= 0) ::shutdown(c->upstream.fd, SHUT_RDWR);
    }
  }
  if (acceptor_.joinable()) acceptor_.join();
  for (auto &t : threads_) t.join();  // the acceptor is gone: nobody adds threads
}

void RpcRelay::set_timeouts(std::chrono::milliseconds connect_timeout, std::chrono::milliseconds reply_timeout) {
  connect_ms_.store(connect_timeout.count());
  reply_ms_.store(reply_timeout.count());
}

namespace {

// Open, and not yet hung up by ggml (a model freed a moment ago closes its
// connection before the relay's thread notices).
bool held(const RpcRelay::Conn &c);

}  // namespace

bool RpcRelay::holds_failed_connection() const {
  std::lock_guard lock(mu_);
  return std::any_of(conns_.begin(), conns_.end(), [](const auto &c) { return c->lost.load() && held(*c); });
}

bool RpcRelay::holds_live_connection() const {
  std::lock_guard lock(mu_);
  return std::any_of(conns_.begin(), conns_.end(), [](const auto &c) { return !c->lost.load() && held(*c); });
}

std::string RpcRelay::last_failure() const {
  std::lock_guard lock(mu_);
  return last_failure_;
}

void RpcRelay::accept_loop() {
  while (!stop_.load()) {
    sockaddr_in from{};
    socklen_t from_len = sizeof(from);
#ifdef __linux__
    const int fd = ::accept4(listen_.fd, reinterpret_cast<sockaddr *>(&from), &from_len, SOCK_CLOEXEC);
#else
    const int fd = ::accept(listen_.fd, reinterpret_cast<sockaddr *>(&from), &from_len);
    if (fd >= 0) set_cloexec(fd);
#endif
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (stop_.load()) return;
      ::poll(nullptr, 0, 50);  // out of descriptors: do not spin
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    mark_cloexec(from);
    auto conn = std::make_shared<Conn>();
    conn->client = Fd(fd);
    std::lock_guard lock(mu_);
    if (stop_.load()) return;
    // Connections ggml closed are forgotten here, not by their own threads.
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto &c) { return !c->open.load(); }),
                 conns_.end());
    conns_.push_back(conn);
    threads_.emplace_back([this, conn] { serve(conn); });
  }
}

void RpcRelay::fail_conn(Conn &conn, const std::string &why) {
  if (conn.lost.load()) return;
  conn.upstream.reset();
  {
    std::lock_guard lock(mu_);
    last_failure_ = fmt::format("RPC peer {} failed: {}", peer_, why);
  }
  conn.lost.store(true);  // reason and flag before the count: a model that sees the count sees both
  failures_.fetch_add(1, std::memory_order_acq_rel);
  log_warning(fmt::format("RPC peer {} failed ({}); the model on it stops decoding (Errc::backend)", peer_, why));
}

void RpcRelay::serve(const std::shared_ptr<Conn> &cp) {
  Conn &conn = *cp;
  const int client = conn.client.fd;
  auto reply_deadline = [&] { return NetClock::now() + std::chrono::milliseconds(reply_ms_.load()); };
  {
    std::string why;
    const int fd = connect_to(peer_ep_, NetClock::now() + std::chrono::milliseconds(connect_ms_.load()), why);
    if (fd < 0) {
      fail_conn(conn, "unreachable: " + why);
    } else {
      conn.upstream = Fd(fd);
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
  }
  auto to_peer = [&](const void *p, std::size_t n, const char *what) {
    if (conn.lost.load()) return;
    if (!send_all(conn.upstream.fd, p, n, reply_deadline())) {
      fail_conn(conn, fmt::format("could not send {} (connection closed, or not read for {} ms)", what,
                                  reply_ms_.load()));
    } else {
      to_peer_.fetch_add(n, std::memory_order_relaxed);
    }
  };
  std::vector<std::uint8_t> req, rsp, chunk;
  while (!stop_.load()) {
    std::uint8_t cmd = 0;
    std::uint64_t size = 0;
    if (!recv_all(client, &cmd, 1, kForever) || !recv_all(client, &size, 8, kForever)) break;  // ggml hung up
    if (cmd >= kCmdCount) break;  // not ggml-rpc 6.0: nothing sane to answer
    std::uint8_t head[9] = {cmd};
    std::memcpy(head + 1, &size, 8);
    to_peer(head, sizeof(head), cmd_name(cmd));
    req.clear();
    if (size <= kKeep) {
      req.resize(size);
      if (!recv_all(client, req.data(), size, kForever)) break;
      to_peer(req.data(), size, cmd_name(cmd));
    } else {
      chunk.resize(kChunk);
      for (std::uint64_t left = size; left > 0;) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, kChunk));
        if (!recv_all(client, chunk.data(), n, kForever)) return;
        to_peer(chunk.data(), n, cmd_name(cmd));
        left -= n;
      }
    }
    const long long want = reply_size(cmd, req);
    if (want < 0) continue;
    rsp.assign(static_cast<std::size_t>(want), 0);
    if (!conn.lost.load()) {
      std::uint64_t got = 0;
      if (!recv_all(conn.upstream.fd, &got, 8, reply_deadline())) {
        fail_conn(conn, fmt::format("no answer to {} (connection closed, or silent for {} ms)", cmd_name(cmd),
                                    reply_ms_.load()));
      } else if (got != static_cast<std::uint64_t>(want)) {
        fail_conn(conn, fmt::format("answered {} with {} bytes, expected {}", cmd_name(cmd), got, want));
      } else {
        for (std::size_t at = 0; at < rsp.size() && !conn.lost.load();) {
          const std::size_t n = std::min(rsp.size() - at, kChunk);
          if (!recv_all(conn.upstream.fd, rsp.data() + at, n, reply_deadline())) {
            fail_conn(conn, fmt::format("answer to {} cut short", cmd_name(cmd)));
          }
          at += n;
        }
        if (!conn.lost.load()) from_peer_.fetch_add(8 + rsp.size(), std::memory_order_relaxed);
      }
    }
    if (conn.lost.load()) fake_reply(cmd, req, rsp);
    const std::uint64_t n = rsp.size();
    if (!send_all(client, &n, 8, kForever) || !send_all(client, rsp.data(), rsp.size(), kForever)) break;
  }
  conn.upstream.reset();
  conn.open.store(false);
}

std::shared_ptr<RpcRelay> rpc_relay_for(const std::string &peer, std::chrono::milliseconds connect_timeout,
                                        std::chrono::milliseconds reply_timeout) {
  // Process lifetime, like ggml's own registry of endpoints; destroyed (and
  // every relay thread joined) at exit.
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<RpcRelay>> relays;
  std::lock_guard lock(mu);
  auto &r = relays[peer];
  if (!r) {
    r = std::make_shared<RpcRelay>(peer, connect_timeout, reply_timeout);
  } else {
    r->set_timeouts(connect_timeout, reply_timeout);
  }
  return r;
}

}  // namespace weft::detail
