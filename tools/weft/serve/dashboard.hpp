// weft serve: the live dashboard at GET / — one embedded page (HTML, CSS,
// JS; nothing fetched from elsewhere) that polls GET /v1/status twice a
// second: the conversations with residency, KV cells, queued tokens and
// tokens/s, the cache's use, and step times over the last minute. With API
// keys the page itself is open and /v1/status needs a key: opened as
// /#key=KEY, the page keeps it in the tab's sessionStorage.
#pragma once

#include <httplib.h>

namespace weft_cli::serve {

void add_dashboard_routes(httplib::Server &svr);

}  // namespace weft_cli::serve
