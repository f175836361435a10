// weft serve: the server's parts put together, and its shutdown.
#include "serve/server.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "serve/api_error.hpp"
#include "serve/conversation_routes.hpp"
#include "serve/dashboard.hpp"
#include "serve/metrics.hpp"
#include "serve/openai_routes.hpp"

namespace weft_cli::serve {

namespace {

// The template the server formats chats with: --chat-template, else the
// model's own when llama.cpp recognises it, else ChatML (said on stderr).
std::string pick_chat_template(const weft::Model &model, const std::string &wanted) {
  const std::vector<weft::ChatMessage> probe{{"user", "hi"}};
  if (!wanted.empty()) {
    model.apply_chat_template(probe, true, wanted);  // throws invalid_argument naming it
    return wanted;
  }
  const std::string own = model.chat_template();
  if (own.empty()) {
    std::fprintf(stderr, "weft serve: the model has no chat template; chats use ChatML\n");
    return "chatml";
  }
  try {
    model.apply_chat_template(probe, true, own);
    return own;
  } catch (const weft::Error &) {
    std::fprintf(stderr, "weft serve: llama.cpp does not recognise the model's chat template; chats use ChatML "
                         "(--chat-template NAME picks another)\n");
    return "chatml";
  }
}

}  // namespace

ServeApp::ServeApp(ServeOptions opt) {
  if (opt.step_tokens > opt.batch)
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("--step-tokens {} is above --batch {}", opt.step_tokens, opt.batch));
  auto model = weft::Model::load({.path = opt.model});
  ctx_ = std::make_unique<ServeContext>(std::move(opt), std::move(model));
  auto &c = *ctx_;
  c.model_name = c.opt.alias.empty() ? std::filesystem::path(c.opt.model).stem().string() : c.opt.alias;
  c.chat_template = pick_chat_template(c.model, c.opt.chat_template);
  weft::ExecutorParams ep;
  ep.n_ctx = c.opt.ctx;
  ep.n_batch = c.opt.batch;
  ep.n_ubatch = c.opt.ubatch;
  ep.n_seq_max = c.opt.parallel;
  ep.n_threads = c.opt.threads;
  ep.spill.ram_bytes = c.opt.spill_ram_mb << 20;
  ep.spill.disk_dir = c.opt.spill_dir;
  c.ex = std::make_unique<weft::Executor>(c.model, ep);
  // The step budget: how many tokens one step may decode, so how long the
  // conversations that are generating wait for a step that also ingests prompts.
  weft::StepBudget budget;
  if (c.opt.step_tokens > 0) budget.max_tokens = c.opt.step_tokens;
  c.stepper = std::make_unique<Stepper>(*c.ex, budget);
  configure_http();
}

ServeApp::~ServeApp() { shutdown(); }

void ServeApp::configure_http() {
  auto &c = *ctx_;
  svr_.set_payload_max_length(c.opt.max_body_bytes);
  svr_.set_read_timeout(c.opt.read_timeout_s, 0);
  svr_.set_write_timeout(c.opt.read_timeout_s, 0);
  svr_.set_keep_alive_timeout(5);
  const auto threads = static_cast<std::size_t>(std::max(2, c.opt.http_threads));
  svr_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // httplib's own refusals (413, 404, 400 on a bad request line) in
  // OpenAI's shape too.
  svr_.set_error_handler([](const httplib::Request &req, httplib::Response &res) {
    if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e = res.status == 413   ? ApiError(413, "invalid_request_error", "payload_too_large",
                                                "the request body is larger than the server's --max-body-bytes")
                 : res.status == 404 ? ApiError(404, "not_found_error", "unknown_url",
                                                fmt::format("no route for {} {}", req.method, req.path.substr(0, 200)))
                                     : ApiError(res.status, "invalid_request_error", "bad_request",
                                                fmt::format("HTTP {}", res.status));
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  });
  svr_.set_logger([&c](const httplib::Request &req, const httplib::Response &res) {
    c.counters.count_request(req.matched_route.empty() ? "other" : req.method + " " + req.matched_route, res.status);
  });
  add_openai_routes(svr_, c);
  add_conversation_routes(svr_, c);
  add_metrics_routes(svr_, c);
  add_dashboard_routes(svr_);
}

int ServeApp::bind() {
  const auto &o = ctx_->opt;
  const int port = o.port == 0 ? svr_.bind_to_any_port(o.host) : (svr_.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0) throw weft::Error(weft::Errc::io, fmt::format("cannot listen on {}:{} (taken, or not an address here)", o.host, o.port));
  return port;
}

void ServeApp::start() {
  ctx_->stepper->start();
  listener_ = std::thread([this] { svr_.listen_after_bind(); });
  svr_.wait_until_ready();
}

bool ServeApp::running() const { return svr_.is_running(); }

void ServeApp::shutdown() {
  if (shut_) return;
  shut_ = true;
  auto &c = *ctx_;
  using clock = std::chrono::steady_clock;
  c.draining = true;
  // Running generations may finish within the grace period...
  const auto grace = clock::now() + std::chrono::duration_cast<clock::duration>(
                                        std::chrono::duration<double>(c.opt.shutdown_grace_s));
  while (c.active_runs.load() > 0 && clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // ...then they are cancelled; their requests answer within ~50 ms.
  c.cancel_all = true;
  const auto answered = clock::now() + std::chrono::seconds(5);
  while (c.active_runs.load() > 0 && clock::now() < answered) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (c.active_runs.load() > 0)
    std::fprintf(stderr, "weft serve: %d requests still open after 5 s; closing them\n", c.active_runs.load());
  svr_.stop();
  if (listener_.joinable()) listener_.join();
  c.stepper->stop();
  // Conversations go before the executor.
  for (const auto &e : c.registry.list()) c.registry.remove(e->id);
  c.ex.reset();
}

}  // namespace weft_cli::serve
