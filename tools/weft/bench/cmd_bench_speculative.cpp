// weft bench speculative: what speculative decoding does for one
// conversation's reply when 1, 4 or 16 talk at once (issue 37). Each
// conversation has its prompt decoded (untimed), then all generate a
// --tokens reply at once, greedy; per conversation: the time from the
// generation's start to its last token, and its tokens per second. weft
// without drafts, with a lookup drafter (adaptive: as many drafts as the
// cost model says pay) and with it forced (adaptive off: every draft the
// step allows), beside llama-server without and with its own speculative
// decoding (--spec-type, default ngram-simple; predicted_ms from its
// timings), same pin, same model, prompts and sampling; every cell run
// --reps times, the engines alternating, medians. Then the floor behind
// it: the decode time of 1 vs 2..--floor-max tokens of one sequence (weft's
// own verification decodes, logits at every position).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "attention_cli.hpp"
#include "bench_commands.hpp"
#include "bench_common.hpp"
#include "bench_mixed.hpp"
#include "bench_speculative.hpp"
#include "model_cache.hpp"
#include "weft/executor.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_speculative {
namespace {

using Clock = std::chrono::steady_clock;

enum class Mode { none, adaptive, forced, model, model_forced, server, server_spec, server_draft };
constexpr Mode kModes[] = {Mode::none,   Mode::adaptive,    Mode::forced,      Mode::model,
                           Mode::model_forced, Mode::server, Mode::server_spec, Mode::server_draft};

const char *mode_name(Mode m) {
  switch (m) {
    case Mode::none: return "weft";
    case Mode::adaptive: return "weft lookup";
    case Mode::forced: return "weft lookup forced";
    case Mode::server: return "llama-server";
    case Mode::server_spec: return "llama-server spec";
    case Mode::model: return "weft draft model";
    case Mode::model_forced: return "weft draft forced";
    case Mode::server_draft: return "llama-server draft";
  }
  return "?";
}

bool is_server(Mode m) { return m == Mode::server || m == Mode::server_spec || m == Mode::server_draft; }
bool uses_draft_model(Mode m) { return m == Mode::model || m == Mode::model_forced || m == Mode::server_draft; }

// A trained npc model gets dialogue it was not trained on (another corpus
// seed), each cut after an NPC's name: its reply is what is timed.
Inputs npc_inputs(const weft::Model &m, unsigned n) {
  Inputs in;
  const auto dialogues = weft::make_npc_dialogues({.seed = 999, .target_bytes = 64u * 1024});
  for (unsigned i = 0; i < n; ++i) {
    const std::string &d = dialogues[i % dialogues.size()];
    const auto player = d.find("Player:");
    const auto cut = d.find(':', d.find('\n', player == std::string::npos ? 0 : player) + 1);
    auto p = m.tokenize(d.substr(0, cut == std::string::npos ? d.size() : cut + 1), {.add_bos = true});
    in.prompts.push_back(std::move(p));
  }
  for (weft::Token t : bench::invalid_utf8_tokens(m)) in.bias.emplace_back(t, -INFINITY);
  return in;
}

Inputs make_inputs(const weft::Model &m, const Opts &o, unsigned n) {
  if (m.meta("weft.preset") == "npc") return npc_inputs(m, n);
  Inputs in;
  std::mt19937_64 rng(11);
  const unsigned half = std::max(1u, o.prompt / 2);
  for (unsigned i = 0; i < n; ++i) {
    // Its second half repeats its first: lookup has something to copy, as an
    // NPC's reply copies names and prices from its prompt.
    auto p = bench::random_tokens(rng, half, m.n_vocab(), 3);
    auto again = p;
    p.insert(p.end(), again.begin(), again.end());
    if (m.bos() >= 0) p.front() = m.bos();
    in.prompts.push_back(std::move(p));
  }
  for (weft::Token t : bench::invalid_utf8_tokens(m)) in.bias.emplace_back(t, -INFINITY);
  for (unsigned k = 0; k < o.bias_tokens; ++k) in.bias.emplace_back(static_cast<weft::Token>(300 + k), 30.0f);
  return in;
}

weft::SamplerParams sampler(const Inputs &in) {
  weft::SamplerParams sp;  // greedy
  for (const auto &[t, b] : in.bias) sp.logit_bias.push_back({t, b});
  return sp;
}

void run_idle(weft::Executor &ex) {
  for (int i = 0; i < 1000000; ++i) {
    if (ex.step().idle) return;
  }
  throw weft::Error(weft::Errc::backend, "the executor did not become idle");
}

std::vector<Reply> run_weft(weft::Executor &ex, const Opts &o, const Inputs &in, unsigned n, Mode mode) {
  std::vector<weft::Conversation> cs;
  for (unsigned i = 0; i < n; ++i) {
    cs.push_back(ex.create());
    cs.back().prompt(in.prompts[i]);
  }
  run_idle(ex);  // prompts decoded, untimed
  weft::GenerateParams gp{.max_tokens = o.tokens, .sampler = sampler(in), .ignore_eos = true};
  const bool model = mode == Mode::model || mode == Mode::model_forced;
  weft::SpeculativeParams sp{.drafter = model ? weft::Drafter::model : weft::Drafter::lookup,
                             .max_draft = o.draft_max,
                             .adaptive = mode == Mode::adaptive || mode == Mode::model};
  gp.speculative = mode == Mode::none ? weft::SpeculativeParams{} : sp;
  std::vector<weft::Generation> gens;
  std::vector<double> end(n, -1);
  const auto t0 = Clock::now();
  for (auto &c : cs) gens.push_back(c.generate(gp));
  for (unsigned left = n; left > 0;) {
    ex.step();
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    for (unsigned i = 0; i < n; ++i) {
      if (end[i] < 0 && gens[i].done()) end[i] = t, --left;
    }
  }
  std::vector<Reply> out;
  for (unsigned i = 0; i < n; ++i) {
    const auto r = gens[i].result();
    out.push_back({end[i], static_cast<std::uint32_t>(r.tokens.size()), r.drafted, r.accepted});
  }
  for (auto &c : cs) c.dispose();
  run_idle(ex);
  return out;
}

struct Cell {
  std::vector<Reply> replies;  // every conversation of every run
  double median_s() const {
    std::vector<double> v;
    for (const auto &r : replies) v.push_back(r.seconds);
    return bench::percentile(v, 50);
  }
  double acceptance() const {
    double d = 0, a = 0;
    for (const auto &r : replies) d += r.drafted, a += r.accepted;
    return d > 0 ? a / d : 0;
  }
  double drafted_per_reply() const {
    double d = 0;
    for (const auto &r : replies) d += r.drafted;
    return replies.empty() ? 0 : d / static_cast<double>(replies.size());
  }
};

// The floor: one conversation, a reply forced to one token (+100), so that
// lookup always drafts max_draft tokens and all are kept: every step then
// decodes exactly k = max_draft + 1 tokens of one sequence with logits at
// each (k = 1: no drafts). Median llama_decode time of those steps.
std::vector<double> measure_floor(weft::Executor &ex, const Opts &o, const Inputs &in) {
  std::vector<double> ms;
  for (unsigned k = 1; k <= o.floor_max; ++k) {
    auto c = ex.create();
    c.prompt(in.prompts[0]);
    run_idle(ex);
    weft::SamplerParams s;
    s.logit_bias.push_back({in.prompts[0].back(), 100.0f});
    weft::GenerateParams gp{.max_tokens = (k + 1) * (o.floor_reps + 3), .sampler = s, .ignore_eos = true};
    gp.speculative = k == 1 ? weft::SpeculativeParams{}
                            : weft::SpeculativeParams{.drafter = weft::Drafter::lookup, .max_draft = k - 1,
                                                      .ngram_max = 1, .ngram_min = 1, .adaptive = false};
    auto g = c.generate(gp);
    std::vector<double> t;
    while (!g.done()) {
      const auto r = ex.step();
      if (r.tokens_decoded == k && r.decode_calls == 1 && r.tokens_drafted == k - 1) t.push_back(r.decode_seconds * 1e3);
    }
    c.dispose();
    run_idle(ex);
    ms.push_back(t.empty() ? NAN : bench::percentile(t, 50));
  }
  return ms;
}

std::vector<std::pair<std::string, std::string>> pick_models(const Opts &o) {
  std::vector<std::pair<std::string, std::string>> models;  // (label, path)
  for (const auto &p : o.models) models.emplace_back(std::filesystem::path(p).stem().string(), p);
  if (!models.empty()) return models;
  models.emplace_back("small", ensure_preset_model("small", 1));
  std::error_code ec;
  std::string npc;
  for (const auto &e : std::filesystem::directory_iterator(std::filesystem::path(cache_dir()) / "models", ec)) {
    const auto name = e.path().filename().string();
    if (name.starts_with("npc-") && name.ends_with(".gguf")) npc = e.path().string();
  }
  if (npc.empty()) {
    fmt::print("(no trained npc model in {}/models: skipped; `weft make-model --preset npc` trains it, minutes)\n",
               cache_dir());
  } else {
    models.emplace_back("npc", npc);
  }
  return models;
}

void run(const Opts &o) {
  Opts opt = o;
  if (opt.threads == 0) opt.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const unsigned most = *std::max_element(o.conversations.begin(), o.conversations.end());
  const unsigned per_conv = 2 * std::max(1u, o.prompt / 2) + o.tokens + o.draft_max + 8;
  const unsigned ctx = std::max(256u, most * per_conv);
  opt.batch = std::min(std::max(o.batch, most), ctx);  // both engines' batch
  const bool with_server = o.target != "weft", with_weft = o.target != "server";
  if (with_server && !have_http()) {
    throw weft::Error(weft::Errc::invalid_argument, "this weft was built without an HTTP client: --target weft");
  }
  nlohmann::json results = nlohmann::json::array();
  const double load_before = bench::load_average_1min();
  for (const auto &[label, path] : pick_models(o)) {
    auto m = bench::load_model(path);
    const Inputs in = make_inputs(m, o, most);
    weft::ExecutorParams xp{.n_ctx = ctx, .n_batch = opt.batch, .n_seq_max = most, .n_threads = opt.threads,
                            .flash_attn = o.flash_attn};
    if (!o.draft_model.empty()) {
      xp.draft_model = weft::DraftModelParams{
          .model = bench::load_model(o.draft_model), .n_ctx = ctx, .n_seq_max = most, .p_min = o.draft_p_min};
    }
    weft::Executor ex(m, xp);
    const auto st = ex.stats();
    // llama-server runs the kernel weft chose (auto: weft's probe, llama.cpp's own rule otherwise).
    const std::string server_fa = st.flash_attn == weft::FlashAttention::enabled    ? "on"
                                  : st.flash_attn == weft::FlashAttention::disabled ? "off"
                                                                                    : "auto";
    std::unique_ptr<ServerEngine> plain, spec, draft;
    if (with_server) {
      plain = std::make_unique<ServerEngine>(opt, path, most, ctx, ServerKind::plain, server_fa);
      spec = std::make_unique<ServerEngine>(opt, path, most, ctx, ServerKind::spec, server_fa);
      if (!o.draft_model.empty()) draft = std::make_unique<ServerEngine>(opt, path, most, ctx, ServerKind::draft, server_fa);
    }
    std::vector<Mode> modes;
    for (Mode md : kModes) {
      if ((is_server(md) ? with_server : with_weft) && (!uses_draft_model(md) || !o.draft_model.empty())) {
        modes.push_back(md);
      }
    }
    std::map<std::pair<unsigned, Mode>, Cell> cells;
    for (unsigned r = 0; r < o.reps; ++r) {
      for (unsigned n : o.conversations) {
        for (std::size_t k = 0; k < modes.size(); ++k) {
          const Mode md = modes[(k + r) % modes.size()];  // each run starts with another engine
          auto replies = md == Mode::server         ? plain->run(in, n, o.tokens)
                         : md == Mode::server_spec  ? spec->run(in, n, o.tokens)
                         : md == Mode::server_draft ? draft->run(in, n, o.tokens)
                                                    : run_weft(ex, opt, in, n, md);
          auto &cell = cells[{n, md}].replies;
          cell.insert(cell.end(), replies.begin(), replies.end());
          if (!o.quiet) fmt::print(stderr, "{} run {}: {} x{}: {:.3f} s\n", label, r + 1, mode_name(md), n,
                                   Cell{replies}.median_s());
        }
      }
    }
    const std::vector<double> floor = with_weft ? measure_floor(ex, opt, in) : std::vector<double>{};

    fmt::print("\nweft bench speculative, {} ({}): {}-token prompts (second half repeats the first), greedy {}-token "
               "replies{}; draft max {}; {} threads; medians of {} runs; load {:.2f} before, {:.2f} now\n",
               label, m.description(), 2 * std::max(1u, o.prompt / 2), o.tokens,
               o.bias_tokens > 0 ? fmt::format(" over {} tokens at +30", o.bias_tokens) : "", o.draft_max,
               opt.threads, o.reps, load_before, bench::load_average_1min());
    fmt::print("weft: {}; ctx {}, batch {}, {} sequences\n", describe_attention(st), ctx, opt.batch, most);
    if (with_server) {
      const auto argv = spec->settings().at("argv").get<std::vector<std::string>>();
      const auto from = std::find(argv.begin(), argv.end(), std::string("--spec-type"));
      fmt::print("llama-server: -fa {} ({}); -c {} -b {} -ub {} -np {} -kvu -t {}; spec: {}\n", server_fa,
                 plain->attention(), ctx, opt.batch, opt.batch, most, opt.threads,
                 fmt::join(std::vector<std::string>(from, argv.end()), " "));
    }
    fmt::print("\n| {:>5} | {:<18} | {:>12} | {:>11} | {:>8} | {:>10} | {:>10} |\n", "convs", "engine",
               "reply end s", "tok/s/conv", "vs none", "drafts/rep", "accepted");
    fmt::print("|------:|:-------------------|-------------:|------------:|---------:|-----------:|-----------:|\n");
    nlohmann::json rows = nlohmann::json::array();
    for (unsigned n : o.conversations) {
      for (Mode md : kModes) {
        if (!cells.contains({n, md})) continue;
        const auto &c = cells[{n, md}];
        const Mode base = is_server(md) ? Mode::server : Mode::none;
        const double s = c.median_s(), b = cells.contains({n, base}) ? cells[{n, base}].median_s() : NAN;
        fmt::print("| {:>5} | {:<18} | {:>12.3f} | {:>11.1f} | {:>7.2f}x | {:>10.1f} | {:>9.0f}% |\n", n,
                   mode_name(md), s, o.tokens / s, b / s, c.drafted_per_reply(), 100 * c.acceptance());
        rows.push_back({{"conversations", n}, {"engine", mode_name(md)}, {"reply_s", s}, {"tok_s", o.tokens / s},
                        {"speedup", b / s}, {"drafted_per_reply", c.drafted_per_reply()},
                        {"acceptance", c.acceptance()}});
      }
    }
    fmt::print("(reply end: from the generation's start, its prompt decoded, to its last token, per conversation; "
               "llama-server: its timings.predicted_ms; vs none: the same engine without drafts; accepted: drafts "
               "kept of those verified)\n");
    nlohmann::json floor_json = nlohmann::json::array();
    if (!floor.empty()) {
      fmt::print("\nthe floor, one sequence: llama_decode of k tokens (logits at each) vs one token\n\n");
      fmt::print("| {:>2} | {:>9} | {:>8} | {:>11} |\n", "k", "decode ms", "vs k=1", "ms / token");
      fmt::print("|---:|----------:|---------:|------------:|\n");
      for (std::size_t i = 0; i < floor.size(); ++i) {
        fmt::print("| {:>2} | {:>9.2f} | {:>7.2f}x | {:>11.2f} |\n", i + 1, floor[i], floor[i] / floor[0],
                   floor[i] / static_cast<double>(i + 1));
        floor_json.push_back({{"k", i + 1}, {"decode_ms", floor[i]}});
      }
    }
    nlohmann::json r = {{"model", label}, {"path", path}, {"description", m.description()}, {"rows", rows},
                        {"floor", floor_json}, {"weft_attention", describe_attention(st)}};
    if (with_server) r["llama_server"] = {{"plain", plain->settings()}, {"spec", spec->settings()}};
    results.push_back(std::move(r));
  }
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "speculative"},
                               {"tokens", o.tokens},
                               {"prompt", o.prompt},
                               {"draft_max", o.draft_max},
                               {"bias_tokens", o.bias_tokens},
                               {"threads", opt.threads},
                               {"reps", o.reps},
                               {"machine", bench::machine_info()},
                               {"results", results}});
  }
}

}  // namespace

void add_command(CLI::App &bench) {
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("speculative", "Speculative decoding: one conversation's reply among 1, 4 and 16, "
                                                  "without drafts, with lookup (adaptive, forced), against "
                                                  "llama-server's own; and the one-sequence floor behind it");
  cmd->add_option("-m,--model", o->models, "GGUF models (default: the small preset, and the cached npc model)");
  cmd->add_option("--conversations", o->conversations, "Conversations generating at once (e.g. 1,4,16)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "Reply length")->check(CLI::Range(1u, 4096u))->capture_default_str();
  cmd->add_option("--prompt", o->prompt, "Prompt length (its second half repeats its first)")
      ->check(CLI::Range(2u, 8192u))
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "Runs of each cell")->check(CLI::Range(1u, 1000u))->capture_default_str();
  cmd->add_option("--draft-max", o->draft_max, "weft's max_draft and llama-server's --draft-max")
      ->check(CLI::Range(1u, weft::SpeculativeParams::kMaxDraft))
      ->capture_default_str();
  cmd->add_option("--bias-tokens", o->bias_tokens,
                  "Tokens 300.. at +30 in both engines' sampling: replies over a small alphabet repeat (0: none)")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  cmd->add_option("--floor-max", o->floor_max, "The floor: decodes of 1..N tokens of one sequence (0: none)")
      ->check(CLI::Range(0u, weft::SpeculativeParams::kMaxDraft + 1))
      ->capture_default_str();
  cmd->add_option("--target", o->target, "Engines to run")->check(CLI::IsMember({"weft", "server", "both"}))->capture_default_str();
  cmd->add_option("--server", o->server, "llama-server binary (default: the one built with weft)");
  cmd->add_option("--spec-type", o->spec_type, "llama-server's --spec-type")->capture_default_str();
  cmd->add_option("--draft-model", o->draft_model,
                  "A draft model with the same vocabulary: weft's Drafter::model (adaptive, forced) and llama-server's "
                  "-md run too (e.g. the npc-draft preset beside npc)");
  cmd->add_option("--draft-p-min", o->draft_p_min, "Both engines' p_min for the draft model")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "n_batch (and llama-server's -b, -ub)")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Decode threads (0 = all)")->check(CLI::Range(0, 1024))->capture_default_str();
  add_flash_attn_option(*cmd, o->flash_attn);
  cmd->add_option("--json", o->json, "Also write the results as JSON to this file");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress lines");
  cmd->callback([o] { run(*o); });
}

}  // namespace bench_speculative

void add_bench_speculative(CLI::App &bench) { bench_speculative::add_command(bench); }

}  // namespace weft_cli
