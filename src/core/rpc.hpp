// ggml-rpc-server peers for Model::load (ModelParams::rpc). Internal.
#pragma once

#include <chrono>
#include <string>
#include <vector>

struct ggml_backend_device;

namespace weft::detail {

struct RpcEndpoint {
  std::string host;
  int port = 0;
};

// "host:port" (the last ':' splits, so "[::1]"-less IPv6 is not supported).
// Throws Errc::invalid_argument naming the endpoint.
RpcEndpoint parse_rpc_endpoint(const std::string &endpoint);

// Connects and exchanges ggml-rpc's HELLO within `timeout`, then hangs up.
// Throws Errc::io (unreachable, no answer), Errc::incompatible (another
// protocol version).
void check_rpc_peer(const std::string &endpoint, std::chrono::milliseconds timeout);

// The devices of every peer, each checked first, registered with ggml once
// per process. Throws as above, Errc::out_of_range (more than ggml allows),
// Errc::invalid_argument (a duplicate, or weft built without RPC).
std::vector<ggml_backend_device *> rpc_devices(const std::vector<std::string> &endpoints,
                                               std::chrono::milliseconds timeout);

}  // namespace weft::detail
