// weft bench speculative: llama-server's own speculative decoding (--spec-type,
// --draft-max) from the same pin, on the same model, prompts and sampling.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <thread>

#include "bench_options.hpp"
#include "bench_server.hpp"
#include "bench_speculative.hpp"

#if __has_include(<httplib.h>)
#include <httplib.h>
#define WEFT_BENCH_HTTP 1
#endif

namespace weft_cli::bench_speculative {

#ifdef WEFT_BENCH_HTTP
bool have_http() { return true; }

struct ServerEngine::Impl {
  std::unique_ptr<bench::ServerProcess> server;
  std::string log;
  bool spec = false;
  unsigned draft_max = 0;
  std::string spec_type;
};

namespace {

nlohmann::json completion(int port, const std::vector<weft::Token> &prompt, unsigned n_predict,
                          const nlohmann::json &bias) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(600, 0);
  const nlohmann::json body = {{"prompt", prompt},     {"n_predict", n_predict}, {"cache_prompt", true},
                               {"temperature", 0},     {"ignore_eos", true},     {"logit_bias", bias}};
  auto res = cli.Post("/completion", body.dump(), "application/json");
  if (!res || res->status != 200) {
    throw weft::Error(weft::Errc::backend,
                      fmt::format("llama-server answered {}{}",
                                  res ? fmt::format("HTTP {}: ", res->status) : httplib::to_string(res.error()),
                                  res ? res->body.substr(0, 300) : std::string()));
  }
  return nlohmann::json::parse(res->body);
}

}  // namespace

ServerEngine::ServerEngine(const Opts &o, const std::string &model_path, unsigned slots, unsigned ctx,
                           ServerKind kind, const std::string &flash_attn)
    : impl_(new Impl) {
  const bool spec = kind == ServerKind::spec;
  impl_->spec = kind != ServerKind::plain;
  impl_->draft_max = o.draft_max;
  impl_->spec_type = o.spec_type;
  impl_->log = fmt::format("/tmp/weft-bench-speculative-{}-{}.log", ::getpid(),
                           spec ? "spec" : kind == ServerKind::draft ? "draft" : "plain");
  std::vector<std::string> extra;
  // This pin removed --draft-max: ngram-simple drafts size-m tokens; the
  // other types take --spec-draft-n-max.
  if (spec) {
    extra = {"--spec-type", o.spec_type,
             o.spec_type == "ngram-simple" ? "--spec-ngram-simple-size-m" : "--spec-draft-n-max",
             std::to_string(o.draft_max)};
  } else if (kind == ServerKind::draft) {
    extra = {"-md", o.draft_model, "--spec-draft-n-max", std::to_string(o.draft_max), "--spec-draft-p-min",
             fmt::format("{}", o.draft_p_min)};
  }
  try {
    impl_->server = std::make_unique<bench::ServerProcess>(
        bench::ServerOptions{.binary = o.server.empty() ? std::string(bench::default_llama_server()) : o.server,
                             .model = model_path,
                             .log_path = impl_->log,
                             .ctx = ctx,
                             .batch = o.batch,
                             .ubatch = o.batch,
                             .slots = slots,
                             .threads = o.threads,
                             .flash_attn = flash_attn,
                             .extra_args = extra});
  } catch (...) {
    delete impl_;
    throw;
  }
}

ServerEngine::~ServerEngine() { delete impl_; }

std::vector<Reply> ServerEngine::run(const Inputs &in, unsigned n, unsigned n_tokens) {
  nlohmann::json bias = nlohmann::json::array();
  for (const auto &[t, b] : in.bias) {
    if (std::isinf(b)) bias.push_back({t, false});
    else bias.push_back({t, b});
  }
  const int port = impl_->server->port();
  std::vector<Reply> out(n);
  std::vector<std::string> errors(n);
  auto each = [&](auto &&fn) {
    std::vector<std::thread> th;
    for (unsigned i = 0; i < n; ++i) {
      th.emplace_back([&, i] {
        try {
          fn(i);
        } catch (const std::exception &e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto &t : th) t.join();
    for (const auto &e : errors) {
      if (!e.empty()) throw weft::Error(weft::Errc::backend, e + "\n" + impl_->server->log_tail());
    }
  };
  each([&](unsigned i) { completion(port, in.prompts[i], 1, bias); });  // the prompts in their slots' caches
  // The replies, all at once. predicted_ms: from the prompt's end to the
  // last token, the server's own clock (the prompt is cached but its last
  // token, which llama-server decodes again).
  each([&](unsigned i) {
    const auto j = completion(port, in.prompts[i], n_tokens, bias);
    const auto &t = j.at("timings");
    out[i].seconds = t.value("predicted_ms", 0.0) / 1000.0;
    out[i].tokens = t.value("predicted_n", 0u);
    out[i].drafted = t.value("draft_n", 0u);
    out[i].accepted = t.value("draft_n_accepted", 0u);
  });
  return out;
}

nlohmann::json ServerEngine::settings() const {
  return {{"argv", impl_->server->argv()}, {"log", impl_->log}, {"attention", impl_->server->flash_attn_used()}};
}

std::string ServerEngine::attention() const { return impl_->server->flash_attn_used(); }

#else
bool have_http() { return false; }
struct ServerEngine::Impl {};
ServerEngine::ServerEngine(const Opts &, const std::string &, unsigned, unsigned, ServerKind, const std::string &)
    : impl_(nullptr) {
  throw weft::Error(weft::Errc::invalid_argument, "this weft was built without an HTTP client: --target weft");
}
ServerEngine::~ServerEngine() = default;
std::vector<Reply> ServerEngine::run(const Inputs &, unsigned, unsigned) { return {}; }
nlohmann::json ServerEngine::settings() const { return {}; }
std::string ServerEngine::attention() const { return {}; }
#endif

}  // namespace weft_cli::bench_speculative
