// weft serve: POST /v1/embeddings in OpenAI's shape, on the executor's
// embedder (ExecutorParams::embedder, weft/embedding.hpp).
//
// Texts are queued with Executor::embed (token inputs with embed_tokens),
// which never waits; the worker's steps decode them beside the
// conversations. The request's HTTP thread waits for its vectors in bounded
// slices (50 ms), and between them checks --timeout, shutdown and its
// client's connection: a client that goes away cancels its Embedding, so the
// texts not yet decoded are dropped. No other request waits on it.
#pragma once

#include <httplib.h>

#include <optional>

#include "serve/serve_context.hpp"
#include "weft/embedding.hpp"

namespace weft_cli::serve {

// Throws weft::Error(invalid_argument) for --embedding-ctx or --pooling
// without --embedding-model or --embeddings: before anything loads.
void check_embedding_options(const ServeOptions &o);

// The embedder the options ask for (--embedding-model, loaded here;
// --embeddings; --embedding-ctx; --pooling), recording the model that embeds
// and its name in `ctx`; nullopt when embeddings are off. Throws weft::Error
// (invalid_argument: check_embedding_options's, and --embedding-ctx above
// the model's n_ctx_train; what Model::load throws).
std::optional<weft::EmbedderParams> embedder_params(ServeContext &ctx);

// Before the worker starts: embeds one probe text on the executor's own
// steps, which checks that the embedder decodes, and learns how many special
// tokens (BOS, EOS, SEP) the embedding vocabulary adds to every text:
// usage.prompt_tokens counts them, as the embedder decodes them. Throws
// weft::Error(backend) when the probe fails.
void probe_embedder(ServeContext &ctx);

void add_embeddings_routes(httplib::Server &svr, ServeContext &ctx);

}  // namespace weft_cli::serve
