// weft bench throughput: llama-batched-bench's measurement, through weft.
//
// Same rows (every PP x TG x B), same phases and the same arithmetic as
// llama.cpp's tools/batched-bench: per row the cache is emptied, B sequences
// get PP prompt tokens each (or one shared prompt, forked, with --pps), T_PP
// times the prompt phase, then TG tokens per sequence are decoded B at a
// time and T_TG times that. The difference is that weft *samples* each token
// (greedy, through generate()) where batched-bench decodes random ones, so
// T_TG includes what a real user pays: sampling, logit copies, scheduling.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <random>
#include <thread>

#include "bench_common.hpp"
#include "bench_commands.hpp"
#include "attention_cli.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_throughput_cmd {
namespace {

struct Opts {
  std::string model, json;
  std::vector<unsigned> pp{128}, tg{32}, pl{1, 2, 4, 8, 16, 32};
  unsigned ctx = 0, batch = 2048, ubatch = 512, seed = 1;
  int threads = 0;
  bool pps = false, skip_unfit = false;
  weft::FlashAttention flash_attn = weft::FlashAttention::automatic;
};

struct Row {
  unsigned pp, tg, pl;
};

// KV cells a row needs, as batched-bench computes it for a unified cache.
std::uint64_t cells_needed(const Row &r, bool pps) {
  return pps ? std::uint64_t{r.pp} + std::uint64_t{r.pl} * r.tg : std::uint64_t{r.pl} * (r.pp + r.tg);
}

struct Phase {
  double seconds = 0, decode_seconds = 0;
  std::uint64_t steps = 0, tokens = 0;
};

// Steps until nothing is left; counts what llama_decode took.
Phase run_until_idle(weft::Executor &ex) {
  Phase ph;
  const auto t0 = bench::now_ns();
  for (;;) {
    const auto r = ex.step();
    ph.decode_seconds += r.decode_seconds;
    ph.tokens += r.tokens_decoded;
    if (r.tokens_decoded > 0) ++ph.steps;
    if (r.idle) break;
  }
  ph.seconds = bench::seconds_since(t0);
  return ph;
}

nlohmann::json run_row(weft::Executor &ex, const Row &row, bool pps, std::mt19937_64 &rng) {
  const auto n_vocab = ex.model().n_vocab();
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<weft::Token>> prompts;
  for (unsigned j = 0; j < (pps ? 1u : row.pl); ++j) prompts.push_back(bench::random_tokens(rng, row.pp, n_vocab));

  // Prompt phase: every sequence's prompt queued, then stepped to the end.
  const auto t_pp0 = bench::now_ns();
  for (auto &p : prompts) {
    convs.push_back(ex.create());
    convs.back().prompt(p);
  }
  Phase pp = run_until_idle(ex);
  pp.seconds = bench::seconds_since(t_pp0);
  // batched-bench copies the shared prompt outside both timers; so do we.
  if (pps)
    for (unsigned j = 1; j < row.pl; ++j) convs.push_back(convs.front().fork());

  // Generation phase: TG greedy tokens each, B decoded per step. Every
  // sampled token joins its conversation and is decoded at the next step, so
  // stepping to idle decodes exactly TG tokens per sequence, as batched-bench.
  // A random model may favour an end-of-generation token: ignore_eos keeps
  // every row at the same count.
  std::vector<weft::Generation> gens(convs.size());
  const auto t_tg0 = bench::now_ns();
  for (std::size_t i = 0; i < convs.size(); ++i)
    gens[i] = convs[i].generate({.max_tokens = row.tg, .ignore_eos = true});
  Phase tg = run_until_idle(ex);
  tg.seconds = bench::seconds_since(t_tg0);
  for (auto &c : convs) c.dispose();

  const std::uint64_t want_pp = std::uint64_t{pps ? 1u : row.pl} * row.pp, want_tg = std::uint64_t{row.pl} * row.tg;
  if (pp.tokens != want_pp || tg.tokens != want_tg) {
    throw weft::Error(weft::Errc::backend,
                      fmt::format("row PP={} TG={} B={}: decoded {} prompt and {} generated tokens, expected {} and {}",
                                  row.pp, row.tg, row.pl, pp.tokens, tg.tokens, want_pp, want_tg));
  }
  const double t = pp.seconds + tg.seconds;
  return {{"pp", row.pp},
          {"tg", row.tg},
          {"b", row.pl},
          {"n_kv", cells_needed(row, pps)},
          {"t_pp", pp.seconds},
          {"s_pp", static_cast<double>(want_pp) / pp.seconds},
          {"t_tg", tg.seconds},
          {"s_tg", static_cast<double>(want_tg) / tg.seconds},
          {"t", t},
          {"s", static_cast<double>(want_pp + want_tg) / t},
          // Where the time went: llama_decode versus everything weft adds.
          {"decode_s_pp", pp.decode_seconds},
          {"decode_s_tg", tg.decode_seconds},
          {"steps_pp", pp.steps},
          {"steps_tg", tg.steps}};
}

void run(Opts o) {
  std::vector<Row> rows;
  for (unsigned pp : o.pp)
    for (unsigned tg : o.tg)
      for (unsigned pl : o.pl) rows.push_back({pp, tg, pl});
  const std::string path = bench::model_path(o.model);
  auto model = bench::load_model(path);
  const unsigned ctx = o.ctx != 0 ? o.ctx : static_cast<unsigned>(model.n_ctx_train());
  if (o.threads == 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // As llama.cpp (and so batched-bench) does: a batch never exceeds the context.
  o.batch = std::min(o.batch, ctx);
  o.ubatch = std::min(o.ubatch, o.batch);
  const unsigned max_pl = *std::max_element(o.pl.begin(), o.pl.end());
  if (o.batch < max_pl) {
    throw weft::Error(weft::Errc::invalid_argument,
                      fmt::format("--batch {} is below the largest --parallel level {}: llama.cpp needs n_batch >= the "
                                  "number of sequences (row B={} cannot run)",
                                  o.batch, max_pl, max_pl));
  }
  weft::Executor ex(model, {.n_ctx = ctx,
                            .n_batch = o.batch,
                            .n_ubatch = o.ubatch,
                            .n_seq_max = max_pl,
                            .n_threads = o.threads,
                            .flash_attn = o.flash_attn});
  const std::uint32_t n_ctx = ex.stats().n_ctx;
  const std::string attention = describe_attention(ex.stats());

  // llama-batched-bench skips rows that do not fit without a word; say which and why.
  std::vector<Row> fit;
  std::string unfit;
  for (const auto &r : rows) {
    const auto need = cells_needed(r, o.pps);
    if (need <= n_ctx) {
      fit.push_back(r);
      continue;
    }
    unfit += fmt::format("\n  row PP={} TG={} B={} needs {} KV cells ({}), the context has {}", r.pp, r.tg, r.pl, need,
                         o.pps ? "PP + B*TG" : "B*(PP+TG)", n_ctx);
  }
  if (!unfit.empty() && !o.skip_unfit) {
    throw weft::Error(weft::Errc::out_of_range,
                      fmt::format("rows that do not fit the context:{}\nraise --ctx, drop those levels, or pass "
                                  "--skip-unfit to run the rest",
                                  unfit));
  }
  if (!unfit.empty()) fmt::print(stderr, "weft: skipping rows that do not fit the context:{}\n", unfit);

  fmt::print("\nweft bench throughput: model {}, n_kv_max = {}, n_batch = {}, n_ubatch = {}, is_pp_shared = {}, "
             "n_threads = {}, --flash-attn {}: {}\n\n",
             path, n_ctx, o.batch, o.ubatch, o.pps ? 1 : 0, o.threads, flash_attn_name(o.flash_attn), attention);
  fmt::print("|{:>6} | {:>6} | {:>4} | {:>6} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} |\n", "PP", "TG", "B",
             "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
  fmt::print("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n");
  std::fflush(stdout);

  // Warm-up, as batched-bench: one 16-token decode before any row.
  std::mt19937_64 rng(o.seed);
  {
    auto warm = ex.create();
    warm.prompt(bench::random_tokens(rng, 16, model.n_vocab()));
    run_until_idle(ex);
    warm.dispose();
  }

  nlohmann::json out_rows = nlohmann::json::array();
  for (const auto &r : fit) {
    auto j = run_row(ex, r, o.pps, rng);
    fmt::print("|{:>6} | {:>6} | {:>4} | {:>6} | {:>8.3f} | {:>8.2f} | {:>8.3f} | {:>8.2f} | {:>8.3f} | {:>8.2f} |\n",
               r.pp, r.tg, r.pl, j["n_kv"].get<std::uint64_t>(), j["t_pp"].get<double>(), j["s_pp"].get<double>(),
               j["t_tg"].get<double>(), j["s_tg"].get<double>(), j["t"].get<double>(), j["s"].get<double>());
    std::fflush(stdout);
    out_rows.push_back(std::move(j));
  }
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "throughput"},
                               {"engine", "weft"},
                               {"model", path},
                               {"model_description", model.description()},
                               {"n_kv_max", n_ctx},
                               {"n_batch", o.batch},
                               {"n_ubatch", o.ubatch},
                               {"n_threads", o.threads},
                               {"flash_attn_asked", flash_attn_name(o.flash_attn)},
                               {"flash_attn", flash_attn_name(ex.stats().flash_attn)},
                               {"attention", attention},
                               {"is_pp_shared", o.pps},
                               {"machine", bench::machine_info()},
                               {"rows", out_rows}});
  }
}

}  // namespace
}  // namespace bench_throughput_cmd

void add_bench_throughput(CLI::App &bench) {
  using namespace bench_throughput_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("throughput", "llama-batched-bench's rows (PP, TG, B), run through weft's executor");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the generated small model, made on first use)");
  cmd->add_option("--pp,--npp", o->pp, "Prompt tokens per conversation (list: 128,256)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--tg,--ntg", o->tg, "Generated tokens per conversation (list)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--parallel,--npl", o->pl, "Conversations decoding together (list)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "KV cells (0 = the model's training context)")->capture_default_str();
  cmd->add_option("--batch", o->batch, "n_batch: most tokens per decode")->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--ubatch", o->ubatch, "n_ubatch: micro-batch size")->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024))->capture_default_str();
  add_flash_attn_option(*cmd, o->flash_attn);
  cmd->add_flag("--pps", o->pps, "One shared prompt, forked to every conversation (batched-bench -pps)");
  cmd->add_flag("--skip-unfit", o->skip_unfit, "Skip rows that do not fit the context (after naming them)");
  cmd->add_option("--seed", o->seed, "Seed of the random prompt tokens")->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the rows as JSON to this file");
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
