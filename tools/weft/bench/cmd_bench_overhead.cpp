// weft bench overhead: weft's own time per generated token — everything a
// step spends outside llama_decode (planning, batch building, logit copies,
// sampling, commits, callbacks), divided by the tokens it sampled.
//
// For each conversation count B and each sampler: B conversations get a
// short random prompt (decoded first, not timed), then generate T tokens
// each with ignore_eos, every step timed by its own StepResult (seconds
// minus decode_seconds). Reported per rep and as the median over reps; the
// per-step 99th percentile shows whether the overhead comes in spikes.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <random>
#include <thread>

#include "attention_cli.hpp"
#include "bench_common.hpp"
#include "bench_commands.hpp"
#include "model_cache.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_overhead_cmd {
namespace {

struct Opts {
  std::string model, preset = "tiny", json;
  std::vector<unsigned> convs{1, 16, 64};
  std::vector<double> temps{0.0, 0.8};
  unsigned tokens = 64, prompt = 16, reps = 5, seed = 1;
  int threads = 0;
  weft::FlashAttention flash_attn = weft::FlashAttention::automatic;
};

struct Rep {
  double overhead_us = 0;    // per sampled token, outside llama_decode
  double decode_us = 0;      // per sampled token, in llama_decode
  double step_p99_us = 0;    // a step's time outside llama_decode, 99th percentile
  std::uint64_t steps = 0, sampled = 0;
};

Rep run_rep(weft::Executor &ex, unsigned b, double temp, const Opts &o, std::mt19937_64 &rng) {
  const auto n_vocab = ex.model().n_vocab();
  std::vector<weft::Conversation> convs;
  for (unsigned i = 0; i < b; ++i) {
    convs.push_back(ex.create());
    convs.back().prompt(bench::random_tokens(rng, o.prompt, n_vocab));
  }
  while (!ex.step().idle) {
  }
  weft::GenerateParams gp{.max_tokens = o.tokens, .ignore_eos = true};
  if (temp > 0) {
    gp.sampler = weft::SamplerParams{.temperature = static_cast<float>(temp),
                                     .top_k = 40,
                                     .top_p = 0.95f,
                                     .seed = static_cast<std::uint32_t>(rng())};
  }
  std::vector<weft::Generation> gens;
  for (auto &c : convs) gens.push_back(c.generate(gp));
  Rep r;
  std::vector<double> per_step;
  double outside = 0, decode = 0;
  for (;;) {
    const auto s = ex.step();
    if (s.idle) break;
    if (s.tokens_sampled == 0 && s.tokens_decoded == 0) continue;
    outside += s.seconds - s.decode_seconds;
    decode += s.decode_seconds;
    per_step.push_back((s.seconds - s.decode_seconds) * 1e6);
    r.sampled += s.tokens_sampled;
    ++r.steps;
  }
  for (std::size_t i = 0; i < gens.size(); ++i) {
    if (gens[i].n_tokens() != o.tokens) {
      throw weft::Error(weft::Errc::backend, fmt::format("B={}: conversation {} generated {} tokens, expected {} ({})", b,
                                                         i, gens[i].n_tokens(), o.tokens,
                                                         weft::finish_reason_name(gens[i].reason())));
    }
  }
  for (auto &c : convs) c.dispose();
  while (!ex.step().idle) {
  }
  r.overhead_us = outside * 1e6 / static_cast<double>(r.sampled);
  r.decode_us = decode * 1e6 / static_cast<double>(r.sampled);
  r.step_p99_us = bench::percentile(per_step, 99);
  return r;
}

double median_of(const std::vector<Rep> &reps, double Rep::*field) {
  std::vector<double> v;
  for (const auto &r : reps) v.push_back(r.*field);
  return bench::percentile(v, 50);
}

void run(Opts o) {
  const std::string path = o.model.empty() ? ensure_preset_model(o.preset, 1) : o.model;
  auto model = bench::load_model(path);
  if (o.threads == 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const unsigned max_b = *std::max_element(o.convs.begin(), o.convs.end());
  const std::uint32_t cells = max_b * (o.prompt + o.tokens + 1);
  weft::Executor ex(model, {.n_ctx = std::max<std::uint32_t>(cells, 512),
                            .n_batch = std::max(512u, max_b),
                            .n_seq_max = max_b,
                            .n_threads = o.threads,
                            .flash_attn = o.flash_attn});
  const std::string attention = describe_attention(ex.stats());
  fmt::print("\nweft bench overhead: model {}, {} prompt + {} generated tokens per conversation, {} reps, "
             "n_threads = {}, {}\n\n",
             path, o.prompt, o.tokens, o.reps, o.threads, attention);
  fmt::print("| {:>4} | {:>11} | {:>19} | {:>15} | {:>19} | {:>10} |\n", "B", "temperature", "weft us/token (med)",
             "decode us/token", "step outside p99 us", "steps/rep");
  fmt::print("|------|-------------|---------------------|-----------------|---------------------|------------|\n");
  std::fflush(stdout);
  std::mt19937_64 rng(o.seed);
  run_rep(ex, 1, 0.0, o, rng);  // warm-up: graphs reserved, buffers grown
  nlohmann::json rows = nlohmann::json::array();
  for (unsigned b : o.convs) {
    for (double temp : o.temps) {
      std::vector<Rep> reps;
      for (unsigned i = 0; i < o.reps; ++i) reps.push_back(run_rep(ex, b, temp, o, rng));
      const double overhead = median_of(reps, &Rep::overhead_us), decode = median_of(reps, &Rep::decode_us),
                   p99 = median_of(reps, &Rep::step_p99_us);
      fmt::print("| {:>4} | {:>11.2f} | {:>19.2f} | {:>15.1f} | {:>19.1f} | {:>10} |\n", b, temp, overhead, decode, p99,
                 reps.front().steps);
      std::fflush(stdout);
      nlohmann::json each = nlohmann::json::array();
      for (const auto &r : reps) {
        each.push_back({{"overhead_us_per_token", r.overhead_us},
                        {"decode_us_per_token", r.decode_us},
                        {"step_outside_p99_us", r.step_p99_us},
                        {"steps", r.steps},
                        {"sampled", r.sampled}});
      }
      rows.push_back({{"b", b},
                      {"temperature", temp},
                      {"overhead_us_per_token_median", overhead},
                      {"decode_us_per_token_median", decode},
                      {"step_outside_p99_us_median", p99},
                      {"reps", each}});
    }
  }
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "overhead"},
                               {"model", path},
                               {"model_description", model.description()},
                               {"prompt_tokens", o.prompt},
                               {"generated_tokens", o.tokens},
                               {"n_threads", o.threads},
                               {"attention", attention},
                               {"machine", bench::machine_info()},
                               {"rows", rows}});
  }
}

}  // namespace
}  // namespace bench_overhead_cmd

void add_bench_overhead(CLI::App &bench) {
  using namespace bench_overhead_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("overhead", "weft's own time per generated token, outside llama_decode");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the generated --preset model)");
  cmd->add_option("--preset", o->preset, "Generated model when no --model is given")->capture_default_str();
  cmd->add_option("--convs", o->convs, "Conversations generating together (list)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  cmd->add_option("--temperature", o->temps,
                  "Samplers (list): 0 = greedy; above 0 = that temperature with top_k 40, top_p 0.95")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "Tokens generated per conversation")->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--prompt", o->prompt, "Random prompt tokens per conversation (decoded before timing)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "Repetitions per row (the median is reported)")->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024))->capture_default_str();
  add_flash_attn_option(*cmd, o->flash_attn);
  cmd->add_option("--seed", o->seed, "Seed of prompts and samplers")->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the rows (every rep) as JSON to this file");
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
