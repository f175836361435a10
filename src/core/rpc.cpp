// ModelParams::rpc: ggml-rpc-server peers as the devices of one model.
//
// ggml's RPC client aborts the process when it cannot reach a peer or the
// handshake fails (GGML_ABORT in its dispatcher), so every peer is checked
// here first, with weft's own connect and HELLO, and refused with a typed
// error before ggml ever sees it.
#include "core/rpc.hpp"

#include <ggml-backend.h>
#include <ggml-rpc.h>

#include <fmt/format.h>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <mutex>

#include "core/internal.hpp"

namespace weft::detail {
namespace {

constexpr std::uint8_t kCmdHello = 14;      // RPC_CMD_HELLO: "must be always 14" (ggml-rpc.cpp)
constexpr std::size_t kConnCapsSize = 24;   // RPC_CONN_CAPS_SIZE (transport.h)

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on fd until the deadline; false on timeout or error.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return (p.revents & events) != 0;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool send_all(int fd, const void *data, std::size_t n, Clock::time_point deadline) {
  const auto *p = static_cast<const std::uint8_t *>(data);
  while (n > 0) {
    if (!wait_for(fd, POLLOUT, deadline)) return false;
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void *data, std::size_t n, Clock::time_point deadline) {
  auto *p = static_cast<std::uint8_t *>(data);
  while (n > 0) {
    if (!wait_for(fd, POLLIN, deadline)) return false;
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// A non-blocking connect to the first address of host:port that answers.
int connect_to(const RpcEndpoint &e, Clock::time_point deadline, std::string &why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *res = nullptr;
  const std::string port = std::to_string(e.port);
  if (const int rc = ::getaddrinfo(e.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    why = fmt::format("cannot resolve host '{}': {}", e.host, ::gai_strerror(rc));
    return -1;
  }
  int out = -1;
  for (addrinfo *a = res; a != nullptr && out < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        err = ETIMEDOUT;
        if (wait_for(fd, POLLOUT, deadline)) {
          socklen_t len = sizeof(err);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
    }
    if (err == 0) {
      out = fd;
    } else {
      why = std::strerror(err);
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  return out;
}

}  // namespace

RpcEndpoint parse_rpc_endpoint(const std::string &endpoint) {
  const auto colon = endpoint.rfind(':');
  auto bad = [&](const char *why) {
    fail(Errc::invalid_argument, fmt::format("ModelParams.rpc endpoint '{}': {} (expected host:port, port 1..65535)",
                                             endpoint, why));
  };
  if (colon == std::string::npos) bad("no ':port'");
  RpcEndpoint e;
  e.host = endpoint.substr(0, colon);
  if (e.host.empty()) bad("no host");
  const std::string port = endpoint.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) bad("bad port");
  e.port = std::stoi(port);
  if (e.port < 1 || e.port > 65535) bad("port out of range");
  return e;
}

void check_rpc_peer(const std::string &endpoint, std::chrono::milliseconds timeout) {
  const RpcEndpoint e = parse_rpc_endpoint(endpoint);
  const auto deadline = Clock::now() + timeout;
  std::string why;
  Fd fd{connect_to(e, deadline, why)};
  if (fd.fd < 0) fail(Errc::io, fmt::format("RPC peer {} is unreachable: {}", endpoint, why));
  // HELLO as ggml's client sends it: | cmd | u64 size | caps |, no RDMA caps.
  std::uint8_t req[1 + 8 + kConnCapsSize] = {kCmdHello};
  const std::uint64_t size = kConnCapsSize;
  std::memcpy(req + 1, &size, sizeof(size));
  std::uint64_t rsp_size = 0;
  std::uint8_t rsp[4 + kConnCapsSize] = {};
  if (!send_all(fd.fd, req, sizeof(req), deadline) || !recv_all(fd.fd, &rsp_size, sizeof(rsp_size), deadline) ||
      rsp_size != sizeof(rsp) || !recv_all(fd.fd, rsp, sizeof(rsp), deadline)) {
    fail(Errc::io, fmt::format("RPC peer {} did not answer ggml-rpc's HELLO within {} ms (not a ggml-rpc-server, "
                               "or busy with another client)", endpoint, timeout.count()));
  }
  if (rsp[0] != RPC_PROTO_MAJOR_VERSION || rsp[1] > RPC_PROTO_MINOR_VERSION) {
    fail(Errc::incompatible, fmt::format("RPC peer {} speaks ggml-rpc protocol {}.{}.{}; this weft speaks {}.{}.{}",
                                         endpoint, rsp[0], rsp[1], rsp[2], RPC_PROTO_MAJOR_VERSION,
                                         RPC_PROTO_MINOR_VERSION, RPC_PROTO_PATCH_VERSION));
  }
}

std::vector<ggml_backend_dev_t> rpc_devices(const std::vector<std::string> &endpoints,
                                            std::chrono::milliseconds timeout) {
  if (endpoints.empty()) return {};
  if (endpoints.size() > GGML_RPC_MAX_SERVERS) {
    fail(Errc::out_of_range, fmt::format("ModelParams.rpc names {} peers; ggml-rpc allows at most {}",
                                         endpoints.size(), GGML_RPC_MAX_SERVERS));
  }
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    parse_rpc_endpoint(endpoints[i]);
    for (std::size_t j = 0; j < i; ++j) {
      if (endpoints[j] == endpoints[i]) {
        fail(Errc::invalid_argument, fmt::format("ModelParams.rpc names peer {} twice", endpoints[i]));
      }
    }
  }
  ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
  using AddServer = ggml_backend_reg_t (*)(const char *);
  auto add = rpc == nullptr ? nullptr
                            : reinterpret_cast<AddServer>(ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server"));
  if (add == nullptr) {
    fail(Errc::invalid_argument, "ModelParams.rpc is set but this weft was built without ggml's RPC backend "
                                 "(configure with -DWEFT_RPC=ON)");
  }
  std::vector<ggml_backend_dev_t> devices;
  // ggml keeps one registry entry per endpoint for the process's lifetime.
  static std::mutex mu;
  std::lock_guard lock(mu);
  for (const std::string &endpoint : endpoints) {
    check_rpc_peer(endpoint, timeout);
    ggml_backend_reg_t reg = add(endpoint.c_str());
    if (reg == nullptr || ggml_backend_reg_dev_count(reg) == 0) {
      fail(Errc::backend, fmt::format("RPC peer {} offers no devices", endpoint));
    }
    for (std::size_t d = 0; d < ggml_backend_reg_dev_count(reg); ++d) devices.push_back(ggml_backend_reg_dev_get(reg, d));
  }
  return devices;
}

}  // namespace weft::detail
