// weft bench rewind: what a rewind and a fork of a prefix cost on each model
// family (docs/EXECUTOR.md, "Model families"). One conversation holds a
// prompt of --tokens; a rewind of --back tokens, then one new token, until
// its logits are there; and a fork of it rewound the same way. Reports the
// time (median over --reps) and the positions decoded (a plain cut decodes
// the one new token; a re-decode, all that is left). Against llama-server
// (cache_prompt, its default context checkpoints) on the same model: the
// same prompt, then the prompt cut by --back plus the same token, as its
// timings report them (prompt_ms, prompt_n).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "bench_commands.hpp"
#include "bench_common.hpp"
#include "bench_mixed.hpp"
#include "bench_options.hpp"
#include "bench_server.hpp"
#include "model_cache.hpp"
#include "weft/executor.hpp"

#if __has_include(<httplib.h>)
#include <httplib.h>
#include <unistd.h>
#define WEFT_BENCH_HTTP 1
#endif

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_rewind_cmd {
namespace {

using Clock = std::chrono::steady_clock;

struct Opts {
  std::vector<std::string> models;
  std::vector<std::string> archs = {"llama", "gemma3", "lfm2", "mamba", "moe"};
  std::string preset = "small", target = "both", server, json;
  unsigned tokens = 512, back = 64, reps = 5, ctx = 4096, batch = 512;
  int threads = 0;
  bool quiet = false;
};

struct Cost {
  double ms = 0;
  std::uint64_t decoded = 0;
};

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

Cost median(std::vector<Cost> v) {
  std::vector<double> ms, n;
  for (const auto &c : v) ms.push_back(c.ms), n.push_back(static_cast<double>(c.decoded));
  return {bench::percentile(ms, 50), static_cast<std::uint64_t>(bench::percentile(n, 50))};
}

void run_idle(weft::Executor &ex) {
  for (int i = 0; i < 100000; ++i) {
    if (ex.step().idle) return;
  }
  throw weft::Error(weft::Errc::backend, "the executor did not become idle");
}

struct WeftResult {
  Cost prompt, rewind, fork, reroll;
};

constexpr std::uint32_t kReply = 16;  // the reply a reroll throws away

// A fresh prompt (and new token) each repetition, as each is one
// conversation's: nothing one left (a checkpoint, a cached prefix) serves the next.
struct Inputs {
  std::vector<weft::Token> prompt;
  weft::Token next;
};

Inputs make_inputs(std::mt19937_64 &rng, const weft::Model &m, unsigned tokens) {
  Inputs in{bench::random_tokens(rng, tokens, m.n_vocab()), bench::random_tokens(rng, 1, m.n_vocab()).front()};
  if (m.bos() >= 0) in.prompt.front() = m.bos();
  return in;
}

WeftResult run_weft(const weft::Model &m, const Opts &o) {
  weft::Executor ex(m, {.n_ctx = o.ctx, .n_batch = o.batch, .n_seq_max = 4, .n_threads = o.threads});
  std::mt19937_64 rng(7);
  std::vector<Cost> prompts, rewinds, forks, rerolls;
  auto timed = [&](auto &&op) {
    const auto before = ex.stats().tokens_decoded;
    const auto t0 = Clock::now();
    op();
    run_idle(ex);
    return Cost{ms_since(t0), ex.stats().tokens_decoded - before};
  };
  for (unsigned r = 0; r < o.reps + 1; ++r) {  // the first, a warm-up, is not counted
    const auto [prompt, next] = make_inputs(rng, m, o.tokens);
    const auto tail = std::span(prompt).last(o.back);
    auto c = ex.create();
    const Cost p = timed([&] { c.prompt(prompt); });
    const Cost rw = timed([&] {
      c.rewind(o.back);
      c.prompt({&next, 1});
    });
    c.rewind(1);
    c.prompt(tail);  // back to the whole prompt, untimed
    run_idle(ex);
    weft::Conversation child;
    const Cost f = timed([&] {
      child = c.fork();
      child.rewind(o.back);
      child.prompt({&next, 1});
    });
    child.dispose();
    c.rewind(c.n_tokens() - o.tokens);
    c.generate({.max_tokens = kReply});
    run_idle(ex);
    const Cost rr = timed([&] {
      c.rewind(c.n_tokens() - o.tokens);
      c.generate({.max_tokens = 1});
    });
    c.dispose();
    if (r == 0) continue;
    prompts.push_back(p);
    rewinds.push_back(rw);
    forks.push_back(f);
    rerolls.push_back(rr);
  }
  return {median(prompts), median(rewinds), median(forks), median(rerolls)};
}

#ifdef WEFT_BENCH_HTTP
// `banned`: tokens that are not whole UTF-8, which llama-server's output
// check refuses (HTTP 500), as `bench mixed` bans them.
Cost server_request(httplib::Client &cli, const std::vector<weft::Token> &tokens, const nlohmann::json &banned,
                    unsigned n_predict = 1) {
  const nlohmann::json body = {{"prompt", tokens}, {"n_predict", n_predict}, {"cache_prompt", true},
                               {"temperature", 0}, {"ignore_eos", true}, {"logit_bias", banned}};
  const auto t0 = Clock::now();
  auto res = cli.Post("/completion", body.dump(), "application/json");
  const double wall = ms_since(t0);
  if (!res || res->status != 200) {
    throw weft::Error(weft::Errc::backend, fmt::format("llama-server answered {}",
                                                       res ? fmt::format("HTTP {}", res->status)
                                                           : httplib::to_string(res.error())));
  }
  const auto j = nlohmann::json::parse(res->body);
  const auto &t = j.at("timings");
  return {t.value("prompt_ms", wall), t.value("prompt_n", 0u)};
}

struct ServerResult {
  Cost rewind, reroll;
};

ServerResult run_server(const std::string &model, const weft::Model &m, const Opts &o) {
  bench::ServerProcess server({.binary = o.server.empty() ? std::string(bench::default_llama_server()) : o.server,
                               .model = model,
                               .log_path = fmt::format("/tmp/weft-bench-rewind-{}.log", ::getpid()),
                               .ctx = o.ctx,
                               .batch = o.batch,
                               .ubatch = o.batch,
                               .slots = 1,
                               .threads = o.threads});
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(600, 0);
  std::mt19937_64 rng(7);
  nlohmann::json banned = nlohmann::json::array();
  for (weft::Token t : bench::invalid_utf8_tokens(m)) banned.push_back({t, false});
  std::vector<Cost> rewinds, rerolls;
  for (unsigned r = 0; r < o.reps + 1; ++r) {
    const auto [prompt, next] = make_inputs(rng, m, o.tokens);
    auto cut = std::vector<weft::Token>(prompt.begin(), prompt.end() - o.back);
    cut.push_back(next);
    server_request(cli, prompt, banned);  // the whole prompt in its slot
    const Cost c = server_request(cli, cut, banned);
    // The reroll: the prompt with a reply, then the prompt alone again.
    server_request(cli, prompt, banned, kReply);
    const Cost rr = server_request(cli, prompt, banned);
    if (r == 0) continue;
    rewinds.push_back(c);
    rerolls.push_back(rr);
  }
  return {median(rewinds), median(rerolls)};
}
#endif

void run(const Opts &o) {
  if (o.back < 1 || o.back >= o.tokens) {
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("--back {} must be in [1, --tokens {})", o.back, o.tokens));
  }
  std::vector<std::pair<std::string, std::string>> models;  // (label, path)
  for (const auto &p : o.models) models.emplace_back(std::filesystem::path(p).stem().string(), p);
  if (models.empty()) {
    for (const auto &a : o.archs) {
      models.emplace_back(a, ensure_preset_model(o.preset, 1, weft::parse_model_arch(a)));
    }
  }
  Opts opt = o;
  if (opt.threads == 0) opt.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  nlohmann::json results = nlohmann::json::array();
  fmt::print("\nweft bench rewind: a {}-token prompt, then a rewind of {} and one new token (and a fork rewound so); "
             "ctx {}, batch {}, {} threads; medians of {}\n\n",
             o.tokens, o.back, o.ctx, o.batch, opt.threads, o.reps);
  fmt::print("| {:<8} | {:<20} | {:>9} | {:>16} | {:>16} | {:>16} | {:>16} | {:>16} |\n", "model", "memory",
             "prompt ms", "rewind: weft", "llama-server", "fork+rewind", "reroll: weft", "llama-server");
  fmt::print("|----------|----------------------|-----------|------------------|------------------|------------------|"
             "------------------|------------------|\n");
  for (const auto &[label, path] : models) {
    auto m = weft::Model::load({.path = path});
    nlohmann::json r = {{"model", label}, {"path", path}, {"description", m.description()},
                        {"memory", static_cast<int>(m.memory())}, {"sliding_window", m.sliding_window()}};
    WeftResult w;
    if (o.target != "server") {
      w = run_weft(m, opt);
      r["weft"] = {{"prompt_ms", w.prompt.ms},     {"rewind_ms", w.rewind.ms}, {"rewind_decoded", w.rewind.decoded},
                   {"fork_ms", w.fork.ms},         {"fork_decoded", w.fork.decoded},
                   {"reroll_ms", w.reroll.ms},     {"reroll_decoded", w.reroll.decoded}};
    }
    ServerResult s;
#ifdef WEFT_BENCH_HTTP
    if (o.target != "weft") {
      s = run_server(path, m, opt);
      r["llama_server"] = {{"rewind_prompt_ms", s.rewind.ms}, {"rewind_prompt_n", s.rewind.decoded},
                           {"reroll_prompt_ms", s.reroll.ms}, {"reroll_prompt_n", s.reroll.decoded}};
    }
#endif
    const auto cell = [](const Cost &c) { return fmt::format("{:7.1f} ms {:>5}", c.ms, c.decoded); };
    const std::string memory = m.memory() == weft::Model::Memory::plain          ? "plain attention"
                               : m.memory() == weft::Model::Memory::sliding_window ? fmt::format("window {}", m.sliding_window())
                               : m.memory() == weft::Model::Memory::recurrent      ? "recurrent"
                                                                                   : "hybrid";
    const bool ow = o.target != "server", os = o.target != "weft";
    fmt::print("| {:<8} | {:<20} | {:>9.1f} | {:>16} | {:>16} | {:>16} | {:>16} | {:>16} |\n", label, memory,
               w.prompt.ms, ow ? cell(w.rewind) : "-", os ? cell(s.rewind) : "-", ow ? cell(w.fork) : "-",
               ow ? cell(w.reroll) : "-", os ? cell(s.reroll) : "-");
    results.push_back(std::move(r));
  }
  fmt::print("(each cell: time until the new token's logits, then the positions decoded for it; reroll: the prompt "
             "again after a {}-token reply, until one new token is sampled)\n",
             kReply);
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "rewind"},
                               {"tokens", o.tokens},
                               {"back", o.back},
                               {"ctx", o.ctx},
                               {"batch", o.batch},
                               {"threads", opt.threads},
                               {"reps", o.reps},
                               {"machine", bench::machine_info()},
                               {"results", results}});
  }
}

}  // namespace
}  // namespace bench_rewind_cmd

void add_bench_rewind(CLI::App &bench) {
  using namespace bench_rewind_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("rewind", "What a rewind and a fork of a prefix cost on each model family, against "
                                             "llama-server's cache and context checkpoints");
  cmd->add_option("-m,--model", o->models, "GGUF models (default: the --preset in each --arch, generated once)");
  cmd->add_option("--arch", o->archs, "Model families to generate when no --model is given")
      ->check(CLI::IsMember({"llama", "gemma3", "lfm2", "mamba", "moe"}))
      ->capture_default_str();
  cmd->add_option("--preset", o->preset, "Preset of the generated models")
      ->check(CLI::IsMember({"tiny", "small", "1b"}))
      ->capture_default_str();
  cmd->add_option("--target", o->target, "Engines to run")->check(CLI::IsMember({"weft", "server", "both"}))->capture_default_str();
  cmd->add_option("--server", o->server, "llama-server binary (default: the one built with weft)");
  cmd->add_option("--tokens", o->tokens, "Prompt length")->check(CLI::Range(2u, 1u << 20))->capture_default_str();
  cmd->add_option("--back", o->back, "Tokens rewound")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  cmd->add_option("--reps", o->reps, "Repetitions (after one warm-up)")->check(CLI::Range(1u, 1000u))->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "KV cells")->check(CLI::Range(16u, 1u << 24))->capture_default_str();
  cmd->add_option("--batch", o->batch, "n_batch (and n_ubatch)")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Decode threads (0 = all)")->check(CLI::Range(0, 1024))->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the results as JSON to this file");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress line");
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
