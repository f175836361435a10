// weft serve: Prometheus metrics and the dashboard's status JSON.
#include "serve/metrics.hpp"

#include <fmt/format.h>

#include "serve/api_error.hpp"
#include "serve/auth.hpp"

namespace weft_cli::serve {

namespace {

struct Out {
  std::string s;
  void head(const char *name, const char *type, const char *help) {
    s += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  template <class T> void line(const char *name, T v, const std::string &labels = {}) {
    s += fmt::format("{}{} {}\n", name, labels.empty() ? "" : "{" + labels + "}", v);
  }
  template <class T> void one(const char *name, const char *type, const char *help, T v) {
    head(name, type, help);
    line(name, v);
  }
};

}  // namespace

std::string prometheus_text(ServeContext &ctx) {
  const auto st = ctx.ex->stats();
  Out o;
  o.one("weft_steps_total", "counter", "Executor steps run", st.steps);
  o.one("weft_tokens_decoded_total", "counter", "Tokens decoded into the KV cache", st.tokens_decoded);
  o.one("weft_tokens_sampled_total", "counter", "Tokens sampled for generations", st.tokens_sampled);
  o.one("weft_tokens_drafted_total", "counter", "Draft tokens verified (speculative decoding; in tokens decoded)",
        st.tokens_drafted);
  o.one("weft_drafts_accepted_total", "counter", "Draft tokens kept (in tokens sampled)", st.drafts_accepted);
  o.one("weft_draft_model_tokens_total", "counter",
        "Tokens decoded in the draft model's context (--draft-model: catching up and drafting)",
        st.draft_model_tokens);
  o.one("weft_draft_model_seconds_total", "counter", "Seconds in the draft model's context",
        st.draft_model_seconds);
  o.one("weft_decode_failures_total", "counter", "llama_decode failures", st.decode_failures);
  o.one("weft_queued_tokens", "gauge", "Tokens queued, not yet decoded", st.queued_tokens);
  o.one("weft_conversations", "gauge", "Live conversations", st.conversations);
  o.one("weft_generating", "gauge", "Conversations generating", st.generating);
  o.head("weft_conversations_residency", "gauge", "Conversations by where their KV data is");
  o.line("weft_conversations_residency", st.resident, "residency=\"resident\"");
  o.line("weft_conversations_residency", st.parked_ram, "residency=\"ram\"");
  o.line("weft_conversations_residency", st.parked_disk, "residency=\"disk\"");
  o.line("weft_conversations_residency", st.parked_recompute, "residency=\"recompute\"");
  o.one("weft_kv_cells", "gauge", "KV cells in the cache (n_ctx)", st.n_ctx);
  o.one("weft_kv_cells_used", "gauge", "KV cells in use (shared prefixes once)", st.cells_used);
  o.one("weft_slots_used", "gauge", "Sequence slots held", st.slots_used);
  o.one("weft_slots", "gauge", "Sequence slots (--parallel)", st.n_seq_max);
  o.one("weft_parks_total", "counter", "Conversations parked", st.parks);
  o.one("weft_restores_total", "counter", "Conversations restored from RAM or disk", st.restores);
  o.one("weft_recomputes_total", "counter", "Conversations re-decoded from tokens", st.recomputes);
  o.one("weft_redecodes_total", "counter", "Cuts the model's memory could not make, decoded again", st.redecodes);
  o.one("weft_redecode_tokens_total", "counter", "Positions decoded again for them", st.redecode_tokens);
  o.one("weft_spill_ram_bytes", "gauge", "Parked KV data in RAM", st.ram_bytes);
  o.one("weft_spill_disk_bytes", "gauge", "Parked KV data on disk", st.disk_bytes);
  // The embedder (--embedding-model, --embeddings): all zero without one.
  o.one("weft_texts_embedded_total", "counter", "Texts the executor embedded (the start's probe included)",
        st.texts_embedded);
  o.one("weft_embed_tokens_total", "counter", "Tokens decoded for embeddings", st.embed_tokens);
  o.one("weft_embed_decodes_total", "counter", "llama_decode calls for embeddings", st.embed_decodes);
  o.one("weft_embed_seconds_total", "counter", "Wall time of the embeddings decodes", st.embed_ms / 1000.0);
  o.one("weft_embed_pending", "gauge", "Embeddings inputs queued, not yet decoded", st.embed_pending);

  const auto h = ctx.stepper->histogram();
  o.head("weft_step_duration_seconds", "histogram", "Wall time of steps that decoded or sampled");
  std::uint64_t cum = 0;
  for (std::size_t i = 0; i < kStepBuckets.size(); ++i) {
    cum += h.counts[i];
    o.line("weft_step_duration_seconds_bucket", cum, fmt::format("le=\"{}\"", kStepBuckets[i]));
  }
  cum += h.counts.back();
  o.line("weft_step_duration_seconds_bucket", cum, "le=\"+Inf\"");
  o.line("weft_step_duration_seconds_sum", h.sum_s);
  o.line("weft_step_duration_seconds_count", h.count);
  o.one("weft_step_errors_total", "counter", "Worker steps that threw (a weft bug)", st.worker_errors);

  o.one("weft_prompt_tokens_total", "counter", "Prompt tokens of requests", ctx.counters.prompt_tokens.load());
  o.one("weft_completion_tokens_total", "counter", "Tokens generated for requests", ctx.counters.completion_tokens.load());
  o.one("weft_embedding_requests_total", "counter", "Embeddings requests answered with vectors",
        ctx.counters.embedding_requests.load());
  o.one("weft_embedding_inputs_total", "counter", "Inputs embedded for requests", ctx.counters.embedding_inputs.load());
  o.one("weft_embedding_tokens_total", "counter", "Tokens of the inputs embedded for requests",
        ctx.counters.embedding_tokens.load());
  o.one("weft_embedding_disconnects_total", "counter", "Embeddings requests whose client went away (cancelled)",
        ctx.counters.embedding_disconnects.load());
  o.one("weft_active_embeddings", "gauge", "Embeddings requests waiting for their vectors",
        ctx.active_embeddings.load());
  o.one("weft_request_timeouts_total", "counter", "Generations and embeddings cut by --timeout",
        ctx.counters.timeouts.load());
  o.one("weft_client_disconnects_total", "counter", "Streams whose client went away", ctx.counters.disconnects.load());
  o.one("weft_http_connections", "gauge", "Open HTTP connections", ctx.counters.connections.load());
  o.one("weft_http_connections_refused_total", "counter", "Connections refused past --max-connections",
        ctx.counters.connections_refused.load());
  o.one("weft_active_generations", "gauge", "Generations requests are waiting on", ctx.active_runs.load());
  o.head("weft_http_requests_total", "counter", "HTTP requests answered, by route and status");
  {
    std::lock_guard lk(ctx.counters.mu);
    for (const auto &[k, n] : ctx.counters.requests)
      o.line("weft_http_requests_total", n, fmt::format("route=\"{}\",code=\"{}\"", k.first, k.second));
  }
  if (ctx.cluster && ctx.cluster->enabled()) {
    // The state store (--store): acquire (the lease), save
    // (Conversation::save), write (to the store), read (from it), restore
    // (Executor::load).
    const auto ops = ctx.cluster->op_stats();
    o.head("weft_store_ops_total", "counter", "State store operations, by kind");
    for (int i = 0; i < Cluster::op_count; ++i)
      o.line("weft_store_ops_total", ops[i].n, fmt::format("op=\"{}\"", Cluster::op_name(i)));
    o.head("weft_store_seconds_total", "counter", "Wall time of state store operations, by kind");
    for (int i = 0; i < Cluster::op_count; ++i)
      o.line("weft_store_seconds_total", ops[i].seconds, fmt::format("op=\"{}\"", Cluster::op_name(i)));
    o.head("weft_store_bytes_total", "counter", "State bytes saved, written, read and restored, by kind");
    for (int i = 0; i < Cluster::op_count; ++i)
      o.line("weft_store_bytes_total", ops[i].bytes, fmt::format("op=\"{}\"", Cluster::op_name(i)));
  }
  return o.s;
}

void add_metrics_routes(httplib::Server &svr, ServeContext &ctx) {
  svr.Get("/metrics", guarded([&ctx](const httplib::Request &, httplib::Response &res) {
            res.set_content(prometheus_text(ctx), "text/plain; version=0.0.4");
          }));
  // For a proxy's checks: 200 while serving (the store's state is said, not
  // a failure: the node still serves what it holds), 503 once draining.
  svr.Get("/health", [&ctx](const httplib::Request &, httplib::Response &res) {
    Json j = ctx.cluster ? ctx.cluster->health() : Json::object();
    j["status"] = ctx.draining.load() ? "draining" : "ok";
    res.status = ctx.draining.load() ? 503 : 200;
    res.set_content(j.dump(), "application/json");
  });
  // The executor's figures are the whole server's; the conversations listed
  // are the caller's own (an admin key's: all).
  svr.Get("/v1/status", guarded([&ctx](const httplib::Request &req, httplib::Response &res) {
            const Caller who = caller_of(ctx, req);
            const auto st = ctx.ex->stats();
            Json convs = Json::array();
            for (const auto &e : ctx.registry.list()) {
              if (!who.may_use(e->owner)) continue;
              try {
                const auto g = e->generation();
                convs.push_back({{"id", e->id},
                                 {"kind", e->kind},
                                 {"residency", weft::residency_name(e->conv.residency())},
                                 {"n_tokens", e->conv.n_tokens()},
                                 {"n_cells", e->conv.n_cells()},
                                 {"n_queued", e->conv.n_queued()},
                                 {"generating", g && !g->done()},
                                 {"tokens_per_second", e->tokens_per_second()}});
              } catch (const weft::Error &) {
                // removed while listing
              }
            }
            Json steps = Json::array();
            const double now = ctx.stepper->uptime_s();
            for (const auto &s : ctx.stepper->last_minute())
              steps.push_back({{"t", static_cast<double>(s.second) - now},
                               {"steps", s.steps},
                               {"tokens", s.tokens},
                               {"mean_ms", s.steps ? s.sum_ms / s.steps : 0.0},
                               {"max_ms", s.max_ms}});
            // null when embeddings are off.
            Json embeddings = nullptr;
            if (ctx.embed_model)
              embeddings = {{"model", ctx.embed_model_name},
                            {"n_embd", ctx.ex->embedding_size()},
                            {"n_ctx", ctx.embed_n_ctx},
                            {"requests", ctx.counters.embedding_requests.load()},
                            {"inputs", ctx.counters.embedding_inputs.load()},
                            {"tokens", ctx.counters.embedding_tokens.load()},
                            {"active", ctx.active_embeddings.load()},
                            {"texts_embedded", st.texts_embedded},
                            {"embed_tokens", st.embed_tokens},
                            {"embed_decodes", st.embed_decodes},
                            {"embed_ms", st.embed_ms},
                            {"pending", st.embed_pending}};
            send_json(res, Json{{"model", ctx.model_name},
                                {"uptime_s", now},
                                {"n_ctx", st.n_ctx},
                                {"cells_used", st.cells_used},
                                {"slots", st.n_seq_max},
                                {"slots_used", st.slots_used},
                                {"queued_tokens", st.queued_tokens},
                                {"steps", st.steps},
                                {"tokens_decoded", st.tokens_decoded},
                                {"tokens_sampled", st.tokens_sampled},
                                {"tokens_drafted", st.tokens_drafted},
                                {"drafts_accepted", st.drafts_accepted},
                                {"draft_model_tokens", st.draft_model_tokens},
                                {"draft_model_seconds", st.draft_model_seconds},
                                {"step_ms_p50", st.step_ms_p50},
                                {"step_ms_p99", st.step_ms_p99},
                                {"residency", {{"resident", st.resident}, {"ram", st.parked_ram},
                                               {"disk", st.parked_disk}, {"recompute", st.parked_recompute}}},
                                {"conversations", convs},
                                {"embeddings", embeddings},
                                {"step_seconds", steps}});
          }));
}

}  // namespace weft_cli::serve
