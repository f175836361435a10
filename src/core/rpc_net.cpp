// TCP helpers shared by the RPC peer check and the RPC relay.
#include "core/rpc_net.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace weft::detail {
namespace {

int remaining_ms(NetClock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - NetClock::now()).count();
  return left > 0 ? static_cast<int>(std::min<long long>(left, 1 << 30)) : 0;
}

}  // namespace

void set_cloexec(int fd) { ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC); }

int open_socket(int domain, int type, int protocol, bool nonblocking) {
#ifdef SOCK_CLOEXEC
  return ::socket(domain, type | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), protocol);
#else
  const int fd = ::socket(domain, type, protocol);
  if (fd < 0) return fd;
  set_cloexec(fd);
  if (nonblocking) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
#ifdef SO_NOSIGPIPE
  // No MSG_NOSIGNAL there: a send to a closed peer must not raise SIGPIPE.
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#endif
  return fd;
#endif
}

Fd &Fd::operator=(Fd &&o) noexcept {
  if (this != &o) {
    reset();
    fd = o.fd;
    o.fd = -1;
  }
  return *this;
}

Fd::~Fd() { reset(); }

void Fd::reset() {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

bool wait_for(int fd, short events, NetClock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return (p.revents & events) != 0;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool send_all(int fd, const void *data, std::size_t n, NetClock::time_point deadline) {
  const auto *p = static_cast<const std::uint8_t *>(data);
  while (n > 0) {
    if (!wait_for(fd, POLLOUT, deadline)) return false;
#ifdef MSG_NOSIGNAL
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
#else
    const ssize_t k = ::send(fd, p, n, 0);  // SO_NOSIGPIPE is set (open_socket)
#endif
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void *data, std::size_t n, NetClock::time_point deadline) {
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

int connect_to(const RpcEndpoint &e, NetClock::time_point deadline, std::string &why) {
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
    const int fd = open_socket(a->ai_family, a->ai_socktype, a->ai_protocol, /*nonblocking=*/true);
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

}  // namespace weft::detail
