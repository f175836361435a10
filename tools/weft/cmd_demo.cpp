// weft demo: NPC conversations forked from one shared system prompt,
// generating together through Executor::step(), with a live terminal view.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include <unistd.h>

#include "commands.hpp"
#include "model_cache.hpp"
#include "progress.hpp"
#include "weft/weft.hpp"

namespace weft_cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Npc {
  const char *name;
  const char *role;
  const char *opening;  // the player's first line
};

// Roles and lines in the style of the npc preset's corpus (weft/train.hpp).
constexpr Npc kNpcs[] = {
    {"Brenna", "blacksmith", "Good morning, Brenna."},
    {"Oswin", "innkeeper", "Hello, Oswin."},
    {"Mara", "town guard", "Greetings, Mara."},
    {"Tobias", "merchant", "Well met, Tobias."},
    {"Elda", "healer", "Good evening, Elda."},
    {"Finn", "bard", "Hello, Finn."},
    {"Hilde", "farmer", "Good morning, Hilde."},
    {"Corvin", "scholar", "Greetings, Corvin."},
    {"Ysolde", "alchemist", "Well met, Ysolde."},
    {"Garrick", "hunter", "Good evening, Garrick."},
    {"Nell", "baker", "Good morning, Nell."},
    {"Rowan", "fisher", "Hello, Rowan."},
};

// The shared prefix every NPC forks from: one finished dialogue, as the
// corpus separates them, so each NPC's own dialogue starts in context.
constexpr const char *kSystem =
    "Alaric is the merchant of Eldermoor.\n"
    "Player: Hello, Alaric.\n"
    "Alaric: Welcome to my stall, traveller.\n"
    "Player: Have you heard any news?\n"
    "Alaric: They say a wolf was seen near the old mill last night.\n"
    "Player: Farewell, Alaric.\n"
    "Alaric: Farewell, traveller. Safe travels.\n"
    "\n";

// The last `width` code points of `text`, on one line, without control bytes.
std::string tail_line(const std::string &text, std::size_t width) {
  std::string clean;
  for (char ch : text) clean += (static_cast<unsigned char>(ch) < 0x20) ? ' ' : ch;
  std::size_t start = clean.size(), count = 0;
  while (start > 0 && count < width) {
    --start;
    if ((static_cast<unsigned char>(clean[start]) & 0xC0) != 0x80) ++count;
  }
  return clean.substr(start);
}

struct Live {
  Npc npc;
  weft::Conversation conv;
  weft::Generation gen;
  double first_token_s = -1;
  double done_s = -1;
};

}  // namespace

void add_demo(CLI::App &app) {
  struct Opts {
    std::string model;
    unsigned npcs = 8, max_tokens = 96, ctx = 4096, batch = 256, seed = 1;
    int threads = 0;
    float temperature = 0.8f;
    bool plain = false;
  };
  auto o = std::make_shared<Opts>();
  auto *cmd = app.add_subcommand("demo", "NPC dialogues generating together on one context, with a live view");
  cmd->add_option("-m,--model", o->model,
                  "GGUF model (default: the trained npc model, trained into the cache on first use)");
  cmd->add_option("--npcs", o->npcs, "NPC conversations")->check(CLI::Range(1u, 12u))->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens per NPC reply")->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "KV cells")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Tokens per step")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)")->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "Sampling temperature")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  cmd->add_flag("--plain", o->plain, "No live view (also when stdout is not a terminal)");
  cmd->callback([o] {
    const std::string path = o->model.empty() ? ensure_preset_model("npc", 0) : o->model;
    ProgressBar bar("loading");
    auto model = weft::Model::load({.path = path, .on_progress = [&](float f) {
                                      bar.update(f);
                                      return true;
                                    }});
    bar.finish();
    weft::Executor ex(model, {.n_ctx = o->ctx,
                              .n_batch = o->batch,
                              .n_seq_max = std::max(16u, o->npcs + 1),
                              .n_threads = o->threads});
    const auto t0 = Clock::now();
    auto secs = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

    // The shared system prompt is decoded once; every NPC forks from it.
    auto system = ex.create();
    system.prompt(kSystem, {.add_bos = true});
    while (!ex.step().idle) {
    }
    const std::uint32_t system_tokens = system.n_decoded();
    std::vector<Live> npcs;
    for (unsigned i = 0; i < o->npcs; ++i) {
      const Npc &npc = kNpcs[i];
      auto conv = system.fork();
      conv.prompt(fmt::format("{}Player: {}\n{}:", weft::npc_header(npc.name, npc.role), npc.opening, npc.name));
      auto gen = conv.generate({.max_tokens = o->max_tokens,
                                .sampler = weft::SamplerParams{.temperature = o->temperature,
                                                               .top_k = 40,
                                                               .top_p = 0.95f,
                                                               .repeat_penalty = 1.1f,
                                                               .seed = o->seed + i},
                                .stop = {"\n\n"}});  // the end of a dialogue
      npcs.push_back({npc, conv, gen});
    }

    const bool live = !o->plain && ::isatty(STDOUT_FILENO) != 0;
    std::size_t drawn_lines = 0;
    auto draw = [&](bool final) {
      const auto s = ex.stats();
      std::size_t generated = 0, done = 0;
      for (auto &n : npcs) {
        generated += n.gen.n_tokens();
        done += n.gen.done() ? 1 : 0;
      }
      const double t = secs();
      const char *clear = live ? "\x1b[2K" : "";
      std::string out;
      if (live && drawn_lines > 0) out += fmt::format("\x1b[{}A", drawn_lines);
      out += fmt::format("{}weft demo | {:.1f} s | step {} | {:.1f} tok/s generated | KV {}/{} cells | {}/{} done\n",
                         clear, t, s.steps, t > 0 ? static_cast<double>(generated) / t : 0.0, s.cells_used, s.n_ctx, done,
                         npcs.size());
      for (auto &n : npcs) {
        const auto k = n.gen.n_tokens();
        const int filled = static_cast<int>(20 * k / o->max_tokens);
        out += fmt::format("{}{:>7} {:<10} [{}{}] {:3}/{} {}\n", clear, n.npc.name, n.npc.role,
                           std::string(static_cast<std::size_t>(filled), '#'),
                           std::string(static_cast<std::size_t>(20 - filled), '.'), k, o->max_tokens,
                           tail_line(n.gen.text(), 48));
      }
      drawn_lines = npcs.size() + 1;
      if (live || final) std::fputs(out.c_str(), stdout);
      std::fflush(stdout);
    };

    auto last_draw = Clock::now();
    std::uint64_t steps = 0;
    while (std::any_of(npcs.begin(), npcs.end(), [](auto &n) { return !n.gen.done(); })) {
      ex.step();
      ++steps;
      for (auto &n : npcs) {
        if (n.first_token_s < 0 && n.gen.n_tokens() > 0) n.first_token_s = secs();
        if (n.done_s < 0 && n.gen.done()) n.done_s = secs();
      }
      if (live && Clock::now() - last_draw > std::chrono::milliseconds(100)) {
        draw(false);
        last_draw = Clock::now();
      }
      if (steps > 1000000) break;  // bounded, whatever the model does
    }
    const double total_s = secs();
    draw(true);

    const auto s = ex.stats();
    std::size_t generated = 0, private_cells = 0;
    fmt::print("\n{:>7} {:<10} {:>6} {:>9} {:>8}  {}\n", "npc", "role", "tokens", "first(s)", "done(s)", "finish");
    for (auto &n : npcs) {
      const auto r = n.gen.result();
      generated += r.tokens.size();
      private_cells += n.conv.n_tokens();
      fmt::print("{:>7} {:<10} {:>6} {:>9.2f} {:>8.2f}  {}\n", n.npc.name, n.npc.role, r.tokens.size(),
                 n.first_token_s, n.done_s, weft::finish_reason_name(r.reason));
    }
    fmt::print("\n");
    for (auto &n : npcs) {
      fmt::print("{}Player: {}\n{}:{}\n", weft::npc_header(n.npc.name, n.npc.role), n.npc.opening, n.npc.name,
                 n.gen.text());
      if (!n.gen.text().ends_with("\n")) fmt::print("\n");
    }
    fmt::print("{} NPCs, {} tokens generated in {:.1f} s ({:.1f} tok/s), {} steps (p50 {:.1f} ms, p99 {:.1f} ms)\n",
               npcs.size(), generated, total_s, static_cast<double>(generated) / total_s, s.steps, s.step_ms_p50,
               s.step_ms_p99);
    fmt::print("KV cells in use: {} (the {}-token system prompt is shared: {} without forking)\n", s.cells_used,
               system_tokens, private_cells + system_tokens);
    fmt::print("model: {} ({})\n", path, model.description());
  });
}

}  // namespace weft_cli
