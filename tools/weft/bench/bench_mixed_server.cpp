// An HTTP server as an engine of the mixed workload, on 127.0.0.1: one
// streaming request per conversation, each on its own client thread, tokens
// timed as their server-sent events arrive. Two dialects: llama-server's
// /completion (tokens_predicted in each event) and `weft serve`'s
// /v1/completions (a token-array prompt, ignore_eos, and usage in each chunk
// through stream_options.continuous_usage_stats).
#include <fmt/format.h>

#include "bench_common.hpp"
#include "bench_mixed.hpp"
#include "attention_cli.hpp"

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

constexpr const char *kWeftAlias = "weft-bench";

// weft serve configured as the in-process weft target is: the same context,
// batch sizes, threads and step budget, one more slot than requests at once
// (in-process, the shared system prompt's conversation holds it; here the
// prefix cache entry that keeps the system prompt), no shutdown grace.
ServerOptions weft_serve_options(const TargetParams &p, const std::string &log) {
  return {.kind = ServerKind::weft_serve,
          .binary = p.weft_binary,
          .model = p.model_path,
          .log_path = log,
          .ctx = p.ctx,
          .batch = p.batch,
          .ubatch = p.ubatch,
          .slots = p.slots + 1,
          .threads = p.threads,
          .flash_attn = flash_attn_name(p.flash_attn),
          .extra_args = {"--step-tokens", std::to_string(p.step_tokens), "--step-ms", std::to_string(p.step_ms),
                         "--alias", kWeftAlias, "--shutdown-grace", "0", "--max-tokens", "1048576"},
          .ready_timeout_s = p.server_ready_timeout_s};
}

class ServerTarget final : public Target {
 public:
  ServerTarget(const TargetParams &p, ServerKind kind, std::string label) : p_(p), kind_(kind), label_(std::move(label)) {
    const bool serve = kind == ServerKind::weft_serve;
    log_path_ = !p.server_log.empty() && !serve ? p.server_log
                                                : fmt::format("/tmp/weft-bench-{}-{}.log",
                                                              serve ? "weft-serve" : "llama-server", ::getpid());
    std::remove(log_path_.c_str());
    server_ = std::make_unique<ServerProcess>(serve ? weft_serve_options(p, log_path_)
                                                   : ServerOptions{.binary = p.server_binary,
                                                                   .model = p.model_path,
                                                                   .log_path = log_path_,
                                                                   .ctx = p.ctx,
                                                                   .batch = p.batch,
                                                                   .ubatch = p.ubatch,
                                                                   .slots = p.slots,
                                                                   .threads = p.threads,
                                                                   .flash_attn = flash_attn_name(p.flash_attn),
                                                                   .extra_args = cache_reuse_args(p),
                                                                   .ready_timeout_s = p.server_ready_timeout_s});
  }

  ~ServerTarget() override { abort(); }

  std::string name() const override { return label_; }

  void warm_up(const Workload &w) override {
    system_ = &w.system;
    if (!p_.fork_system) return;  // cold: the first requests decode it
    // The system prompt once, untimed, as weft decodes its shared prefix.
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_connection_timeout(5, 0);
    cli.set_read_timeout(static_cast<time_t>(p_.read_timeout_s), 0);
    const nlohmann::json body =
        is_weft() ? nlohmann::json{{"model", kWeftAlias}, {"prompt", w.system}, {"max_tokens", 1}, {"temperature", 0}}
               : nlohmann::json{{"prompt", w.system}, {"n_predict", 1}, {"cache_prompt", true}, {"temperature", 0}};
    auto res = cli.Post(path(), body.dump(), "application/json");
    if (!res || res->status != 200) {
      throw weft::Error(weft::Errc::backend,
                        fmt::format("{} did not answer the warm-up request ({}); the end of its log ({}):\n{}",
                                    server_->name(),
                                    res ? fmt::format("HTTP {}", res->status) : httplib::to_string(res.error()),
                                    log_path_, server_->log_tail()));
    }
  }

  void start(std::size_t index, const Request &r, Trace &trace) override {
    nlohmann::json body = {{"prompt", nullptr},  {"n_predict", r.n_out}, {"stream", true},
                           {"cache_prompt", true}, {"ignore_eos", true},   {"temperature", 0}};
    if (is_weft()) {
      // weft streams valid UTF-8 whatever is sampled, so nothing is banned.
      body = {{"model", kWeftAlias}, {"prompt", nullptr}, {"max_tokens", r.n_out}, {"stream", true},
              {"ignore_eos", true}, {"temperature", 0}, {"seed", 1},
              {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}};
    } else if (!p_.server_banned.empty()) {
      auto &bias = body["logit_bias"] = nlohmann::json::array();
      for (auto t : p_.server_banned) bias.push_back({t, false});
    }
    if (!p_.json_schema.empty()) {
      // A completed object leaves only an end token: it must be allowed.
      body["ignore_eos"] = false;
      const auto schema = nlohmann::json::parse(p_.json_schema);
      if (is_weft()) {
        body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "bench"}, {"schema", schema}}}};
      } else {
        body["json_schema"] = schema;
      }
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
    return {{"argv", server_->argv()}, {"log", log_path_}, {"attention", server_->flash_attn_used()}};
  }

 private:
  bool is_weft() const { return kind_ == ServerKind::weft_serve; }
  const char *path() const { return is_weft() ? "/v1/completions" : "/completion"; }

  // Tokens so far according to one event, or -1 when it says nothing of them.
  long long tokens_in(const nlohmann::json &j) const {
    if (!is_weft()) return j.contains("tokens_predicted") ? j["tokens_predicted"].get<long long>() : -1;
    const auto u = j.find("usage");
    return u != j.end() && u->is_object() ? u->value("completion_tokens", -1LL) : -1;
  }

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
        if (event == "data: [DONE]") {  // weft serve's last event
          stopped = stopped || is_weft();
          continue;
        }
        const auto j = nlohmann::json::parse(event.substr(6), nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("error")) trace.error = j["error"].dump();
        const auto said = tokens_in(j);
        const auto k = said > static_cast<long long>(seen) ? static_cast<std::uint32_t>(said) : seen;
        if (k > seen) {
          if (trace.first < 0) trace.first = t;
          trace.chunks.emplace_back(t, k - seen);
          trace.end = t;
          trace.tokens = seen = k;
        }
        if (!is_weft() && j.value("stop", false)) {
          stopped = true;
          if (j.contains("timings")) trace.prompt_cached = j["timings"].value("cache_n", 0u);
        }
      }
      return !aborting_.load();
    };
    auto res = cli.Post(path(), {}, payload, "application/json", on_data);
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
  ServerKind kind_;
  std::string label_;
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

std::unique_ptr<Target> make_server_target(const TargetParams &p, const std::string &label) {
  return std::make_unique<ServerTarget>(p, ServerKind::llama_server, label);
}

std::unique_ptr<Target> make_weft_serve_target(const TargetParams &p) {
  return std::make_unique<ServerTarget>(p, ServerKind::weft_serve, "weft-serve");
}

}  // namespace weft_cli::bench

#else

namespace weft_cli::bench {

std::unique_ptr<Target> make_server_target(const TargetParams &, const std::string &) {
  throw weft::Error(weft::Errc::not_found,
                    "this weft was built without cpp-httplib (no llama.cpp source tree and no libcpp-httplib-dev), so "
                    "it cannot drive llama-server; run --target weft, or install libcpp-httplib-dev and reconfigure");
}

std::unique_ptr<Target> make_weft_serve_target(const TargetParams &) {
  throw weft::Error(weft::Errc::not_found,
                    "this weft was built without cpp-httplib, so it has no `weft serve` to drive over the wire; "
                    "install libcpp-httplib-dev and reconfigure");
}

}  // namespace weft_cli::bench

#endif  // __has_include(<httplib.h>)
