// weft bench prefix: NPCs that arrive over time with the same long lore and
// their own character sheet, each sent whole (no fork, nothing warm), on weft
// (automatic prefix reuse) and on llama-server (cache_prompt and
// --cache-reuse), by the driver of `bench mixed`. Reports time to first token
// and throughput, and how many prompt tokens each engine decoded.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "bench_commands.hpp"
#include "bench_common.hpp"
#include "bench_mixed.hpp"
#include "bench_options.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_prefix_cmd {
namespace {

struct Opts {
  std::string model, json, target = "both";
  bench::WorkloadParams work;
  bench::TargetParams engine;
  double timeout_s = 900;
  bool quiet = false;
  Opts() {
    work.conversations = 32;
    work.system_tokens = 1500;
    work.prompt_min = work.prompt_max = 100;
    work.output_min = work.output_max = 64;
    work.rate = 1.0;
    engine.slots = 8;
    engine.step_tokens = 256;
    engine.fork_system = false;
    engine.cache_reuse = 256;
  }
};

std::uint64_t prompt_tokens(const bench::Workload &w) {
  std::uint64_t n = 0;
  for (const auto &r : w.requests) n += w.system.size() + r.user.size();
  return n;
}

void run(Opts o) {
  o.engine.model_path = bench::model_path(o.model);
  auto model = bench::load_model(o.engine.model_path);
  auto &e = o.engine;
  e.batch = std::min(e.batch, e.ctx);
  e.ubatch = std::min(e.ubatch, e.batch);
  const unsigned longest = 1 + o.work.system_tokens + o.work.prompt_max + o.work.output_max;
  if (longest * e.slots > e.ctx) {
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("--ctx {} cannot hold {} slots of {} tokens (llama-server keeps one sequence per "
                                  "slot); raise --ctx or lower --slots",
                                  e.ctx, e.slots, longest));
  }
  if (e.step_tokens > e.batch) {
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("--step-tokens {} is above --batch {}", e.step_tokens, e.batch));
  }
  if (e.server_binary.empty()) e.server_binary = bench::default_llama_server();
  if (e.threads == 0) e.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  e.server_banned = bench::invalid_utf8_tokens(model);
  const auto work = bench::make_workload(o.work, model.n_vocab(), model.bos());

  std::vector<std::string> engines;
  if (o.target != "server") engines.push_back("weft");
  if (o.target != "weft") engines.push_back("llama-server");
  nlohmann::json results = nlohmann::json::array(), settings = nlohmann::json::object();
  std::string failures;
  for (const auto &name : engines) {
    // One engine at a time: the other must not compete for the cores.
    std::unique_ptr<bench::Target> target =
        name == "weft" ? bench::make_weft_target(model, e) : bench::make_server_target(e);
    const auto traces = bench::drive(*target, work, e.slots, o.timeout_s, !o.quiet);
    settings[name] = target->settings();
    auto r = bench::summarize(name, work, traces);
    std::uint64_t cached = 0;
    for (const auto &t : traces) cached += t.prompt_cached;
    if (name == "weft") {
      const auto ps = bench::weft_prefix_stats(*target);
      settings[name]["prefix"] = ps;
      cached = ps["prefix_tokens_reused"].get<std::uint64_t>();
    }
    r["prompt_tokens"] = prompt_tokens(work);
    r["prompt_tokens_decoded"] = prompt_tokens(work) - std::min(prompt_tokens(work), cached);
    target.reset();  // stops llama-server before the next engine runs
    if (!r["errors"].empty()) failures += fmt::format("\n  {}: {}", name, r["errors"].dump());
    results.push_back(std::move(r));
  }

  const auto &w = o.work;
  fmt::print("\nweft bench prefix: {} NPCs arriving at {}/s, a shared lore of {} tokens and a sheet of {} each (sent "
             "whole, nothing forked or warm), replies of {} tokens; {} slots, ctx {}, batch {}, ubatch {}; weft steps "
             "of {} tokens; llama-server cache_prompt, --cache-reuse {}\n\n",
             w.conversations, w.rate, w.system_tokens, w.prompt_min, w.output_min, e.slots, e.ctx, e.batch, e.ubatch,
             e.step_tokens, e.cache_reuse);
  fmt::print("| {:<12} | {:>9} | {:>13} | {:>8} | {:>8} | {:>8} | {:>7} | {:>7} |\n", "engine", "done",
             "prompt decoded", "TTFT p50", "TTFT p99", "TTFT max", "tok/s", "E2E p50");
  fmt::print("|--------------|-----------|---------------|----------|----------|----------|---------|---------|\n");
  for (const auto &r : results) {
    fmt::print("| {:<12} | {:>5}/{:<3} | {:>6}/{:<6} | {:>8.0f} | {:>8.0f} | {:>8.0f} | {:>7.1f} | {:>7.2f} |\n",
               r["engine"].get<std::string>(), r["completed"].get<int>(), r["conversations"].get<int>(),
               r["prompt_tokens_decoded"].get<std::uint64_t>(), r["prompt_tokens"].get<std::uint64_t>(),
               r["ttft_ms"]["p50"].get<double>(), r["ttft_ms"]["p99"].get<double>(), r["ttft_ms"]["max"].get<double>(),
               r["tokens_per_s"].get<double>(), r["e2e_s"]["p50"].get<double>());
  }
  fmt::print("(TTFT in ms from arrival, E2E in s; tok/s = generated tokens / (last reply - first arrival))\n");
  if (results.size() == 2) {
    const auto &a = results[0], &b = results[1];
    const double ttft = a["ttft_ms"]["p50"].get<double>() / b["ttft_ms"]["p50"].get<double>();
    const double tps = a["tokens_per_s"].get<double>() / b["tokens_per_s"].get<double>();
    fmt::print("weft/llama-server: TTFT p50 {:.2f}x, TTFT p99 {:.2f}x, tok/s {:.2f}x (target: TTFT p50 <= 0.3x at "
               "tok/s >= 1x: {})\n",
               ttft, a["ttft_ms"]["p99"].get<double>() / b["ttft_ms"]["p99"].get<double>(), tps,
               ttft <= 0.3 && tps >= 1.0 ? "met" : "not met");
  }
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "prefix"},
                               {"model", e.model_path},
                               {"model_description", model.description()},
                               {"workload",
                                {{"conversations", w.conversations},
                                 {"rate", w.rate},
                                 {"lore_tokens", w.system_tokens},
                                 {"sheet_tokens", w.prompt_min},
                                 {"output_tokens", w.output_min},
                                 {"seed", w.seed}}},
                               {"slots", e.slots},
                               {"settings", settings},
                               {"machine", bench::machine_info()},
                               {"results", results}});
  }
  if (!failures.empty()) {
    throw weft::Error(weft::Errc::backend, fmt::format("some conversations failed:{}", failures));
  }
}

}  // namespace
}  // namespace bench_prefix_cmd

void add_bench_prefix(CLI::App &bench) {
  using namespace bench_prefix_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("prefix", "NPCs sharing a long lore, arriving over time: weft's prefix reuse vs "
                                             "llama-server's cache_prompt/--cache-reuse (TTFT, throughput)");
  auto &w = o->work;
  auto &e = o->engine;
  bench::add_model_and_target(*cmd, o->model, o->target);
  bench::add_engine_options(*cmd, e, "NPCs served at once");
  cmd->add_option("--conversations", w.conversations, "NPCs")->check(CLI::Range(1u, 100000u))->capture_default_str();
  cmd->add_option("--rate", w.rate, "Arrivals per second (Poisson)")->check(CLI::Range(1e-6, 1e6))->capture_default_str();
  cmd->add_option("--lore-tokens", w.system_tokens, "Shared lore length")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--sheet-tokens", w.prompt_min, "Each NPC's own sheet")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--output", w.output_min, "Reply length (tokens)")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  cmd->add_option("--seed", w.seed, "Seed of arrivals and tokens")->capture_default_str();
  cmd->add_option("--cache-reuse", e.cache_reuse, "llama-server --cache-reuse (0 = not passed)")->capture_default_str();
  bench::add_run_options(*cmd, o->timeout_s, o->json, o->quiet);
  cmd->callback([o] {
    o->work.prompt_max = o->work.prompt_min;
    o->work.output_max = o->work.output_min;
    run(*o);
  });
}

}  // namespace weft_cli
