// weft serve: the command — options, signals, and the serve loop.
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>

#include <pthread.h>

#include "attention_cli.hpp"
#include "commands.hpp"
#include "serve/auth.hpp"
#include "serve/server.hpp"
#include "serve/speculative.hpp"
#include "weft/weft.hpp"

namespace weft_cli {

namespace {

// SIGHUP: the key file again; a file that cannot be read, or holds a bad
// key, leaves the keys as they were.
void reload_keys(serve::KeyRing &keys) {
  if (!keys.has_key_file()) {
    fmt::print("weft serve: SIGHUP: no --api-key-file to read again\n");
  } else {
    try {
      const auto n = keys.reload();
      fmt::print("weft serve: SIGHUP: {} keys accepted ({} admin) after reading {}\n", n, keys.admins(),
                 keys.key_file());
    } catch (const weft::Error &e) {
      fmt::print("weft serve: SIGHUP: keeping the keys as they were: {}\n", e.what());
    }
  }
  std::fflush(stdout);
}

}  // namespace

void add_serve(CLI::App &app) {
  auto o = std::make_shared<serve::ServeOptions>();
  auto *cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with conversations as resources (docs/SERVE.md)");
  cmd->add_option("-m,--model", o->model, "GGUF model path")->required();
  cmd->add_option("--rpc", o->rpc, "ggml-rpc-server peers host:port,... that hold the model's layers "
                                   "(docs/DEPLOYING.md, \"RPC\")")
      ->delimiter(',');
  cmd->add_option("--alias", o->alias, "Model name clients send (default: the file's stem)");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port; 0 picks a free one (printed)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", o->parallel, "Sequence slots: conversations resident at once")->capture_default_str();
  cmd->add_option("-c,--ctx", o->ctx, "KV cells shared by all conversations")->capture_default_str();
  cmd->add_option("-b,--batch", o->batch, "Most tokens per decode (n_batch)")->capture_default_str();
  cmd->add_option("--ubatch", o->ubatch, "Micro-batch size (n_ubatch; 0: --batch)")->capture_default_str();
  cmd->add_option("--step-tokens", o->step_tokens, "Most tokens per step, the step budget (0: --batch)")
      ->capture_default_str();
  cmd->add_option("--step-ms", o->step_ms,
                  "Wall-clock target per step (0: none): prompts are taken in chunks that keep steps this short, "
                  "as the cost model predicts, so generating conversations wait less")
      ->check(CLI::Range(0u, 60000u))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Decode threads (0: all)")->capture_default_str();
  add_flash_attn_option(*cmd, o->flash_attn);
  add_cache_type_option(*cmd, o->cache_type);
  cmd->add_option("--speculative", o->speculative,
                  "Speculative decoding for every request (one opts out with \"speculative\": false): none, "
                  "lookup (drafts copied from the conversation's own tokens), or model (drafts from --draft-model); "
                  "verified in the step's decode, the same tokens as without")
      ->transform(CLI::CheckedTransformer(std::map<std::string, weft::Drafter>{{"none", weft::Drafter::none},
                                                                               {"lookup", weft::Drafter::lookup},
                                                                               {"model", weft::Drafter::model}},
                                          CLI::ignore_case))
      ->default_str("none, or model with --draft-model");
  cmd->add_option("--draft-max", o->draft_max, "Most draft tokens one step verifies per conversation (--speculative)")
      ->check(CLI::Range(1u, weft::SpeculativeParams::kMaxDraft))
      ->capture_default_str();
  cmd->add_flag("--draft-always", o->draft_always,
                "Verify every draft token the step's budget and cells allow, not only as many as the cost model "
                "predicts to raise tokens per second (on a CPU it often declines them)");
  cmd->add_option("--draft-model", o->draft_model,
                  "A smaller GGUF with the model's vocabulary that drafts for it, greedily, on a context of its own "
                  "(one sequence per --parallel slot); makes model the default --speculative");
  cmd->add_option("--draft-ctx", o->draft_ctx,
                  "The draft model's cells, shared by the drafting conversations (default: --ctx, at most its "
                  "n_ctx_train x --parallel)")
      ->check(CLI::Range(64u, 1u << 24));
  cmd->add_option("--draft-p-min", o->draft_p_min,
                  "A draft ends before a token the draft model gives less than this probability; 0 drafts "
                  "--draft-max tokens whatever its confidence (default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--spill-ram-mb", o->spill_ram_mb, "RAM for parked conversations' KV data")->capture_default_str();
  cmd->add_option("--spill-dir", o->spill_dir, "Directory for parked KV data once RAM is full (default: none)");
  cmd->add_option("--chat-template", o->chat_template,
                  "Chat template name or text (default: the model's, else chatml)");
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "Largest request body")->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Most tokens one request may generate")->capture_default_str()
      ->check(CLI::Range(1u, 1u << 24));
  cmd->add_option("--max-conversations", o->max_conversations, "Most live conversations (requests' included)")
      ->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--timeout", o->request_timeout_s, "Seconds one generation may run")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--read-timeout", o->read_timeout_s, "Seconds a client may stay silent mid-request")
      ->capture_default_str()->check(CLI::Range(1, 3600));
  cmd->add_option("--keep-alive-timeout", o->keep_alive_timeout_s,
                  "Seconds an idle connection (before or between requests) stays open")
      ->capture_default_str()->check(CLI::Range(1, 3600));
  cmd->add_option("--http-threads", o->http_threads, "HTTP threads kept ready (more start with connections)")
      ->capture_default_str()->check(CLI::Range(2, 4096));
  cmd->add_option("--max-connections", o->max_connections,
                  "Connections open at once, each on a thread; more are answered 503")
      ->capture_default_str()->check(CLI::Range(1u, 65536u));
  cmd->add_option("--shutdown-grace", o->shutdown_grace_s, "Seconds running generations may finish on SIGTERM")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--store", o->store,
                  "Where conversations are written after each turn and loaded by any node: dir:///path or "
                  "redis://host[:port][/db] (default: none, nothing written; docs/DEPLOYING.md)");
  cmd->add_option("--node-id", o->node_id,
                  "This node's name in the store, 1-40 of A-Z a-z 0-9 _ - (default: <hostname>-<pid>)");
  cmd->add_option("--lease-seconds", o->lease_seconds,
                  "How long a node's advance lease on a conversation lasts unrenewed (a dead node's turn "
                  "blocks others this long)")
      ->capture_default_str()->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--store-max-bytes", o->store_max_bytes,
                  "Largest conversation state the store takes (larger: 507 state_too_large)")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 36));
  cmd->add_option("--api-key", o->api_keys,
                  "An API key clients send as 'Authorization: Bearer KEY' (repeatable; 16-512 printable ASCII "
                  "characters); each key sees only its own conversations");
  cmd->add_option("--admin-key", o->admin_keys, "An API key that sees every key's conversations (repeatable)");
  cmd->add_option("--api-key-file", o->api_key_file,
                  "A file of API keys, one a line ('admin KEY' for an admin key; blank lines and # comments "
                  "ignored), read again on SIGHUP");
  cmd->add_option("--metrics-key", o->metrics_key,
                  "The key GET /metrics takes (an admin key works too); without it /metrics takes any API key");
  cmd->add_flag("--allow-unauthenticated", o->allow_unauthenticated,
                "Serve without API keys on a --host that is not loopback");
  cmd->add_option("--key-max-conversations", o->key_max_conversations,
                  "Most live conversations one API key may hold on this node (0: no limit; more is 429)")
      ->capture_default_str()->check(CLI::Range(0u, 1u << 20));
  cmd->add_option("--key-max-streams", o->key_max_streams,
                  "Most generations one API key may run at once on this node, streamed or not "
                  "(0: no limit; more is 429 too_many_streams)")
      ->capture_default_str()->check(CLI::Range(0u, 1u << 20));
  cmd->add_option("--key-tokens-per-minute", o->key_tokens_per_minute,
                  "Most tokens (prompt and generated) one API key may use in any 60 s on this node; a request "
                  "is admitted while the key is under it (0: no limit; over it is 429 rate_limit_exceeded)")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 40));
  cmd->add_option("--mmproj", o->mmproj,
                  "The model's projector GGUF (mmproj): chats may then hold images and audio (default: none, "
                  "refused)");
  cmd->add_flag("--allow-remote-media", o->allow_remote_media,
                "Fetch http:// image URLs in chats (the server then makes requests where clients point it)");
  cmd->add_option("--max-media", o->max_media, "Most images and audio clips in one request")
      ->capture_default_str()->check(CLI::Range(0u, 1024u));
  cmd->add_option("--max-media-bytes", o->max_media_bytes, "Largest image or WAV file, decoded, in a request")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 30));
  cmd->add_option("--embedding-model", o->embedding_model,
                  "An embedding GGUF (a non-causal model with pooling) that POST /v1/embeddings embeds with, on a "
                  "second context beside the chat model's (default: none; see --embeddings)");
  cmd->add_flag("--embeddings", o->embeddings,
                "POST /v1/embeddings with the chat model's own pooled hidden states when no --embedding-model is "
                "given (weaker than a trained embedding model)");
  cmd->add_option("--embedding-ctx", o->embedding_ctx,
                  "Most tokens of one embeddings input, the embedding context's cells (default 512; at most the "
                  "embedding model's n_ctx_train)")
      ->check(CLI::Range(8u, 1u << 20));
  cmd->add_option("--pooling", o->pooling,
                  "How an input's token states become one vector: mean, cls, last, or model (what the embedding "
                  "model's GGUF declares, mean when it declares none; the default)")
      ->check(CLI::IsMember({"mean", "cls", "last", "model"}));
  cmd->callback([o] {
    // SIGINT/SIGTERM/SIGHUP are taken by sigtimedwait below: blocked here,
    // before any thread starts, so every thread inherits the mask and no
    // handler ever runs (SIGHUP's key reload happens on this thread).
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that goes away is a failed write, not a death

    serve::ServeApp server(*o);
    const int port = server.bind();
    server.start();
    const auto &c = server.context();
    fmt::print("weft serve: model {} ({}), {} KV cells, {} slots\n", c.model_name, c.model.description(), c.n_ctx(),
               o->parallel);
    fmt::print("weft serve: {}\n", describe_attention(c.ex->stats()));
    if (const auto spec = serve::describe_speculative(c); !spec.empty()) fmt::print("weft serve: {}\n", spec);
    if (c.projector)
      fmt::print("weft serve: projector {} ({}{}{})\n", o->mmproj, c.projector.vision() ? "images" : "",
                 c.projector.vision() && c.projector.audio() ? ", " : "",
                 c.projector.audio() ? fmt::format("audio at {} Hz", c.projector.audio_sample_rate()) : "");
    if (c.embed_model)
      fmt::print("weft serve: embeddings with {} ({}{}), {} floats, at most {} tokens per input, pooling {}\n",
                 c.embed_model_name, c.embed_model->description(), o->embedding_model.empty() ? ", the chat model" : "",
                 c.ex->embedding_size(), c.embed_n_ctx, o->pooling.empty() ? "model" : o->pooling);
    if (!o->store.empty())
      fmt::print("weft serve: node {}, state store {}\n", c.cluster->node_id(), o->store);
    fmt::print("weft serve: {}\n", serve::describe_access(*o, *c.keys));
    fmt::print("weft serve: listening on http://{}:{}\n", o->host, port);
    std::fflush(stdout);
    int sig = 0;
    const timespec slice{0, 200'000'000};
    while (server.running()) {
      sig = sigtimedwait(&sigs, nullptr, &slice);
      if (sig == SIGINT || sig == SIGTERM) break;
      if (sig == SIGHUP) reload_keys(*c.keys);
    }
    fmt::print("weft serve: {}, shutting down\n", sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "stopped");
    std::fflush(stdout);
    server.shutdown();
    fmt::print("weft serve: stopped\n");
    std::fflush(stdout);
  });
}

}  // namespace weft_cli
