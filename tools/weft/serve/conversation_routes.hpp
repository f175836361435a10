// weft serve: weft's own resources — conversations that live across
// requests and fork, rewind, save and load:
//   GET    /v1/conversations               list
//   POST   /v1/conversations               create (optional prefix or messages)
//   GET    /v1/conversations/{id}          tokens, residency, KV cells, ...
//   DELETE /v1/conversations/{id}
//   POST   /v1/conversations/{id}/fork     a child sharing the KV prefix
//   POST   /v1/conversations/{id}/rewind   drop the last n tokens
//   POST   /v1/conversations/{id}/messages prompt + generate (stream or not)
//   GET    /v1/conversations/{id}/state    save: the state bytes
//   PUT    /v1/conversations/{id}/state    load: bytes from any server of this model
#pragma once

#include <httplib.h>

#include "serve/serve_context.hpp"

namespace weft_cli::serve {

void add_conversation_routes(httplib::Server &svr, ServeContext &ctx);

}  // namespace weft_cli::serve
