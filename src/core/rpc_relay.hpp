// A relay between ggml's RPC client and one ggml-rpc-server peer. Internal.
//
// ggml-rpc's client sends every command from a dispatcher thread of its own
// and aborts the process (GGML_ABORT) when a send or receive fails, so a
// peer that dies mid-decode would take the game's process with it. weft
// points ggml at a loopback relay instead: the relay forwards each command
// to the real peer and its answer back, reading just enough of ggml-rpc's
// framing to know which commands are answered and with how many bytes. When
// the peer fails (closed, reset, silent past the reply timeout, a malformed
// answer), the relay hangs up on it and answers ggml itself from then on —
// zeros of the expected size, values that make allocations fail cleanly —
// and counts a failure, which the executor turns into Errc::backend on the
// conversations of that decode and every later one (rpc_model_failure()).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/rpc_net.hpp"

namespace weft::detail {

class RpcRelay {
 public:
  // Listens on 127.0.0.1 (an ephemeral port) for ggml; each connection gets
  // its own connection to `peer`. Throws Errc::io when it cannot listen.
  RpcRelay(std::string peer, std::chrono::milliseconds connect_timeout, std::chrono::milliseconds reply_timeout);
  // Stops accepting, hangs up every connection, joins every thread.
  ~RpcRelay();
  RpcRelay(const RpcRelay &) = delete;
  RpcRelay &operator=(const RpcRelay &) = delete;

  const std::string &peer() const { return peer_; }
  // What ggml is given: "127.0.0.1:<port>".
  const std::string &local_endpoint() const { return local_; }
  void set_timeouts(std::chrono::milliseconds connect_timeout, std::chrono::milliseconds reply_timeout);

  // Failures since this relay started; a model records the count it loaded at.
  std::uint64_t failures() const { return failures_.load(std::memory_order_acquire); }
  // Whether a connection ggml still holds has lost its peer (a model on it
  // is still loaded, and ggml would hand a new load the same connection).
  bool holds_failed_connection() const;
  // Whether ggml holds a connection whose peer still answers (a model over
  // this peer is loaded: a new load shares ggml's connection).
  bool holds_live_connection() const;
  std::string last_failure() const;

  // Bytes forwarded each way (for tests and `weft bench rpc`).
  std::uint64_t bytes_to_peer() const { return to_peer_.load(std::memory_order_relaxed); }
  std::uint64_t bytes_from_peer() const { return from_peer_.load(std::memory_order_relaxed); }

 public:
  struct Conn;

 private:
  void accept_loop();
  void serve(const std::shared_ptr<Conn> &conn);
  void fail_conn(Conn &conn, const std::string &why);

  std::string peer_;
  RpcEndpoint peer_ep_;
  std::string local_;
  Fd listen_;
  std::atomic<long long> connect_ms_;
  std::atomic<long long> reply_ms_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> failures_{0};
  std::atomic<std::uint64_t> to_peer_{0};
  std::atomic<std::uint64_t> from_peer_{0};
  mutable std::mutex mu_;
  std::string last_failure_;
  std::vector<std::shared_ptr<Conn>> conns_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

// The process's relay for a peer (one per endpoint, as ggml keeps one
// connection per endpoint), created on first use.
std::shared_ptr<RpcRelay> rpc_relay_for(const std::string &peer, std::chrono::milliseconds connect_timeout,
                                        std::chrono::milliseconds reply_timeout);

}  // namespace weft::detail
