// weft bench schema: what sampling under a JSON Schema costs. B conversations
// (all arriving at once) each generate a reply, unconstrained and under a
// schema, on weft (SamplerParams::json_schema) and on llama-server (its
// json_schema field), same model, context, batch sizes, slots and threads,
// by the driver of `bench mixed`. Reports generated tokens/s per engine and
// mode (medians over repetitions, engines alternating), the schema's ratio to
// unconstrained, and weft's to llama-server's.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <thread>

#include "bench_commands.hpp"
#include "bench_common.hpp"
#include "bench_mixed.hpp"
#include "bench_options.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_schema_cmd {
namespace {

// An NPC's answer as a game would ask for it: a line to say, a mood, an action.
constexpr const char *kDefaultSchema =
    R"({"type": "object", "properties": {"say": {"type": "string", "maxLength": 200},
        "mood": {"enum": ["calm", "angry", "afraid", "glad"]},
        "action": {"enum": ["none", "trade", "give_item", "leave"]}},
        "required": ["say", "mood", "action"], "additionalProperties": false})";

struct Opts {
  std::string model, json, target = "both", schema = kDefaultSchema;
  std::vector<unsigned> batches = {1, 16};
  bench::WorkloadParams work;
  bench::TargetParams engine;
  unsigned reps = 3;
  double timeout_s = 600;
  bool quiet = false;
  Opts() {
    work.system_tokens = 32;
    work.prompt_min = work.prompt_max = 32;
    work.output_min = work.output_max = 64;
    work.rate = 1e6;  // everyone at once
    engine.step_tokens = 512;
  }
};

double median(std::vector<double> v) { return v.empty() ? 0.0 : bench::percentile(std::move(v), 50); }

void run(Opts o) {
  o.engine.model_path = bench::model_path(o.model);
  auto model = bench::load_model(o.engine.model_path);
  if (o.engine.server_binary.empty()) o.engine.server_binary = bench::default_llama_server();
  if (o.engine.threads == 0) o.engine.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.engine.server_banned = bench::invalid_utf8_tokens(model);
  (void)weft::json_schema_to_grammar(o.schema);  // a bad schema fails here, naming where
  std::vector<std::string> engines;
  if (o.target != "server") engines.push_back("weft");
  if (o.target != "weft") engines.push_back("llama-server");

  const unsigned longest = 1 + o.work.system_tokens + o.work.prompt_max + o.work.output_max;
  nlohmann::json rows = nlohmann::json::array();
  std::string failures;
  fmt::print("weft bench schema: replies of up to {} tokens after {} + {} prompt tokens, unconstrained and under a JSON "
             "schema; {} repetitions, engines alternating; load average {:.2f}\n",
             o.work.output_max, o.work.system_tokens, o.work.prompt_max, o.reps, bench::load_average_1min());
  for (const unsigned b : o.batches) {
    auto w = o.work;
    w.conversations = b;
    const auto work = bench::make_workload(w, model.n_vocab(), model.bos());
    auto e = o.engine;
    e.slots = b;
    e.ctx = std::max(1024u, b * (longest + 16));  // llama-server splits it per slot
    e.batch = std::min(e.batch, e.ctx);
    e.ubatch = std::min(e.ubatch, e.batch);
    // tokens/s per [engine][mode], one entry per repetition.
    std::map<std::string, std::map<std::string, std::vector<double>>> tps;
    for (unsigned rep = 0; rep < o.reps; ++rep) {
      auto order = engines;
      if (rep % 2 == 1) std::reverse(order.begin(), order.end());
      for (const auto &name : order) {
        for (const std::string mode : {"plain", "schema"}) {
          e.json_schema = mode == "schema" ? o.schema : "";
          // One engine at a time: the other must not compete for the cores.
          std::unique_ptr<bench::Target> target =
              name == "weft" ? bench::make_weft_target(model, e) : bench::make_server_target(e);
          const auto traces = bench::drive(*target, work, e.slots, o.timeout_s, !o.quiet);
          target.reset();
          const auto r = bench::summarize(name, work, traces);
          if (!r["errors"].empty()) failures += fmt::format("\n  {} B={} {}: {}", name, b, mode, r["errors"].dump());
          tps[name][mode].push_back(r["tokens_per_s"].get<double>());
        }
      }
    }
    for (const auto &name : engines) {
      const double plain = median(tps[name]["plain"]), schema = median(tps[name]["schema"]);
      rows.push_back({{"conversations", b},
                      {"engine", name},
                      {"plain_tokens_per_s", plain},
                      {"schema_tokens_per_s", schema},
                      {"schema_over_plain", plain > 0 ? schema / plain : 0.0},
                      {"plain_runs", tps[name]["plain"]},
                      {"schema_runs", tps[name]["schema"]}});
    }
  }

  fmt::print("\n| {:>2} | {:<12} | {:>13} | {:>11} | {:>14} |\n", "B", "engine", "plain tok/s", "schema tok/s",
             "schema / plain");
  fmt::print("|----|--------------|---------------|-------------|----------------|\n");
  for (const auto &r : rows) {
    fmt::print("| {:>2} | {:<12} | {:>13.1f} | {:>11.1f} | {:>13.2f}x |\n", r["conversations"].get<unsigned>(),
               r["engine"].get<std::string>(), r["plain_tokens_per_s"].get<double>(),
               r["schema_tokens_per_s"].get<double>(), r["schema_over_plain"].get<double>());
  }
  fmt::print("(medians of {}; tok/s = generated tokens / (last reply - first arrival); a schema's reply may end "
             "before the token limit, when its object is complete)\n",
             o.reps);
  for (std::size_t i = 0; i + 1 < rows.size(); ++i) {
    if (rows[i]["engine"] == "weft" && rows[i + 1]["engine"] == "llama-server" &&
        rows[i]["conversations"] == rows[i + 1]["conversations"] && rows[i + 1]["schema_tokens_per_s"] > 0) {
      fmt::print("B = {}: weft/llama-server under the schema {:.2f}x\n", rows[i]["conversations"].get<unsigned>(),
                 rows[i]["schema_tokens_per_s"].get<double>() / rows[i + 1]["schema_tokens_per_s"].get<double>());
    }
  }
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "schema"},
                               {"model", o.engine.model_path},
                               {"model_description", model.description()},
                               {"schema", o.schema},
                               {"workload",
                                {{"system_tokens", o.work.system_tokens},
                                 {"prompt_tokens", o.work.prompt_max},
                                 {"output_tokens", o.work.output_max},
                                 {"seed", o.work.seed}}},
                               {"reps", o.reps},
                               {"machine", bench::machine_info()},
                               {"results", rows}});
  }
  if (!failures.empty()) throw weft::Error(weft::Errc::backend, fmt::format("some conversations failed:{}", failures));
}

}  // namespace
}  // namespace bench_schema_cmd

void add_bench_schema(CLI::App &bench) {
  using namespace bench_schema_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("schema", "Sampling under a JSON Schema vs unconstrained, weft vs llama-server's "
                                             "json_schema (tokens/s at 1 and 16 conversations)");
  auto &w = o->work;
  auto &e = o->engine;
  bench::add_model_and_target(*cmd, o->model, o->target);
  bench::add_engine_options(*cmd, e, "slots");
  // One slot per conversation and a context sized to them, per run.
  cmd->remove_option(cmd->get_option("--slots"));
  cmd->remove_option(cmd->get_option("--ctx"));
  cmd->add_option("--conversations", o->batches, "Conversations at once, one run each (e.g. 1,16)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 255u))
      ->capture_default_str();
  cmd->add_option("--schema", o->schema, "The JSON Schema's text (default: an NPC's say/mood/action object)");
  cmd->add_option("--prompt", w.prompt_min, "Prompt tokens after a shared system prompt")
      ->check(CLI::Range(1u, 1u << 16))
      ->capture_default_str();
  cmd->add_option("--output", w.output_min, "Most tokens a reply may have")
      ->check(CLI::Range(1u, 1u << 16))
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "Repetitions (medians)")->check(CLI::Range(1u, 100u))->capture_default_str();
  bench::add_run_options(*cmd, o->timeout_s, o->json, o->quiet);
  cmd->callback([o] {
    o->work.prompt_max = o->work.prompt_min;
    o->work.output_max = o->work.output_min;
    run(*o);
  });
}

}  // namespace weft_cli
