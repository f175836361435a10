// weft serve: the server's parts put together, and its shutdown.
#include "serve/server.hpp"

#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <list>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "serve/api_error.hpp"
#include "serve/auth.hpp"
#include "serve/cluster.hpp"
#include "serve/state_store.hpp"
#include "serve/conversation_routes.hpp"
#include "serve/dashboard.hpp"
#include "serve/embeddings.hpp"
#include "serve/metrics.hpp"
#include "serve/openai_routes.hpp"
#include "serve/speculative.hpp"

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

// Set on the HTTP thread serving a connection past --max-connections: its
// request is answered 503 (the pre-routing handler) and the connection closed.
thread_local bool t_over_capacity = false;

// Descriptors the process needs besides its connections' (model file, spill
// files, stdio, the listening socket, what llama.cpp opens).
constexpr rlim_t kReservedFds = 256;

// cpp-httplib serves a connection on one thread for as long as it is open:
// waiting for its first request (--keep-alive-timeout), reading it
// (--read-timeout), and between keep-alive requests. A fixed pool therefore
// lets idle or stalled connections occupy every thread while others wait in
// its queue. This one starts a thread whenever a connection would otherwise
// wait, up to --max-connections (--http-threads stay ready; the others end
// 3 s after their connection closes), and answers connections past the cap
// with 503 on at most --http-threads more threads; past those too, at most
// --http-threads connections wait and the rest are closed at once.
// (httplib's own growing ThreadPool starts a thread only when none is idle,
// so a burst of connections leaves some queued behind held ones for good.)
class ConnectionPool final : public httplib::TaskQueue {
 public:
  ConnectionPool(ServeCounters &counters, std::size_t ready, std::size_t max_connections)
      : counters_(counters), max_connections_(max_connections), max_threads_(max_connections + ready),
        max_waiting_(ready) {
    std::lock_guard lk(mu_);
    for (std::size_t i = 0; i < ready; ++i) spawn(false);
  }
  ~ConnectionPool() override { shutdown(); }

  bool enqueue(std::function<void()> fn) override {
    const bool over = counters_.connections.fetch_add(1) >= static_cast<int>(max_connections_);
    if (over) counters_.connections_refused.fetch_add(1);
    std::vector<std::thread> ended;
    {
      std::lock_guard lk(mu_);
      ended.swap(ended_);
      const bool needs_thread = jobs_.size() >= idle_;  // every idle thread already has a job coming
      const bool can_start = live_ < max_threads_;
      if (stop_ || (needs_thread && !can_start && jobs_.size() >= idle_ + max_waiting_)) {
        counters_.connections.fetch_sub(1);
        if (!over) counters_.connections_refused.fetch_add(1);
        return false;  // httplib closes the socket
      }
      jobs_.push_back([this, over, fn = std::move(fn)] {
        t_over_capacity = over;
        fn();  // httplib's connection loop; it catches what handlers throw
        t_over_capacity = false;
        counters_.connections.fetch_sub(1);
      });
      if (needs_thread && can_start) spawn(true);
    }
    cv_.notify_one();
    for (auto &t : ended) t.join();
    return true;
  }

  // Runs what is queued (httplib closes those sockets at once once stopped), joins every thread.
  void shutdown() override {
    std::list<std::thread> all;
    {
      std::lock_guard lk(mu_);
      stop_ = true;
      all.swap(threads_);
      for (auto &t : ended_) all.push_back(std::move(t));
      ended_.clear();
    }
    cv_.notify_all();
    for (auto &t : all)
      if (t.joinable()) t.join();
  }

 private:
  // Under mu_.
  void spawn(bool extra) {
    ++live_;
    threads_.emplace_back([this, extra] { work(extra); });
  }

  void work(bool extra) {
    std::unique_lock lk(mu_);  // also waits for spawn() to have stored this thread
    for (;;) {
      ++idle_;
      const auto ready = [this] { return stop_ || !jobs_.empty(); };
      const bool woke = extra ? cv_.wait_for(lk, std::chrono::seconds(3), ready) : (cv_.wait(lk, ready), true);
      --idle_;
      if (jobs_.empty()) {
        if (stop_ || !woke) break;
        continue;
      }
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lk.unlock();
      job();
      lk.lock();
    }
    --live_;
    // An extra thread that ends hands its handle over to be joined (by the
    // next enqueue, or shutdown); shutdown() may have taken it already.
    if (extra)
      for (auto it = threads_.begin(); it != threads_.end(); ++it)
        if (it->get_id() == std::this_thread::get_id()) {
          ended_.push_back(std::move(*it));
          threads_.erase(it);
          break;
        }
  }

  ServeCounters &counters_;
  const std::size_t max_connections_, max_threads_, max_waiting_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::list<std::thread> threads_;  // live ones
  std::vector<std::thread> ended_;  // extra ones that ended, to join
  std::size_t live_ = 0, idle_ = 0;
  bool stop_ = false;
};

// Each open connection is a descriptor: raises the soft limit to what
// --max-connections needs when the hard limit allows, else lowers
// --max-connections to fit (and says so).
std::uint32_t fit_fd_limit(std::uint32_t max_connections, int http_threads) {
  const rlim_t need = rlim_t(max_connections) + 2 * rlim_t(http_threads) + kReservedFds;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return max_connections;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    rlimit up = rl;
    up.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : std::min(need, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
  }
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return max_connections;
  const rlim_t spare = rl.rlim_cur > 2 * rlim_t(http_threads) + kReservedFds + 8
                           ? rl.rlim_cur - 2 * rlim_t(http_threads) - kReservedFds : 8;
  const auto fitted = static_cast<std::uint32_t>(std::min<rlim_t>(spare, max_connections));
  std::fprintf(stderr, "weft serve: the open-file limit is %llu (hard %llu); --max-connections %u needs %llu, lowered to %u\n",
               static_cast<unsigned long long>(rl.rlim_cur), static_cast<unsigned long long>(rl.rlim_max),
               max_connections, static_cast<unsigned long long>(need), fitted);
  return fitted;
}

// --node-id, or <hostname>-<pid> made of the characters ids allow.
std::string node_name(const std::string &wanted) {
  auto valid = [](const std::string &s) {
    return !s.empty() && s.size() <= 40 && std::all_of(s.begin(), s.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
    });
  };
  if (!wanted.empty()) {
    if (!valid(wanted))
      throw weft::Error(weft::Errc::invalid_argument,
                        fmt::format("--node-id '{}' must be 1-40 characters of A-Z a-z 0-9 _ -", wanted.substr(0, 80)));
    return wanted;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string n;
  for (const char *p = host; *p != '\0' && n.size() < 24; ++p)
    n += std::isalnum(static_cast<unsigned char>(*p)) || *p == '-' || *p == '_' ? *p : '-';
  if (n.empty()) n = "node";
  return fmt::format("{}-{}", n, getpid());
}

}  // namespace

ServeApp::ServeApp(ServeOptions opt) {
  if (opt.step_tokens > opt.batch)
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("--step-tokens {} is above --batch {}", opt.step_tokens, opt.batch));
  // Keys and exposure first: a bad key file or an open non-loopback host
  // fails before the model loads.
  auto keys = std::make_unique<KeyRing>(KeyOptions{.api_keys = opt.api_keys, .admin_keys = opt.admin_keys,
                                                   .key_file = opt.api_key_file, .metrics_key = opt.metrics_key});
  check_exposure(opt, *keys);
  check_embedding_options(opt);
  check_speculative_options(opt);
  auto model = weft::Model::load({.path = opt.model, .rpc = opt.rpc});
  ctx_ = std::make_unique<ServeContext>(std::move(opt), std::move(keys), std::move(model));
  auto &c = *ctx_;
  c.model_name = c.opt.alias.empty() ? std::filesystem::path(c.opt.model).stem().string() : c.opt.alias;
  c.chat_template = pick_chat_template(c.model, c.opt.chat_template);
  weft::ExecutorParams ep;
  ep.n_ctx = c.opt.ctx;
  ep.n_batch = c.opt.batch;
  ep.n_ubatch = c.opt.ubatch;
  ep.n_seq_max = c.opt.parallel;
  ep.n_threads = c.opt.threads;
  ep.flash_attn = c.opt.flash_attn;
  ep.kv_type = c.opt.cache_type;
  ep.speculative = speculative_params(c.opt);
  ep.draft_model = draft_model_params(c);
  ep.spill.ram_bytes = c.opt.spill_ram_mb << 20;
  ep.spill.disk_dir = c.opt.spill_dir;
  if (!c.opt.mmproj.empty()) c.projector = weft::Projector::load(c.model, {.path = c.opt.mmproj});
  ep.projector = c.projector;
  c.media = MediaLimits{.max_parts = c.opt.max_media, .max_bytes = c.opt.max_media_bytes,
                        .allow_remote = c.opt.allow_remote_media};
  ep.embedder = embedder_params(c);
  try {
    c.ex = std::make_unique<weft::Executor>(c.model, ep);
  } catch (const weft::Error &e) {
    // The executor names DraftModelParams' fields; the user gave flags.
    if (std::string_view(e.what()).starts_with("DraftModelParams"))
      throw weft::Error(e.code(), fmt::format("--draft-model {}: {}", c.opt.draft_model, e.what()));
    throw;
  }
  if (ep.embedder) probe_embedder(c);  // before the worker: it steps the executor itself
  // The step budget: how many tokens one step may decode, so how long the
  // conversations that are generating wait for a step that also ingests prompts.
  weft::StepBudget budget;
  if (c.opt.step_tokens > 0) budget.max_tokens = c.opt.step_tokens;
  if (c.opt.step_ms > 0) budget.max_time = std::chrono::milliseconds(c.opt.step_ms);
  c.stepper = std::make_unique<Stepper>(*c.ex, budget);
  std::unique_ptr<StateStore> store;
  if (!c.opt.store.empty()) store = open_store(c.opt.store, c.opt.store_max_bytes);
  c.cluster = std::make_unique<Cluster>(c, std::move(store), node_name(c.opt.node_id),
                                        std::chrono::milliseconds(static_cast<std::int64_t>(c.opt.lease_seconds * 1000)));
  configure_http();
}

ServeApp::~ServeApp() { shutdown(); }

void ServeApp::configure_http() {
  auto &c = *ctx_;
  svr_.set_payload_max_length(c.opt.max_body_bytes);
  svr_.set_read_timeout(c.opt.read_timeout_s, 0);
  svr_.set_write_timeout(c.opt.read_timeout_s, 0);
  svr_.set_keep_alive_timeout(c.opt.keep_alive_timeout_s);
  c.opt.max_connections = fit_fd_limit(c.opt.max_connections, c.opt.http_threads);
  const auto threads = static_cast<std::size_t>(std::max(2, c.opt.http_threads));
  svr_.new_task_queue = [&c, threads] { return new ConnectionPool(c.counters, threads, c.opt.max_connections); };
  // A connection past --max-connections: its request gets 503, and it is
  // closed. Then the API key: a request without a known one gets 401 before
  // any route runs (auth.hpp).
  svr_.set_pre_routing_handler([&c](const httplib::Request &req, httplib::Response &res) {
    if (t_over_capacity) {
      send_error(res, ApiError(503, "server_error", "server_busy",
                               fmt::format("{} connections are open, the server's --max-connections; try again later",
                                           c.opt.max_connections)));
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (const auto refused = refuse_unauthorized(c, req)) {
      send_error(res, *refused);
      res.set_header("Connection", "close");  // its body, if any, was not read
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
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
  add_embeddings_routes(svr_, c);
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
  // Running generations and embeddings may finish within the grace period...
  const auto open = [&c] { return c.active_runs.load() + c.active_embeddings.load(); };
  const auto grace = clock::now() + std::chrono::duration_cast<clock::duration>(
                                        std::chrono::duration<double>(c.opt.shutdown_grace_s));
  while (open() > 0 && clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // ...then they are cancelled; their requests answer within ~50 ms.
  c.cancel_all = true;
  const auto answered = clock::now() + std::chrono::seconds(5);
  while (open() > 0 && clock::now() < answered) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (open() > 0) std::fprintf(stderr, "weft serve: %d requests still open after 5 s; closing them\n", open());
  svr_.stop();
  if (listener_.joinable()) listener_.join();
  c.cluster.reset();  // its thread saves conversations: before they go
  c.stepper->stop();
  // Conversations go before the executor.
  for (const auto &e : c.registry.list()) c.registry.remove(e->id);
  c.ex.reset();
}

}  // namespace weft_cli::serve
