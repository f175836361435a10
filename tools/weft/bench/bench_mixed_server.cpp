// llama-server as an engine of the mixed workload: one streaming /completion
// request per conversation, each on its own client thread, tokens timed as
// their server-sent events arrive on 127.0.0.1.
#include <fmt/format.h>

#include "bench_common.hpp"
#include "bench_mixed.hpp"

#if __has_include(<httplib.h>)
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include <unistd.h>

namespace weft_cli::bench {
namespace {

std::vector<std::string> cache_reuse_args(const TargetParams &p) {
  if (p.cache_reuse == 0) return {};
  return {"--cache-reuse", std::to_string(p.cache_reuse)};
}

class ServerTarget final : public Target {
 public:
  explicit ServerTarget(const TargetParams &p) : p_(p) {
    log_path_ = p.server_log.empty() ? fmt::format("/tmp/weft-bench-llama-server-{}.log", ::getpid()) : p.server_log;
    std::remove(log_path_.c_str());
    server_ = std::make_unique<ServerProcess>(ServerOptions{.binary = p.server_binary,
                                                            .model = p.model_path,
                                                            .log_path = log_path_,
                                                            .ctx = p.ctx,
                                                            .batch = p.batch,
                                                            .ubatch = p.ubatch,
                                                            .slots = p.slots,
                                                            .threads = p.threads,
                                                            .extra_args = cache_reuse_args(p),
                                                            .ready_timeout_s = p.server_ready_timeout_s});
  }

  ~ServerTarget() override { abort(); }

  std::string name() const override { return "llama-server"; }

  void warm_up(const Workload &w) override {
    system_ = &w.system;
    if (!p_.fork_system) return;  // cold: the first requests decode it
    // The system prompt once, untimed, as weft decodes its shared prefix.
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_connection_timeout(5, 0);
    cli.set_read_timeout(static_cast<time_t>(p_.read_timeout_s), 0);
    const nlohmann::json body = {{"prompt", w.system}, {"n_predict", 1}, {"cache_prompt", true}, {"temperature", 0}};
    auto res = cli.Post("/completion", body.dump(), "application/json");
    if (!res || res->status != 200) {
      throw weft::Error(weft::Errc::backend,
                        fmt::format("llama-server did not answer the warm-up request ({}); the end of its log ({}):\n{}",
                                    res ? fmt::format("HTTP {}", res->status) : httplib::to_string(res.error()),
                                    log_path_, server_->log_tail()));
    }
  }

  void start(std::size_t index, const Request &r, Trace &trace) override {
    nlohmann::json body = {{"prompt", nullptr},  {"n_predict", r.n_out}, {"stream", true},
                           {"cache_prompt", true}, {"ignore_eos", true},   {"temperature", 0}};
    if (!p_.server_banned.empty()) {
      auto &bias = body["logit_bias"] = nlohmann::json::array();
      for (auto t : p_.server_banned) bias.push_back({t, false});
    }
    // The same tokens weft gets: the shared system prompt, then the user's.
    body["prompt"] = nlohmann::json::array();
    for (auto t : *system_) body["prompt"].push_back(t);
    for (auto t : r.user) body["prompt"].push_back(t);
    threads_.emplace_back([this, index, &trace, payload = body.dump()] { run_request(index, trace, payload); });
  }

  void pump(double until, std::vector<std::size_t> &finished) override {
    std::unique_lock lock(mu_);
    const double left = until - seconds_since(origin_ns);
    if (left > 0) cv_.wait_for(lock, std::chrono::duration<double>(left), [&] { return !done_.empty(); });
    finished.insert(finished.end(), done_.begin(), done_.end());
    done_.clear();
  }

  void abort() override {
    {
      std::lock_guard lock(mu_);
      aborting_ = true;
      for (auto *c : clients_) c->stop();
    }
    for (auto &t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
    if (server_) server_->stop();
  }

  nlohmann::json settings() const override {
    return {{"argv", server_->argv()}, {"log", log_path_}};
  }

 private:
  void run_request(std::size_t index, Trace &trace, const std::string &payload) {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_connection_timeout(5, 0);
    cli.set_read_timeout(static_cast<time_t>(p_.read_timeout_s), 0);
    {
      std::lock_guard lock(mu_);
      if (!aborting_) clients_.push_back(&cli);
    }
    std::string buf;
    std::uint32_t seen = 0;
    bool stopped = false;
    auto on_data = [&](const char *data, std::size_t n) {
      const double t = seconds_since(origin_ns);
      buf.append(data, n);
      for (std::size_t end; (end = buf.find("\n\n")) != std::string::npos;) {
        const std::string event = buf.substr(0, end);
        buf.erase(0, end + 2);
        if (event.rfind("error:", 0) == 0) {
          trace.error = event;
          continue;
        }
        if (event.rfind("data: ", 0) != 0) continue;
        const auto j = nlohmann::json::parse(event.substr(6), nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("error")) trace.error = j["error"].dump();
        const auto k = j.value("tokens_predicted", seen);
        if (k > seen) {
          if (trace.first < 0) trace.first = t;
          trace.chunks.emplace_back(t, k - seen);
          trace.end = t;
          trace.tokens = seen = k;
        }
        if (j.value("stop", false)) {
          stopped = true;
          if (j.contains("timings")) trace.prompt_cached = j["timings"].value("cache_n", 0u);
        }
      }
      return !aborting_.load();
    };
    auto res = cli.Post("/completion", {}, payload, "application/json", on_data);
    if (trace.error.empty()) {
      if (!res) {
        trace.error = fmt::format("HTTP request failed: {}", httplib::to_string(res.error()));
      } else if (res->status != 200) {
        trace.error = fmt::format("HTTP {}", res->status);
      } else if (!stopped) {
        trace.error = "the stream ended without its final event";
      }
    }
    std::lock_guard lock(mu_);
    std::erase(clients_, &cli);
    done_.push_back(index);
    cv_.notify_all();
  }

  TargetParams p_;
  std::string log_path_;
  std::unique_ptr<ServerProcess> server_;
  const std::vector<weft::Token> *system_ = nullptr;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::size_t> done_;
  std::vector<httplib::Client *> clients_;
  std::atomic<bool> aborting_{false};
};

}  // namespace

std::unique_ptr<Target> make_server_target(const TargetParams &p) { return std::make_unique<ServerTarget>(p); }

}  // namespace weft_cli::bench

#else

namespace weft_cli::bench {

std::unique_ptr<Target> make_server_target(const TargetParams &) {
  throw weft::Error(weft::Errc::not_found,
                    "this weft was built without cpp-httplib (no llama.cpp source tree and no libcpp-httplib-dev), so "
                    "it cannot drive llama-server; run --target weft, or install libcpp-httplib-dev and reconfigure");
}

}  // namespace weft_cli::bench

#endif  // __has_include(<httplib.h>)
