// weft serve: the command line's settings (docs/SERVE.md lists each).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weft/executor.hpp"

namespace weft_cli::serve {

struct ServeOptions {
  std::string model;              // GGUF path
  std::vector<std::string> rpc;   // ggml-rpc-server peers holding the layers (ModelParams::rpc); empty: local
  std::string alias;              // the model name clients send; default: the file's stem
  std::string host = "127.0.0.1";
  int port = 8080;                // 0: any free port (the chosen one is printed)
  std::uint32_t parallel = 8;     // sequence slots (n_seq_max)
  std::uint32_t ctx = 4096;       // KV cells shared by all conversations
  std::uint32_t batch = 512;      // most tokens per decode (n_batch)
  std::uint32_t ubatch = 0;       // micro-batch (n_ubatch); 0 = batch
  std::uint32_t step_tokens = 0;  // most tokens per step (StepBudget::max_tokens); 0 = batch
  std::uint32_t step_ms = 0;      // wall-clock target per step (StepBudget::max_time); 0 = none
  int threads = 0;                // decode threads; 0 = all
  weft::FlashAttention flash_attn = weft::FlashAttention::automatic;  // --flash-attn
  weft::KvType cache_type = weft::KvType::f16;                        // --cache-type
  // Speculative decoding, the default of every request (a request opts out
  // with "speculative": false): --speculative none|lookup|model, --draft-max.
  // Unset: model with --draft-model, else none (serve/speculative.hpp).
  std::optional<weft::Drafter> speculative;
  std::uint32_t draft_max = weft::SpeculativeParams{}.max_draft;
  bool draft_always = false;  // --draft-always: SpeculativeParams::adaptive = false
  // The draft model (ExecutorParams::draft_model): --draft-model PATH, its
  // context's cells (--draft-ctx; 0: --ctx, at most its n_ctx_train x
  // --parallel) and --draft-p-min (unset: DraftModelParams' 0.5).
  std::string draft_model;
  std::uint32_t draft_ctx = 0;
  std::optional<float> draft_p_min;
  std::uint64_t spill_ram_mb = 1024;
  std::string spill_dir;          // empty: no disk tier
  std::string chat_template;      // empty: the model's own, else chatml
  // Limits that protect the server.
  std::size_t max_body_bytes = 8u << 20;
  std::uint32_t max_tokens = 4096;        // most tokens one request may ask for
  std::uint32_t max_conversations = 256;  // live conversations, ephemeral ones included
  double request_timeout_s = 600;         // one generation, start to end
  int read_timeout_s = 10;                // a client silent this long mid-request is dropped
  int keep_alive_timeout_s = 5;           // an idle connection (before or between requests) is closed
  int http_threads = 32;                  // HTTP threads kept ready; more start with the connections
  std::uint32_t max_connections = 1024;   // connections open at once; more are answered 503
  double shutdown_grace_s = 5;            // SIGTERM: how long running generations may finish
  // Several nodes (docs/DEPLOYING.md): where conversations are written after
  // each turn and loaded from by any node. Empty: none, conversations stay
  // on the node that made them and nothing is written.
  std::string store;                        // dir:///path or redis://host:port/db
  std::string node_id;                      // this node's name in the store; empty: <hostname>-<pid>
  double lease_seconds = 30;                // how long a turn's advance lease lasts unrenewed
  std::uint64_t store_max_bytes = 64u << 20;  // larger states are refused (507 state_too_large)
  // Who may use the server (docs/SERVE.md, "API keys"). No keys: open, and
  // then only on a loopback --host unless allow_unauthenticated.
  std::vector<std::string> api_keys;    // --api-key
  std::vector<std::string> admin_keys;  // --admin-key: sees every key's conversations
  std::string api_key_file;             // --api-key-file, read again on SIGHUP
  std::string metrics_key;              // --metrics-key: /metrics takes this key (or an admin key)
  bool allow_unauthenticated = false;
  std::uint32_t key_max_conversations = 0;  // per key, on this node; 0: no limit
  std::uint32_t key_max_streams = 0;        // generations per key at once, on this node; 0: no limit
  std::uint64_t key_tokens_per_minute = 0;  // prompt + generated tokens per key in any 60 s, on this node; 0: no limit
  // Images and audio (docs/SERVE.md, "Images and audio"): the model's
  // projector; without one, requests with media are refused (400).
  std::string mmproj;                       // --mmproj: projector GGUF path; empty: text only
  bool allow_remote_media = false;          // fetch http:// image URLs (the server reaches out: off by default)
  std::uint32_t max_media = 8;              // images and clips in one request
  std::uint64_t max_media_bytes = 4u << 20; // one decoded image or WAV file
  // Embeddings (docs/SERVE.md, "Embeddings"): POST /v1/embeddings on the
  // executor's embedder (ExecutorParams::embedder). Neither of the first two
  // set: the route answers 404 embeddings_disabled.
  std::string embedding_model;      // --embedding-model: an embedding GGUF path
  bool embeddings = false;          // --embeddings: the chat model's own pooled states
  std::uint32_t embedding_ctx = 0;  // --embedding-ctx: most tokens of one input; 0: 512
  std::string pooling;              // --pooling: mean, cls, last or model; empty: model
};

}  // namespace weft_cli::serve
