// weft bench mixed: an open-loop workload of conversations that arrive at a
// rate, fork a shared system prompt, send a prompt and stream a reply; run on
// weft and on llama-server (same model, context, batch sizes and slots) by
// the same driver. Reports time to first token, inter-token latency,
// end-to-end latency and aggregate tokens/s.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <thread>

#include "bench_commands.hpp"
#include "bench_common.hpp"
#include "bench_mixed.hpp"
#include "bench_options.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_mixed_cmd {
namespace {

struct Opts {
  std::string model, json, target = "both";
  bench::WorkloadParams work;
  bench::TargetParams engine;
  double timeout_s = 600;
  bool quiet = false;
  bool wire = false;
  unsigned reps = 1;
};

// This binary, run as `weft serve` by --wire.
std::string self_binary() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

void check(Opts &o, std::uint32_t n_ctx_train) {
  auto bad = [](const std::string &msg) { throw weft::Error(weft::Errc::invalid_argument, msg); };
  const auto &w = o.work;
  auto &e = o.engine;
  // As llama.cpp does for both engines: a batch never exceeds the context.
  e.batch = std::min(e.batch, e.ctx);
  e.ubatch = std::min(e.ubatch, e.batch);
  if (w.prompt_min > w.prompt_max) bad(fmt::format("--prompt-min {} is above --prompt-max {}", w.prompt_min, w.prompt_max));
  if (w.output_min > w.output_max) bad(fmt::format("--output-min {} is above --output-max {}", w.output_min, w.output_max));
  if (e.step_tokens > e.batch) bad(fmt::format("--step-tokens {} is above --batch {}", e.step_tokens, e.batch));
  if (e.slots + 1 > e.batch) bad(fmt::format("--slots {} needs --batch of at least {}", e.slots, e.slots + 1));
  const unsigned longest = 1 + w.system_tokens + w.prompt_max + w.output_max;
  if (longest > e.ctx) {
    bad(fmt::format("a conversation can reach {} tokens (system {} + prompt {} + output {}), more than --ctx {}",
                    longest, w.system_tokens, w.prompt_max, w.output_max, e.ctx));
  }
  if (e.ctx > n_ctx_train * (e.slots + 1)) {
    bad(fmt::format("--ctx {} is above the model's training context {} times {} sequences", e.ctx, n_ctx_train,
                    e.slots + 1));
  }
}

void print_row(const nlohmann::json &r) {
  fmt::print("| {:<12} | {:>5}/{:<3} | {:>7} | {:>7.1f} | {:>8.0f} | {:>8.0f} | {:>7.0f} | {:>7.0f} | {:>7.2f} | "
             "{:>7.2f} |\n",
             r["engine"].get<std::string>(), r["completed"].get<int>(), r["conversations"].get<int>(),
             r["generated_tokens"].get<int>(), r["tokens_per_s"].get<double>(), r["ttft_ms"]["p50"].get<double>(),
             r["ttft_ms"]["p99"].get<double>(), r["itl_ms"]["p50"].get<double>(), r["itl_ms"]["p99"].get<double>(),
             r["e2e_s"]["p50"].get<double>(), r["e2e_s"]["p99"].get<double>());
}

void run(Opts o) {
  o.engine.model_path = bench::model_path(o.model);
  auto model = bench::load_model(o.engine.model_path);
  check(o, static_cast<std::uint32_t>(model.n_ctx_train()));
  if (o.engine.server_binary.empty()) o.engine.server_binary = bench::default_llama_server();
  // The same thread count for both engines (llama-server's own default differs).
  if (o.engine.threads == 0) {
    o.engine.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  o.engine.server_banned = bench::invalid_utf8_tokens(model);
  const auto work = bench::make_workload(o.work, model.n_vocab(), model.bos());
  const auto &w = o.work;
  const nlohmann::json workload = {{"conversations", w.conversations}, {"rate", w.rate},
                                   {"system_tokens", w.system_tokens}, {"prompt_min", w.prompt_min},
                                   {"prompt_max", w.prompt_max},       {"output_min", w.output_min},
                                   {"output_max", w.output_max},       {"seed", w.seed}};

  if (o.wire) {
    if (o.engine.weft_binary.empty()) o.engine.weft_binary = self_binary();
    fmt::print("weft bench mixed --wire: {} conversations arriving at {}/s, system prompt {} tokens (shared), prompts "
               "{}-{}, replies {}-{} tokens; load average {:.2f}\n",
               w.conversations, w.rate, w.system_tokens, w.prompt_min, w.prompt_max, w.output_min, w.output_max,
               bench::load_average_1min());
    auto doc = bench::run_wire(model, work, o.engine,
                               {.reps = o.reps, .target = o.target, .timeout_s = o.timeout_s, .quiet = o.quiet});
    const std::string failures = doc["failures"].get<std::string>();
    if (!o.json.empty()) {
      doc["bench"] = "mixed-wire";
      doc["model"] = o.engine.model_path;
      doc["model_description"] = model.description();
      doc["workload"] = workload;
      doc["slots"] = o.engine.slots;
      doc["machine"] = bench::machine_info();
      bench::write_json(o.json, doc);
    }
    if (!failures.empty())
      throw weft::Error(weft::Errc::backend, fmt::format("some conversations failed:{}", failures));
    return;
  }

  std::vector<std::string> engines;
  if (o.target != "server") engines.push_back("weft");
  if (o.target != "weft") engines.push_back("llama-server");
  nlohmann::json results = nlohmann::json::array(), settings = nlohmann::json::object();
  std::string failures;
  for (const auto &name : engines) {
    // One engine at a time: the other must not compete for the cores.
    std::unique_ptr<bench::Target> target =
        name == "weft" ? bench::make_weft_target(model, o.engine) : bench::make_server_target(o.engine);
    const auto traces = bench::drive(*target, work, o.engine.slots, o.timeout_s, !o.quiet);
    settings[name] = target->settings();
    target.reset();  // stops llama-server before the next engine runs
    auto r = bench::summarize(name, work, traces);
    if (!r["errors"].empty()) failures += fmt::format("\n  {}: {}", name, r["errors"].dump());
    results.push_back(std::move(r));
  }

  fmt::print("\nweft bench mixed: {} conversations arriving at {}/s, system prompt {} tokens (shared), prompts {}-{}, "
             "replies {}-{} tokens; {} slots, ctx {}, batch {}, ubatch {}; weft steps of {} tokens\n\n",
             w.conversations, w.rate, w.system_tokens, w.prompt_min, w.prompt_max, w.output_min, w.output_max,
             o.engine.slots, o.engine.ctx, o.engine.batch, o.engine.ubatch, o.engine.step_tokens);
  fmt::print("| {:<12} | {:>9} | {:>7} | {:>7} | {:>8} | {:>8} | {:>7} | {:>7} | {:>7} | {:>7} |\n", "engine", "done",
             "gen tok", "tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "E2E p50", "E2E p99");
  fmt::print("|--------------|-----------|---------|---------|----------|----------|---------|---------|---------|"
             "---------|\n");
  for (const auto &r : results) print_row(r);
  fmt::print("(TTFT and ITL in ms, E2E in s; tok/s = generated tokens / (last reply - first arrival))\n");
  if (results.size() == 2) {
    const auto &a = results[0], &b = results[1];
    fmt::print("weft/llama-server: ITL p99 {:.2f}x, ITL p50 {:.2f}x, TTFT p50 {:.2f}x, tok/s {:.2f}x\n",
               a["itl_ms"]["p99"].get<double>() / b["itl_ms"]["p99"].get<double>(),
               a["itl_ms"]["p50"].get<double>() / b["itl_ms"]["p50"].get<double>(),
               a["ttft_ms"]["p50"].get<double>() / b["ttft_ms"]["p50"].get<double>(),
               a["tokens_per_s"].get<double>() / b["tokens_per_s"].get<double>());
  }
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "mixed"},
                               {"model", o.engine.model_path},
                               {"model_description", model.description()},
                               {"workload", workload},
                               {"slots", o.engine.slots},
                               {"settings", settings},
                               {"machine", bench::machine_info()},
                               {"results", results}});
  }
  if (!failures.empty()) {
    throw weft::Error(weft::Errc::backend, fmt::format("some conversations failed:{}", failures));
  }
}

}  // namespace
}  // namespace bench_mixed_cmd

void add_bench_mixed(CLI::App &bench) {
  using namespace bench_mixed_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("mixed", "Open-loop chat workload on weft and on llama-server: TTFT, inter-token "
                                            "latency, throughput");
  auto &w = o->work;
  auto &e = o->engine;
  bench::add_model_and_target(*cmd, o->model, o->target);
  bench::add_engine_options(*cmd, e, "Conversations served at once");
  cmd->add_option("--conversations", w.conversations, "Conversations in the workload")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  cmd->add_option("--rate", w.rate, "Arrivals per second (Poisson)")
      ->check(CLI::Range(1e-6, 1e6))
      ->capture_default_str();
  cmd->add_option("--system-tokens", w.system_tokens, "Shared system prompt length")->capture_default_str();
  cmd->add_option("--prompt-min", w.prompt_min, "Shortest user prompt (tokens, uniform)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--prompt-max", w.prompt_max, "Longest user prompt")->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--output-min", w.output_min, "Shortest reply (tokens, uniform)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--output-max", w.output_max, "Longest reply")->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--seed", w.seed, "Seed of arrivals, lengths and tokens")->capture_default_str();
  cmd->add_option("--max-chunk", e.max_chunk, "weft: most prompt tokens per conversation per step (0 = no cap)")
      ->capture_default_str();
  cmd->add_flag("--wire", o->wire,
                "Over HTTP: weft serve vs llama-server (its defaults, and -b/-ub = --step-tokens), plus weft "
                "in-process for the HTTP overhead (docs/BENCHMARKS.md, \"Over the wire\")");
  cmd->add_option("--reps", o->reps, "--wire: repetitions, the order reversed every other one")
      ->check(CLI::Range(1u, 100u))
      ->capture_default_str();
  cmd->add_option("--weft-binary", e.weft_binary, "--wire: the weft binary to run as `weft serve` (default: this one)");
  bench::add_run_options(*cmd, o->timeout_s, o->json, o->quiet);
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
