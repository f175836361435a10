// Blocking-with-deadline TCP helpers for the RPC peer check and relay. Internal.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace weft::detail {

struct RpcEndpoint {
  std::string host;
  int port = 0;
};

using NetClock = std::chrono::steady_clock;

// Closes the descriptor it holds.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  Fd(Fd &&o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd &operator=(Fd &&o) noexcept;
  ~Fd();
  void reset();
};

// Waits for `events` on fd until the deadline; false on timeout or error.
bool wait_for(int fd, short events, NetClock::time_point deadline);

// All of `n` bytes, each wait bounded by the deadline; false on timeout,
// error or a closed peer.
bool send_all(int fd, const void *data, std::size_t n, NetClock::time_point deadline);
bool recv_all(int fd, void *data, std::size_t n, NetClock::time_point deadline);

// socket() close-on-exec (and non-blocking if asked): in one call where the
// system has SOCK_CLOEXEC (Linux, Android, the BSDs), with fcntl elsewhere
// (macOS, iOS). -1 and errno on failure.
int open_socket(int domain, int type, int protocol, bool nonblocking);
// Marks a descriptor close-on-exec.
void set_cloexec(int fd);

// A non-blocking connect to the first address of host:port that answers
// before the deadline; -1 with `why` set otherwise. The socket stays
// non-blocking and close-on-exec.
int connect_to(const RpcEndpoint &e, NetClock::time_point deadline, std::string &why);

}  // namespace weft::detail
