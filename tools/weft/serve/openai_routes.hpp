// weft serve: the OpenAI-compatible endpoints — GET /v1/models,
// POST /v1/chat/completions and POST /v1/completions (streaming or not).
// Each request runs on a conversation of its own, removed when it ends.
#pragma once

#include <httplib.h>

#include "serve/serve_context.hpp"

namespace weft_cli::serve {

void add_openai_routes(httplib::Server &svr, ServeContext &ctx);

}  // namespace weft_cli::serve
