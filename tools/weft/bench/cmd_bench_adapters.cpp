// weft bench adapters: conversations under per-conversation LoRA adapters in
// 1, 2, 4 and 8 groups (a group: the conversations of one adapter), on one
// weft executor and on llama-server with per-request LoRA — what grouping
// costs each engine, and how evenly each serves the groups.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <thread>

#include "bench_commands.hpp"
#include "attention_cli.hpp"
#include "bench_common.hpp"
#include "bench_options.hpp"
#include "bench_server.hpp"

#if __has_include(<httplib.h>)
#include <httplib.h>
#define WEFT_BENCH_HTTP 1
#endif

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_adapters_cmd {
namespace {

struct Opts {
  std::string model, json, target = "both", server_binary, groups_list = "1,2,4,8";
  unsigned conversations = 16, pp = 128, tg = 64, reps = 3, rank = 8;
  int threads = 0;
  bool quiet = false;
  weft::FlashAttention flash_attn = weft::FlashAttention::automatic;
};

// One run's numbers.
struct Run {
  std::string attention;  // weft: the executor's attention kernel and why
  double seconds = 0;     // first prompt to last token
  double tg_tok_s = 0;    // generated tokens / seconds
  double all_tok_s = 0;   // (prompt + generated) / seconds
  double first_done = 0;  // seconds until the first group finished (spread across groups)
  double last_done = 0;   // ...and the last
  std::uint64_t switches = 0;
  double switch_ms = 0;
  double step_p50_ms = 0, step_p99_ms = 0;
};

std::vector<unsigned> parse_groups(const std::string &list) {
  std::vector<unsigned> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const unsigned g = static_cast<unsigned>(std::stoul(item));
    if (g == 0 || g > 8) throw weft::Error(weft::Errc::invalid_argument, fmt::format("--groups: {} is not in 1..8", g));
    out.push_back(g);
  }
  return out;
}

// The same prompts for every group count and engine.
std::vector<std::vector<weft::Token>> prompts(const Opts &o, const weft::Model &m) {
  std::mt19937_64 rng(42);
  std::vector<std::vector<weft::Token>> out;
  for (unsigned i = 0; i < o.conversations; ++i) {
    auto t = bench::random_tokens(rng, o.pp - 1, m.n_vocab(), 3);
    t.insert(t.begin(), m.bos());
    out.push_back(std::move(t));
  }
  return out;
}

// Room for every conversation whole, and at least one full batch.
unsigned ctx_for(const Opts &o) { return std::max(512u, o.conversations * (o.pp + o.tg + 8)); }

Run run_weft(const Opts &o, const weft::Model &m, const std::vector<weft::Adapter> &adapters, unsigned groups,
             const std::vector<std::vector<weft::Token>> &ps) {
  weft::ExecutorParams p;
  p.n_ctx = ctx_for(o);
  p.n_batch = 512;
  p.n_seq_max = o.conversations;
  p.n_threads = o.threads;
  p.flash_attn = o.flash_attn;
  p.prefix_cache_cells = 0;  // random prompts share nothing; keep the comparison plain
  weft::Executor ex(m, p);
  std::vector<weft::Conversation> convs;
  std::vector<weft::Generation> gens;
  std::vector<unsigned> made(o.conversations, 0);
  std::vector<double> group_done(groups, 0);
  const auto t0 = bench::now_ns();
  for (unsigned i = 0; i < o.conversations; ++i) {
    convs.push_back(ex.create());
    convs.back().set_adapters({{adapters[i % groups]}});
    convs.back().prompt(ps[i]);
    gens.push_back(convs.back().generate({.max_tokens = o.tg, .ignore_eos = true}));  // as llama-server is told
  }
  std::vector<double> steps;
  for (;;) {
    const auto r = ex.step();
    if (r.tokens_decoded > 0) steps.push_back(r.seconds * 1e3);
    bool all = true;
    for (unsigned i = 0; i < o.conversations; ++i) {
      if (made[i] >= o.tg) continue;
      if (!gens[i].done()) {
        all = false;
        continue;
      }
      const auto res = gens[i].result();
      if (res.reason != weft::FinishReason::max_tokens) {
        throw weft::Error(weft::Errc::backend, fmt::format("generation {} ended with {}{}", i,
                                                           weft::finish_reason_name(res.reason),
                                                           res.error ? ": " + std::string(res.error->what()) : ""));
      }
      made[i] = static_cast<unsigned>(res.tokens.size());
    }
    for (unsigned g = 0; g < groups; ++g) {
      if (group_done[g] > 0) continue;
      bool done = true;
      for (unsigned i = g; i < o.conversations; i += groups) done = done && made[i] >= o.tg;
      if (done) group_done[g] = bench::seconds_since(t0);
    }
    if (all) break;
    if (r.idle) throw weft::Error(weft::Errc::backend, "weft went idle before every generation finished");
  }
  Run run;
  run.seconds = bench::seconds_since(t0);
  run.tg_tok_s = o.conversations * o.tg / run.seconds;
  run.all_tok_s = o.conversations * (o.pp + o.tg) / run.seconds;
  run.first_done = *std::min_element(group_done.begin(), group_done.end());
  run.last_done = *std::max_element(group_done.begin(), group_done.end());
  const auto st = ex.stats();
  run.attention = describe_attention(st);
  run.switches = st.adapter_switches;
  run.switch_ms = st.adapter_switch_ms;
  run.step_p50_ms = bench::percentile(steps, 50);
  run.step_p99_ms = bench::percentile(steps, 99);
  return run;
}

#ifdef WEFT_BENCH_HTTP
Run run_server(const Opts &o, bench::ServerProcess &server, unsigned groups,
               const std::vector<std::vector<weft::Token>> &ps) {
  std::vector<double> done(o.conversations, 0);
  std::vector<std::string> errors(o.conversations);
  const auto t0 = bench::now_ns();
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < o.conversations; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client cli("127.0.0.1", server.port());
      cli.set_read_timeout(900, 0);
      const nlohmann::json body = {{"prompt", ps[i]},
                                   {"n_predict", o.tg},
                                   {"ignore_eos", true},
                                   {"temperature", 0},
                                   {"cache_prompt", false},
                                   {"lora", nlohmann::json::array({{{"id", i % groups}, {"scale", 1.0}}})}};
      auto res = cli.Post("/completion", body.dump(), "application/json");
      if (!res || res->status != 200) {
        errors[i] = res ? fmt::format("HTTP {}: {}", res->status, res->body.substr(0, 200)) : "no response";
      }
      done[i] = bench::seconds_since(t0);
    });
  }
  for (auto &t : threads) t.join();
  for (const auto &e : errors) {
    if (!e.empty()) throw weft::Error(weft::Errc::backend, fmt::format("llama-server: {}", e));
  }
  Run run;
  run.seconds = *std::max_element(done.begin(), done.end());
  run.tg_tok_s = o.conversations * o.tg / run.seconds;
  run.all_tok_s = o.conversations * (o.pp + o.tg) / run.seconds;
  std::vector<double> group_done(groups, 0);
  for (unsigned i = 0; i < o.conversations; ++i) group_done[i % groups] = std::max(group_done[i % groups], done[i]);
  run.first_done = *std::min_element(group_done.begin(), group_done.end());
  run.last_done = *std::max_element(group_done.begin(), group_done.end());
  return run;
}
#endif

Run median(std::vector<Run> runs) {
  std::sort(runs.begin(), runs.end(), [](const Run &a, const Run &b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

nlohmann::json to_json(const Run &r) {
  return {{"seconds", r.seconds},         {"tg_tokens_per_s", r.tg_tok_s}, {"tokens_per_s", r.all_tok_s},
          {"first_group_done_s", r.first_done}, {"last_group_done_s", r.last_done}, {"adapter_switches", r.switches},
          {"switch_ms", r.switch_ms},     {"step_ms_p50", r.step_p50_ms},  {"step_ms_p99", r.step_p99_ms}};
}

void run(Opts o) {
  const auto groups = parse_groups(o.groups_list);
  const std::string path = bench::model_path(o.model);
  const auto model = bench::load_model(path);
  if (o.threads == 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Eight LoRAs for this model, made once per run (seconds).
  const bench::BenchLoras loras(model, path, 8, o.rank);
  const auto &files = loras.files;
  const auto &adapters = loras.adapters;
  const auto ps = prompts(o, model);
  nlohmann::json results = nlohmann::json::array();
  std::vector<std::pair<unsigned, Run>> weft_runs, server_runs;
  std::string weft_attention = "not run", server_attention = "not run";
  if (o.target != "server") {
    for (unsigned g : groups) {
      std::vector<Run> reps;
      for (unsigned r = 0; r < o.reps; ++r) reps.push_back(run_weft(o, model, adapters, g, ps));
      weft_runs.emplace_back(g, median(reps));
      weft_attention = weft_runs.back().second.attention;
      if (!o.quiet) fmt::print(stderr, "weft, {} groups: {:.2f} s\n", g, weft_runs.back().second.seconds);
    }
  }
#ifdef WEFT_BENCH_HTTP
  if (o.target != "weft") {
    if (o.server_binary.empty()) o.server_binary = bench::default_llama_server();
    std::vector<std::string> extra{"--lora-init-without-apply"};
    for (const auto &f : files) {
      extra.push_back("--lora");
      extra.push_back(f);
    }
    bench::ServerProcess server({.kind = bench::ServerKind::llama_server,
                                 .binary = o.server_binary,
                                 .model = path,
                                 .log_path = fmt::format("/tmp/weft-bench-adapters-server-{}.log", ::getpid()),
                                 .ctx = ctx_for(o),
                                 .batch = 512,
                                 .ubatch = 512,
                                 .slots = o.conversations,
                                 .threads = o.threads,
                                 .flash_attn = flash_attn_name(o.flash_attn),
                                 .extra_args = extra});
    server_attention = server.flash_attn_used();
    for (unsigned g : groups) {
      std::vector<Run> reps;
      for (unsigned r = 0; r < o.reps; ++r) reps.push_back(run_server(o, server, g, ps));
      server_runs.emplace_back(g, median(reps));
      if (!o.quiet) fmt::print(stderr, "llama-server, {} groups: {:.2f} s\n", g, server_runs.back().second.seconds);
    }
  }
#else
  if (o.target != "weft") throw weft::Error(weft::Errc::invalid_argument, "this weft was built without an HTTP client");
#endif

  fmt::print("\nweft bench adapters: {} conversations, pp {} / tg {} each, LoRA rank {} on every one, in 1..8 groups "
             "(conversation i uses LoRA i mod groups); {} threads, medians of {} runs, load {:.2f}\n\n",
             o.conversations, o.pp, o.tg, o.rank, o.threads, o.reps, bench::load_average_1min());
  fmt::print("--flash-attn {}: weft {}; llama-server {}\n\n", flash_attn_name(o.flash_attn), weft_attention,
             server_attention);
  fmt::print("| {:<12} | {:>6} | {:>7} | {:>8} | {:>9} | {:>10} | {:>10} | {:>8} | {:>9} |\n", "engine", "groups",
             "wall s", "tg tok/s", "vs 1 grp", "1st grp s", "last grp s", "switches", "switch ms");
  fmt::print("|--------------|--------|---------|----------|-----------|------------|------------|----------|-----------|\n");
  auto table = [&](const char *name, const std::vector<std::pair<unsigned, Run>> &runs) {
    for (const auto &[g, r] : runs) {
      const double one = runs.front().second.tg_tok_s;
      fmt::print("| {:<12} | {:>6} | {:>7.2f} | {:>8.1f} | {:>8.2f}x | {:>10.2f} | {:>10.2f} | {:>8} | {:>9.2f} |\n",
                 name, g, r.seconds, r.tg_tok_s, r.tg_tok_s / one, r.first_done, r.last_done, r.switches,
                 r.switch_ms);
      auto j = to_json(r);
      j["engine"] = name;
      j["groups"] = g;
      results.push_back(std::move(j));
    }
  };
  table("weft", weft_runs);
  table("llama-server", server_runs);
  fmt::print("(wall: first request to last token; tg tok/s = generated tokens / wall; 1st/last grp: when the first and "
             "the last group had all their tokens; switches, switch ms: weft's adapter switches per run and what one "
             "adds to a decode)\n");
  if (!weft_runs.empty() && weft_runs.size() == server_runs.size()) {
    for (std::size_t i = 0; i < weft_runs.size(); ++i) {
      fmt::print("{} groups: weft/llama-server tok/s {:.2f}x\n", weft_runs[i].first,
                 weft_runs[i].second.tg_tok_s / server_runs[i].second.tg_tok_s);
    }
  }
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "adapters"},
                               {"model", path},
                               {"model_description", model.description()},
                               {"conversations", o.conversations},
                               {"pp", o.pp},
                               {"tg", o.tg},
                               {"rank", o.rank},
                               {"threads", o.threads},
                               {"flash_attn_asked", flash_attn_name(o.flash_attn)},
                               {"weft_attention", weft_attention},
                               {"server_attention", server_attention},
                               {"reps", o.reps},
                               {"machine", bench::machine_info()},
                               {"results", results}});
  }
}

}  // namespace
}  // namespace bench_adapters_cmd

void add_bench_adapters(CLI::App &bench) {
  using namespace bench_adapters_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("adapters", "Conversations under per-conversation LoRAs in 1..8 groups: weft vs "
                                               "llama-server with per-request LoRA (throughput, group spread)");
  bench::add_model_and_target(*cmd, o->model, o->target);
  cmd->add_option("--groups", o->groups_list, "Group counts to run, comma-separated, each 1..8")->capture_default_str();
  cmd->add_option("--conversations", o->conversations, "Conversations")->check(CLI::Range(1u, 256u))->capture_default_str();
  cmd->add_option("--pp", o->pp, "Prompt tokens each")->check(CLI::Range(1u, 8192u))->capture_default_str();
  cmd->add_option("--tg", o->tg, "Generated tokens each")->check(CLI::Range(1u, 8192u))->capture_default_str();
  cmd->add_option("--rank", o->rank, "LoRA rank")->check(CLI::Range(1u, 64u))->capture_default_str();
  cmd->add_option("--reps", o->reps, "Runs per point (the median is reported)")->check(CLI::Range(1u, 50u))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (0 = all cores)")->capture_default_str();
  add_flash_attn_option(*cmd, o->flash_attn);
  cmd->add_option("--server", o->server_binary, "llama-server binary (default: the one built with weft's llama.cpp)");
  cmd->add_option("--json", o->json, "Also write the results here");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress lines");
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
