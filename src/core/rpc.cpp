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


#include <chrono>
#include <cstring>
#include <mutex>

#include "core/internal.hpp"
#ifndef _WIN32
#include "core/rpc_relay.hpp"
#endif

namespace weft::detail {
namespace {

constexpr std::uint8_t kCmdHello = 14;      // RPC_CMD_HELLO: "must be always 14" (ggml-rpc.cpp)
constexpr std::size_t kConnCapsSize = 24;   // RPC_CONN_CAPS_SIZE (transport.h)
#ifdef _WIN32
// POSIX sockets only (core/rpc_net.cpp, rpc_relay.cpp are not built there).
constexpr const char *kNoRpc = "ModelParams.rpc is set but weft was built without RPC (not supported on Windows)";
#endif

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
#ifdef _WIN32
  (void)e;
  (void)timeout;
  fail(Errc::invalid_argument, kNoRpc);
#else
  const auto deadline = NetClock::now() + timeout;
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
#endif
}

RpcPeers rpc_devices(const std::vector<std::string> &endpoints, std::chrono::milliseconds connect_timeout,
                     std::chrono::milliseconds reply_timeout, bool relay_on) {
  RpcPeers out;
  if (endpoints.empty()) return out;
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
#ifdef _WIN32
  (void)connect_timeout;
  (void)reply_timeout;
  (void)relay_on;
  fail(Errc::invalid_argument, kNoRpc);
#else
  ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
  using AddServer = ggml_backend_reg_t (*)(const char *);
  auto add = rpc == nullptr ? nullptr
                            : reinterpret_cast<AddServer>(ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server"));
  if (add == nullptr) {
    fail(Errc::invalid_argument, "ModelParams.rpc is set but this weft was built without ggml's RPC backend "
                                 "(configure with -DWEFT_RPC=ON)");
  }
  // ggml keeps one registry entry per endpoint for the process's lifetime.
  static std::mutex mu;
  std::lock_guard lock(mu);
  for (const std::string &endpoint : endpoints) {
    auto take_devices = [&](ggml_backend_reg_t reg) {
      if (reg == nullptr || ggml_backend_reg_dev_count(reg) == 0) {
        fail(Errc::backend, fmt::format("RPC peer {} offers no devices", endpoint));
      }
      for (std::size_t d = 0; d < ggml_backend_reg_dev_count(reg); ++d) out.devices.push_back(ggml_backend_reg_dev_get(reg, d));
    };
    if (!relay_on) {
      check_rpc_peer(endpoint, connect_timeout);
      take_devices(add(endpoint.c_str()));
      continue;
    }
    auto relay = rpc_relay_for(endpoint, connect_timeout, reply_timeout);
    // A peer serves one connection at a time: one a loaded model holds
    // through the relay is shared by this load, not checked again.
    if (!relay->holds_live_connection()) check_rpc_peer(endpoint, connect_timeout);
    if (relay->holds_failed_connection()) {
      // ggml would hand this load the failed model's connection.
      fail(Errc::backend, fmt::format("{}; a model loaded over it is still loaded: free it and its executors "
                                      "before loading over {} again", relay->last_failure(), endpoint));
    }
    const std::uint64_t at = relay->failures();
    ggml_backend_reg_t reg = add(relay->local_endpoint().c_str());
    if (relay->failures() > at) fail(Errc::io, relay->last_failure());
    take_devices(reg);
    out.watches.push_back({relay, at});
  }
  return out;
#endif
}

std::string rpc_failure(const std::vector<RpcWatch> &watches) {
#ifdef _WIN32
  (void)watches;  // never any: rpc_devices refuses every peer there
#else
  for (const RpcWatch &w : watches) {
    if (w.relay->failures() > w.failures_at_load) return w.relay->last_failure();
  }
#endif
  return {};
}

}  // namespace weft::detail
