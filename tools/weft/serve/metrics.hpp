// weft serve: GET /metrics (Prometheus text format 0.0.4) and GET /v1/status
// (the JSON the dashboard polls). docs/SERVE.md lists every metric.
#pragma once

#include <httplib.h>

#include <string>

#include "serve/serve_context.hpp"

namespace weft_cli::serve {

void add_metrics_routes(httplib::Server &svr, ServeContext &ctx);
// The Prometheus exposition text (for tests and /metrics).
std::string prometheus_text(ServeContext &ctx);

}  // namespace weft_cli::serve
