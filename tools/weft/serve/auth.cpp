// weft serve: API keys on the wire.
#include "serve/auth.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>

#include "serve/serve_context.hpp"

namespace weft_cli::serve {

bool is_loopback_host(const std::string &host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;  // a name or a wildcard: may be reached from elsewhere
}

void check_exposure(const ServeOptions &o, const KeyRing &keys) {
  if (keys.enabled() || o.allow_unauthenticated || is_loopback_host(o.host)) return;
  throw weft::Error(weft::Errc::invalid_argument,
                    fmt::format("--host {} is not a loopback address and no API key is configured: give --api-key "
                                "or --api-key-file, or pass --allow-unauthenticated to let anyone who reaches the "
                                "port use every conversation", o.host.substr(0, 100)));
}

std::string describe_access(const ServeOptions &o, const KeyRing &keys) {
  std::string metrics = keys.has_metrics_key() ? "; /metrics takes --metrics-key or an admin key" : "";
  if (!keys.enabled())
    return fmt::format("no API keys: unauthenticated, anyone who reaches {} may use every conversation{}", o.host,
                       metrics);
  std::string file = keys.has_key_file() ? fmt::format(" (--api-key-file {}, read again on SIGHUP)", keys.key_file()) : "";
  return fmt::format("API keys: {} accepted, {} of them admin{}{}", keys.size(), keys.admins(), file, metrics);
}

ApiError unauthorized(KeyVerdict v) {
  // OpenAI's own 401s: type invalid_request_error, code invalid_api_key.
  return ApiError(401, "invalid_request_error", "invalid_api_key",
                  v == KeyVerdict::missing
                      ? "You didn't provide an API key. You need to provide your API key in an Authorization "
                        "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
                      : "Incorrect API key provided.");
}

Caller caller_of(const ServeContext &ctx, const httplib::Request &req) {
  const KeyCheck k = ctx.keys->check(req.get_header_value("Authorization"));
  if (k.verdict != KeyVerdict::ok) throw unauthorized(k.verdict);
  return k.caller;
}

std::optional<ApiError> refuse_unauthorized(const ServeContext &ctx, const httplib::Request &req) {
  const std::string &p = req.path;
  if (p == "/health" || ((p == "/" || p == "/favicon.ico") && req.method == "GET")) return std::nullopt;
  const std::string h = req.get_header_value("Authorization");
  const KeyCheck k = p == "/metrics" ? ctx.keys->check_metrics(h) : ctx.keys->check(h);
  if (k.verdict == KeyVerdict::ok) return std::nullopt;
  return unauthorized(k.verdict);
}

}  // namespace weft_cli::serve
