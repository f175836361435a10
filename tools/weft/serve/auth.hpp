// weft serve: API keys on the wire. Every request but GET /health and the
// dashboard's page (GET /, /favicon.ico: static, no data) carries
// "Authorization: Bearer KEY" once keys are configured; without one, or
// with a key the server does not know, it is answered 401 invalid_api_key
// before any route runs. /metrics follows --metrics-key when given.
#pragma once

#include <httplib.h>

#include <optional>
#include <string>

#include "serve/api_error.hpp"
#include "serve/keys.hpp"
#include "serve/serve_options.hpp"

namespace weft_cli::serve {

struct ServeContext;

// 127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z) or "localhost".
bool is_loopback_host(const std::string &host);
// Without keys, a --host that is not loopback needs --allow-unauthenticated:
// throws weft::Error(invalid_argument) naming the host and the flags.
void check_exposure(const ServeOptions &o, const KeyRing &keys);
// The log line that says who may use the server.
std::string describe_access(const ServeOptions &o, const KeyRing &keys);

// The 401 for a missing or unknown key, in OpenAI's shape.
ApiError unauthorized(KeyVerdict v);
// The request's caller; throws that 401 (a key removed by a reload since the
// request was let in included).
Caller caller_of(const ServeContext &ctx, const httplib::Request &req);
// For the pre-routing handler: the 401 a request gets, if any.
std::optional<ApiError> refuse_unauthorized(const ServeContext &ctx, const httplib::Request &req);

}  // namespace weft_cli::serve
