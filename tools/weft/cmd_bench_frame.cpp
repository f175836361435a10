// weft bench frame: a game loop's view of the executor.
//
// N conversations generate (greedy, long replies) while a ~256-token prompt
// arrives on a fresh conversation every K frames; each simulated frame runs
// one step({.max_time = B, .deadline = frame_start + 1.5*B}). Per budget B we
// report the step wall time p50/p99/max, the share of steps over B, and the
// decode rate against the same workload stepped without a budget. The issue's
// targets are printed as met or not; speed is never asserted.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "bench_common.hpp"
#include "bench_commands.hpp"

namespace weft_cli {
namespace {

using std::chrono::steady_clock;

struct Opts {
  std::string model, json;
  std::vector<double> budgets{4, 8, 16.6};
  unsigned conversations = 8, frames = 300, arrive_every = 30, arrival_tokens = 256, seed = 1;
  unsigned ctx = 0, batch = 512, ubatch = 0;
  int threads = 0;
};

struct RunResult {
  std::vector<double> step_ms;
  double busy_s = 0;  // summed step wall time
  std::uint64_t tokens_decoded = 0, tokens_sampled = 0, deadline_hits = 0;
};

// One run of the workload; `budget_ms` 0 = plain step().
RunResult run_workload(weft::Model &model, const Opts &o, double budget_ms) {
  // Room for the talkers' whole replies plus every arrival (finished ones are
  // disposed, but the cache is sized as if none were).
  const unsigned arrivals = o.frames / o.arrive_every + 1;
  const unsigned want_ctx = o.ctx != 0 ? o.ctx
                                       : o.conversations * (32 + o.frames + 1) + arrivals * (o.arrival_tokens + 32);
  const unsigned slots = std::min(256u, o.conversations + arrivals);
  const auto ctx = static_cast<unsigned>(std::min<std::uint64_t>(want_ctx, std::uint64_t(model.n_ctx_train()) * slots));
  weft::Executor ex(model, {.n_ctx = std::max(ctx, o.batch),
                            .n_batch = o.batch,
                            .n_ubatch = o.ubatch,
                            .n_seq_max = slots,
                            .n_threads = o.threads});
  std::mt19937_64 rng(o.seed);
  const auto n_vocab = model.n_vocab();

  // Warm-up outside the timings (and it seeds the cost model).
  {
    auto w = ex.create();
    w.prompt(bench::random_tokens(rng, 64, n_vocab));
    while (!ex.step().idle) {}
    w.dispose();
  }

  std::vector<weft::Conversation> talkers;
  std::vector<weft::Generation> gens;
  for (unsigned i = 0; i < o.conversations; ++i) {
    talkers.push_back(ex.create());
    talkers.back().prompt(bench::random_tokens(rng, 32, n_vocab));
    gens.push_back(talkers.back().generate({.max_tokens = o.frames + 1}));
  }
  struct Arrival {
    weft::Conversation conv;
    weft::Generation gen;
  };
  std::vector<Arrival> arriving;

  RunResult r;
  r.step_ms.reserve(o.frames);
  const auto budget = std::chrono::microseconds(static_cast<std::int64_t>(budget_ms * 1000));
  for (unsigned f = 0; f < o.frames; ++f) {
    if (f % o.arrive_every == 0) {
      auto c = ex.create();
      c.prompt(bench::random_tokens(rng, o.arrival_tokens, n_vocab));
      auto g = c.generate({.max_tokens = 16});  // a short reply to the new prompt
      arriving.push_back({std::move(c), std::move(g)});
    }
    const auto frame_start = steady_clock::now();
    weft::StepBudget b;
    if (budget_ms > 0) {
      b.max_time = budget;
      b.deadline = frame_start + std::chrono::duration_cast<steady_clock::duration>(budget * 3 / 2);
    }
    const auto res = ex.step(b);
    const double ms = std::chrono::duration<double, std::milli>(steady_clock::now() - frame_start).count();
    r.step_ms.push_back(ms);
    r.busy_s += ms / 1000;
    r.tokens_decoded += res.tokens_decoded;
    r.tokens_sampled += res.tokens_sampled;
    r.deadline_hits += res.deadline_hit ? 1 : 0;
    // A talker that sampled end-of-generation keeps talking: the load stays.
    for (std::size_t i = 0; i < talkers.size(); ++i)
      if (gens[i].done()) gens[i] = talkers[i].generate({.max_tokens = o.frames + 1});
    std::erase_if(arriving, [](Arrival &a) {
      if (!a.gen.done()) return false;
      a.conv.dispose();
      return true;
    });
  }
  return r;
}

// The floor under any budget: the median wall time of a step that decodes a
// single token (one conversation, a short history), the smallest unit of
// work a step can do. A budget below it cannot be met on this machine.
double one_token_step_ms(weft::Model &model, const Opts &o) {
  weft::Executor ex(model, {.n_ctx = 256, .n_batch = 64, .n_seq_max = 1, .n_threads = o.threads});
  std::mt19937_64 rng(o.seed + 1);
  auto c = ex.create();
  c.prompt(bench::random_tokens(rng, 32, model.n_vocab()));
  while (!ex.step().idle) {}
  std::vector<double> ms;
  for (int i = 0; i < 21; ++i) {
    c.prompt(bench::random_tokens(rng, 1, model.n_vocab()));
    const auto t0 = steady_clock::now();
    ex.step();
    ms.push_back(std::chrono::duration<double, std::milli>(steady_clock::now() - t0).count());
  }
  return bench::percentile(ms, 50);
}

nlohmann::json row_json(double budget_ms, const RunResult &r, double base_tps) {
  const double p50 = bench::percentile(r.step_ms, 50), p99 = bench::percentile(r.step_ms, 99);
  const double mx = r.step_ms.empty() ? 0 : *std::max_element(r.step_ms.begin(), r.step_ms.end());
  const auto over = budget_ms > 0 ? std::count_if(r.step_ms.begin(), r.step_ms.end(),
                                                  [&](double v) { return v > budget_ms; })
                                  : 0;
  const double tps = r.busy_s > 0 ? static_cast<double>(r.tokens_decoded) / r.busy_s : 0;
  const double ratio = base_tps > 0 ? tps / base_tps : 0;
  nlohmann::json j{{"budget_ms", budget_ms},
                   {"steps", r.step_ms.size()},
                   {"p50_ms", p50},
                   {"p99_ms", p99},
                   {"max_ms", mx},
                   {"over_budget_share", r.step_ms.empty() ? 0.0 : double(over) / double(r.step_ms.size())},
                   {"tokens_decoded", r.tokens_decoded},
                   {"tokens_sampled", r.tokens_sampled},
                   {"deadline_hits", r.deadline_hits},
                   {"busy_s", r.busy_s},
                   {"tokens_per_s", tps},
                   {"vs_unbudgeted", ratio}};
  if (budget_ms > 0) {
    j["targets"] = {{"p99_le_1_1B", p99 <= 1.1 * budget_ms},
                    {"max_le_1_5B", mx <= 1.5 * budget_ms},
                    {"throughput_ge_0_8x", ratio >= 0.8}};
  }
  return j;
}

void run(Opts o) {
  const std::string path = bench::model_path(o.model);
  auto model = bench::load_model(path);
  if (o.threads == 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  fmt::print("\nweft bench frame: model {}, {} conversations generating, a {}-token prompt every {} frames, "
             "{} frames, n_threads = {}, load average {:.2f}\n\n",
             path, o.conversations, o.arrival_tokens, o.arrive_every, o.frames, o.threads,
             bench::load_average_1min());
  std::fflush(stdout);
  const double floor_ms = one_token_step_ms(model, o);
  fmt::print("a step of one token (the least a step can decode) takes {:.2f} ms here (median of 21)\n\n", floor_ms);
  std::fflush(stdout);
  const auto base = run_workload(model, o, 0);
  const double base_tps = base.busy_s > 0 ? static_cast<double>(base.tokens_decoded) / base.busy_s : 0;

  fmt::print("| {:>8} | {:>8} | {:>8} | {:>8} | {:>6} | {:>9} | {:>6} | {:<26} |\n", "budget", "p50 ms", "p99 ms",
             "max ms", "over", "tok/s", "ratio", "targets p99/max/tput");
  fmt::print("|----------|----------|----------|----------|--------|-----------|--------|----------------------------|\n");
  nlohmann::json rows = nlohmann::json::array();
  auto print_row = [](const nlohmann::json &j) {
    const bool budgeted = j["budget_ms"].get<double>() > 0;
    std::string targets = "-";
    if (budgeted) {
      const auto &t = j["targets"];
      auto yn = [](bool b) { return b ? "met" : "MISSED"; };
      targets = fmt::format("{}/{}/{}", yn(t["p99_le_1_1B"]), yn(t["max_le_1_5B"]), yn(t["throughput_ge_0_8x"]));
    }
    fmt::print("| {:>8} | {:>8.2f} | {:>8.2f} | {:>8.2f} | {:>5.1f}% | {:>9.1f} | {:>6.2f} | {:<26} |\n",
               budgeted ? fmt::format("{:.1f} ms", j["budget_ms"].get<double>()) : std::string("none"),
               j["p50_ms"].get<double>(), j["p99_ms"].get<double>(), j["max_ms"].get<double>(),
               100 * j["over_budget_share"].get<double>(), j["tokens_per_s"].get<double>(),
               j["vs_unbudgeted"].get<double>(), targets);
    std::fflush(stdout);
  };
  auto base_row = row_json(0, base, base_tps);
  print_row(base_row);
  for (double b : o.budgets) {
    auto j = row_json(b, run_workload(model, o, b), base_tps);
    print_row(j);
    rows.push_back(std::move(j));
  }
  fmt::print("\ntargets (the issue's, on the small preset): p99 <= 1.1*B, max <= 1.5*B, tok/s >= 0.8x unbudgeted\n");
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "frame"},
                               {"model", path},
                               {"model_description", model.description()},
                               {"conversations", o.conversations},
                               {"frames", o.frames},
                               {"arrive_every", o.arrive_every},
                               {"arrival_tokens", o.arrival_tokens},
                               {"n_threads", o.threads},
                               {"machine", bench::machine_info()},
                               {"one_token_step_ms", floor_ms},
                               {"unbudgeted", base_row},
                               {"rows", rows}});
  }
}

}  // namespace

void add_bench_frame(CLI::App &bench) {
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("frame", "Per-frame step budgets: step time percentiles while prompts arrive");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the generated small model, made on first use)");
  cmd->add_option("--budgets", o->budgets, "Frame budgets B in ms (list); deadline = 1.5*B")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-n,--conversations", o->conversations, "Conversations generating")
      ->check(CLI::Range(1u, 200u))
      ->capture_default_str();
  cmd->add_option("--frames", o->frames, "Frames (steps) per budget")->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--arrive-every", o->arrive_every, "A new prompt every K frames")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--arrival-tokens", o->arrival_tokens, "Tokens of each arriving prompt")
      ->check(CLI::Range(1u, 1u << 16))
      ->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "KV cells (0 = sized to the workload)")->capture_default_str();
  cmd->add_option("--batch", o->batch, "n_batch")->check(CLI::Range(1u, 1u << 16))->capture_default_str();
  cmd->add_option("--ubatch", o->ubatch, "n_ubatch (0 = n_batch); the deadline is checked between micro-batches")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024))->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the random prompt tokens")->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the rows as JSON to this file");
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
