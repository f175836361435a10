// ggml-rpc-server peers for Model::load (ModelParams::rpc). Internal.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rpc_net.hpp"

struct ggml_backend_device;

namespace weft::detail {


// "host:port" (the last ':' splits, so "[::1]"-less IPv6 is not supported).
// Throws Errc::invalid_argument naming the endpoint.
RpcEndpoint parse_rpc_endpoint(const std::string &endpoint);

// Connects and exchanges ggml-rpc's HELLO within `timeout`, then hangs up.
// Throws Errc::io (unreachable, no answer), Errc::incompatible (another
// protocol version).
void check_rpc_peer(const std::string &endpoint, std::chrono::milliseconds timeout);

class RpcRelay;

// A peer's relay and how many failures it had counted when a model loaded
// over it: more since means the model's peer failed.
struct RpcWatch {
  std::shared_ptr<RpcRelay> relay;
  std::uint64_t failures_at_load = 0;
};

struct RpcPeers {
  std::vector<ggml_backend_device *> devices;
  std::vector<RpcWatch> watches;
};

// The devices of every peer, each checked first and reached through its
// relay (core/rpc_relay.hpp), registered with ggml once per process. Throws
// as above, Errc::out_of_range (more than ggml allows), Errc::invalid_argument
// (a duplicate, or weft built without RPC), Errc::backend (a model on a peer
// that failed is still loaded).
// Without `relay`, ggml gets the peers themselves (no watches).
RpcPeers rpc_devices(const std::vector<std::string> &endpoints, std::chrono::milliseconds connect_timeout,
                     std::chrono::milliseconds reply_timeout, bool relay = true);

// Why a model over these peers can no longer decode; empty while it can.
std::string rpc_failure(const std::vector<RpcWatch> &watches);

}  // namespace weft::detail
