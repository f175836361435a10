// weft serve: what every route shares — the model, the one executor, its
// stepping thread, the conversations, the limits and the server's counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "serve/cluster.hpp"
#include "serve/key_limits.hpp"
#include "serve/keys.hpp"
#include "serve/media_input.hpp"
#include "serve/registry.hpp"
#include "serve/serve_options.hpp"
#include "serve/stepper.hpp"
#include "weft/executor.hpp"
#include "weft/model.hpp"
#include "weft/projector.hpp"

namespace weft_cli::serve {

struct ServeCounters {
  std::atomic<std::uint64_t> prompt_tokens{0};      // prompted by requests
  std::atomic<std::uint64_t> completion_tokens{0};  // generated for requests
  std::atomic<std::uint64_t> timeouts{0};           // generations cut by --timeout
  std::atomic<std::uint64_t> disconnects{0};        // streams whose client went away
  std::atomic<int> connections{0};                   // open HTTP connections, over --max-connections included
  std::atomic<std::uint64_t> connections_refused{0};  // answered 503 server_busy, or closed at once
  std::atomic<std::uint64_t> embedding_requests{0};     // /v1/embeddings answered with vectors
  std::atomic<std::uint64_t> embedding_inputs{0};       // inputs embedded for them
  std::atomic<std::uint64_t> embedding_tokens{0};       // their tokens (usage.prompt_tokens)
  std::atomic<std::uint64_t> embedding_disconnects{0};  // embeddings whose client went away (cancelled)
  std::mutex mu;
  std::map<std::pair<std::string, int>, std::uint64_t> requests;  // (route, status) -> count

  void count_request(const std::string &route, int status) {
    std::lock_guard lk(mu);
    ++requests[{route, status}];
  }
};

struct ServeContext {
  ServeOptions opt;
  std::unique_ptr<KeyRing> keys;  // who may use the server (auth.hpp)
  weft::Model model;
  std::string model_name;     // what clients put in "model"
  std::string chat_template;  // passed to Model::apply_chat_template
  weft::Projector projector;  // --mmproj; empty: requests with media are refused
  MediaLimits media;          // what one request may carry (--max-media, ...)
  std::unique_ptr<weft::Executor> ex;
  std::unique_ptr<Stepper> stepper;
  Registry registry;
  KeyLimits key_limits;  // --key-max-streams, --key-tokens-per-minute
  std::unique_ptr<Cluster> cluster;  // the state store's side (a no-op without --store)
  ServeCounters counters;
  std::atomic<bool> draining{false};    // SIGTERM: new work is refused (503)
  std::atomic<bool> cancel_all{false};  // the grace period is over: running generations end
  std::atomic<int> active_runs{0};      // generations a request is waiting on or streaming
  // Embeddings (--embedding-model, --embeddings): the model that embeds (the
  // chat model itself with --embeddings) and the name requests give it;
  // unset: POST /v1/embeddings refuses (embeddings.hpp).
  std::optional<weft::Model> embed_model;
  std::string embed_model_name;
  std::uint32_t embed_n_ctx = 0;            // most tokens of one input (EmbedderParams::n_ctx)
  std::uint32_t embed_special_tokens = 0;   // tokens the embedder adds to each text (BOS/EOS/SEP), measured at start
  std::atomic<int> active_embeddings{0};    // embeddings requests waiting for their vectors
  // --draft-model (serve/speculative.hpp): the draft model, its context's
  // cells and p_min as the executor got them; unset without it.
  std::optional<weft::Model> draft_model;
  std::uint32_t draft_ctx = 0;
  float draft_p_min = 0;

  ServeContext(ServeOptions o, std::unique_ptr<KeyRing> k, weft::Model m)
      : opt(std::move(o)), keys(std::move(k)), model(std::move(m)),
        registry(opt.max_conversations, opt.key_max_conversations),
        key_limits({.max_streams = opt.key_max_streams, .tokens_per_minute = opt.key_tokens_per_minute}) {}

  std::uint32_t n_ctx() const { return ex->n_ctx(); }
};

}  // namespace weft_cli::serve
