// weft bench spill: more conversations than the KV cache holds.
//
// N conversations, each with a history, take round-robin turns (a short
// prompt, then M greedy tokens) in windows as wide as the spilled executor's
// slots, so both executors below run the same batches: one whose cache holds
// about 1/oversubscription of the conversations (the rest parked in RAM, on
// disk or as tokens), and one that holds everything resident. We report
// workload tokens/s of each against the resident one, and for the RAM and
// disk tiers the bytes parked and restored per second against a plain memcpy
// of the same bytes, measured in the same run. Speed is never asserted.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "bench_common.hpp"
#include "bench_commands.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_spill_cmd {
namespace {

struct Opts {
  std::string model, json, tier = "all", disk_dir;
  unsigned conversations = 64, oversubscription = 8, turns = 4, history = 64, prompt_tokens = 16, gen_tokens = 8;
  unsigned seed = 1;
  int threads = 0;
};

struct Result {
  std::string name;
  double seconds = 0, bytes_per_conv = 0;
  std::uint64_t generated = 0, workload_tokens = 0;
  std::uint64_t parks = 0, restores = 0, recomputes = 0;
  double park_ms = 0, restore_ms = 0;
};

unsigned window_of(const Opts &o) { return std::max(1u, o.conversations / o.oversubscription); }
// KV cells one conversation's history reaches by the last turn (+ slack for
// the final sampled token).
unsigned history_cells(const Opts &o) { return o.history + o.turns * (o.prompt_tokens + o.gen_tokens) + 16; }

Result run_workload(weft::Model &model, const Opts &o, const std::string &name, unsigned slots,
                    const weft::SpillParams &spill) {
  const unsigned ctx = std::max(slots * history_cells(o), 256u);
  weft::Executor ex(model, {.n_ctx = ctx,
                            .n_batch = std::min(512u, ctx),
                            .n_seq_max = slots,
                            .n_threads = o.threads,
                            .spill = spill});
  std::mt19937_64 rng(o.seed);  // the same prompts in every run
  const auto n_vocab = model.n_vocab();
  const unsigned n = o.conversations, w = window_of(o);
  {
    // Warm-up outside the timings: the first decodes pay one-time costs.
    auto warm = ex.create();
    warm.prompt(bench::random_tokens(rng, 32, n_vocab));
    while (!ex.step().idle) {}
    warm.dispose();
  }
  std::vector<weft::Conversation> convs;
  for (unsigned i = 0; i < n; ++i) convs.push_back(ex.create());

  // Histories, untimed: a window at a time, as the turns go.
  for (unsigned s = 0; s < n; s += w) {
    for (unsigned i = s; i < std::min(n, s + w); ++i) convs[i].prompt(bench::random_tokens(rng, o.history, n_vocab));
    while (!ex.step().idle) {}
  }
  const auto before = ex.stats();

  Result r{.name = name};
  double bytes_sum = 0;
  unsigned bytes_samples = 0;
  const auto t0 = bench::now_ns();
  for (unsigned turn = 0; turn < o.turns; ++turn) {
    for (unsigned s = 0; s < n; s += w) {
      const unsigned e = std::min(n, s + w);
      std::vector<weft::Generation> gens;
      for (unsigned i = s; i < e; ++i) {
        convs[i].prompt(bench::random_tokens(rng, o.prompt_tokens, n_vocab));
        // ignore_eos: a random model's early end token would cut a run short.
        gens.push_back(convs[i].generate({.max_tokens = o.gen_tokens, .ignore_eos = true}));
      }
      while (std::any_of(gens.begin(), gens.end(), [](const weft::Generation &g) { return !g.done(); })) ex.step();
      for (const auto &g : gens) r.generated += g.n_tokens();
      // Bytes one parked conversation holds: what a park or restore moves.
      const auto st = ex.stats();
      if (st.parked_ram > 0) bytes_sum += double(st.ram_bytes) / st.parked_ram, ++bytes_samples;
      else if (st.parked_disk > 0) bytes_sum += double(st.disk_bytes) / st.parked_disk, ++bytes_samples;
    }
  }
  r.seconds = bench::seconds_since(t0);
  const auto after = ex.stats();
  r.workload_tokens = std::uint64_t{n} * o.turns * o.prompt_tokens + r.generated;
  r.parks = after.parks - before.parks;
  r.restores = after.restores - before.restores;
  r.recomputes = after.recomputes - before.recomputes;
  r.park_ms = after.park_ms - before.park_ms;
  r.restore_ms = after.restore_ms - before.restore_ms;
  r.bytes_per_conv = bytes_samples > 0 ? bytes_sum / bytes_samples : 0;
  return r;
}

// memcpy of `count` blocks of `block` bytes, in seconds: the same bytes a
// park or restore moves, each copy between a different source and destination
// block in pools of at least 256 MiB each, so that neither side is cache-hot
// (a park reads the KV cache and writes a blob nobody touched since it was
// restored; a restore the reverse). Both pools are touched before timing, so
// page faults are not counted; the destination is read back so nothing folds.
double memcpy_seconds(std::size_t block, std::uint64_t count) {
  if (block == 0 || count == 0) return 0;
  const std::size_t pool_blocks = std::max<std::size_t>(2, ((std::size_t{256} << 20) + block - 1) / block);
  std::vector<std::uint8_t> src(pool_blocks * block, 1), dst(pool_blocks * block, 2);
  unsigned sink = 0;
  const auto t0 = bench::now_ns();
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::size_t from = (i % pool_blocks) * block, to = ((i * 7 + 3) % pool_blocks) * block;
    src[from + i % block] = static_cast<std::uint8_t>(i);
    std::memcpy(dst.data() + to, src.data() + from, block);
    sink += dst[to + (i * 7) % block];
  }
  const double s = bench::seconds_since(t0);
  return sink == 0xFFFFFFFFu ? s + 1e-12 : s;
}

nlohmann::json result_json(const Result &r, double resident_tps) {
  const double tps = r.seconds > 0 ? double(r.workload_tokens) / r.seconds : 0;
  const double moved = r.bytes_per_conv * double(r.parks + r.restores);
  const double spill_s = (r.park_ms + r.restore_ms) / 1000;
  const double memcpy_s = memcpy_seconds(static_cast<std::size_t>(r.bytes_per_conv), r.parks + r.restores);
  const double bps = spill_s > 0 ? moved / spill_s : 0, mbps = memcpy_s > 0 ? moved / memcpy_s : 0;
  return {{"run", r.name},
          {"seconds", r.seconds},
          {"tokens_generated", r.generated},
          {"workload_tokens", r.workload_tokens},
          {"tokens_per_s", tps},
          {"vs_resident", resident_tps > 0 ? tps / resident_tps : 0},
          {"parks", r.parks},
          {"restores", r.restores},
          {"recomputes", r.recomputes},
          {"park_ms", r.park_ms},
          {"restore_ms", r.restore_ms},
          {"bytes_per_conversation", r.bytes_per_conv},
          {"bytes_moved", moved},
          {"spill_bytes_per_s", bps},
          {"memcpy_bytes_per_s", mbps},
          {"vs_memcpy", mbps > 0 ? bps / mbps : 0}};
}

void run(Opts o) {
  const std::string path = bench::model_path(o.model);
  auto model = bench::load_model(path);
  if (o.threads == 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const unsigned w = window_of(o);
  std::string disk_dir = o.disk_dir.empty() ? std::filesystem::temp_directory_path().string() : o.disk_dir;

  fmt::print("\nweft bench spill: model {}, {} conversations, {} slots (1/{} resident), {} turns of {} prompt + {} "
             "generated tokens, history {} tokens, n_threads = {}, load average {:.2f}\n\n",
             path, o.conversations, w, o.oversubscription, o.turns, o.prompt_tokens, o.gen_tokens, o.history,
             o.threads, bench::load_average_1min());
  std::fflush(stdout);

  std::vector<Result> results;
  results.push_back(run_workload(model, o, "resident", std::min(256u, o.conversations), {}));
  const bool all = o.tier == "all";
  if (all || o.tier == "ram") results.push_back(run_workload(model, o, "ram", w, {}));
  if (all || o.tier == "disk")
    results.push_back(run_workload(model, o, "disk", w, {.ram_bytes = 0, .disk_dir = disk_dir}));
  if (all || o.tier == "recompute") results.push_back(run_workload(model, o, "recompute", w, {.ram_bytes = 0}));

  const double resident_tps = results[0].seconds > 0 ? double(results[0].workload_tokens) / results[0].seconds : 0;
  fmt::print("| {:<9} | {:>9} | {:>6} | {:>6} | {:>8} | {:>10} | {:>10} | {:>10} | {:>6} |\n", "run", "tok/s",
             "ratio", "parks", "restores", "recomputes", "spill MB/s", "memcpy MB/s", "ratio");
  fmt::print("|-----------|-----------|--------|--------|----------|------------|------------|-------------|--------|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto &r : results) {
    auto j = result_json(r, resident_tps);
    fmt::print("| {:<9} | {:>9.1f} | {:>6.2f} | {:>6} | {:>8} | {:>10} | {:>10.1f} | {:>11.1f} | {:>6.2f} |\n", r.name,
               j["tokens_per_s"].get<double>(), j["vs_resident"].get<double>(), r.parks, r.restores, r.recomputes,
               j["spill_bytes_per_s"].get<double>() / 1e6, j["memcpy_bytes_per_s"].get<double>() / 1e6,
               j["vs_memcpy"].get<double>());
    rows.push_back(std::move(j));
  }
  fmt::print("\ntargets (the issue's): ram tok/s >= 0.7x resident; park/restore bytes/s >= 0.5x memcpy\n"
             "bytes moved = (parks + restores) x the mean parked size of one conversation (from stats)\n");
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "spill"},
                               {"model", path},
                               {"model_description", model.description()},
                               {"conversations", o.conversations},
                               {"slots", w},
                               {"oversubscription", o.oversubscription},
                               {"turns", o.turns},
                               {"history_tokens", o.history},
                               {"prompt_tokens", o.prompt_tokens},
                               {"gen_tokens", o.gen_tokens},
                               {"n_threads", o.threads},
                               {"machine", bench::machine_info()},
                               {"rows", rows}});
  }
}

}  // namespace
}  // namespace bench_spill_cmd

void add_bench_spill(CLI::App &bench) {
  using namespace bench_spill_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("spill", "More conversations than the cache holds: parking tiers vs all resident");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the generated small model, made on first use)");
  cmd->add_option("-n,--conversations", o->conversations, "Conversations")->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  cmd->add_option("--oversubscription", o->oversubscription, "Conversations per slot: the cache holds 1/this")
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  cmd->add_option("--turns", o->turns, "Turns per conversation")->check(CLI::Range(1u, 1000u))->capture_default_str();
  cmd->add_option("--history", o->history, "Tokens of history each conversation starts with")
      ->check(CLI::Range(1u, 1u << 16))
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Prompt tokens per turn")->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--gen-tokens", o->gen_tokens, "Generated tokens per turn (M)")->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--tier", o->tier, "Parking tiers to measure")
      ->check(CLI::IsMember({"ram", "disk", "recompute", "all"}))
      ->capture_default_str();
  cmd->add_option("--disk-dir", o->disk_dir, "Directory for the disk tier (default: the system temp dir)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024))->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the random prompt tokens")->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the rows as JSON to this file");
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
