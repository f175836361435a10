// weft demo: NPC conversations forked from one shared system prompt,
// generating together through Executor::step(), with a live terminal view.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "commands.hpp"
#include "demo_actions.hpp"
#include "model_cache.hpp"
#include "progress.hpp"
#include "weft/weft.hpp"
#include "weft/make_model.hpp"
#include "weft/reply_check.hpp"
#include "weft/train.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace demo_cmd {
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

// The player's lines after the opening, as a game would script them; the
// NPC answers each one. Questions come from the corpus's topics.
constexpr const char *kQuestions[] = {"What do you have for sale?", "Have you heard any news?",
                                      "Is there any work for me?", "How is business?"};

// One NPC's part: who they are and the player's lines, as a game would
// script them; the NPC answers each one.
struct Script {
  std::string name;
  std::string role;
  std::vector<std::string> player;
};

// The demo's own cast: an opening, one question from the corpus's topics, a farewell.
std::vector<Script> demo_scripts(unsigned n) {
  std::vector<Script> out;
  for (unsigned i = 0; i < n; ++i) {
    const Npc &npc = kNpcs[i];
    out.push_back({npc.name, npc.role, {npc.opening, kQuestions[i % std::size(kQuestions)],
                                        fmt::format("Farewell, {}.", npc.name)}});
  }
  return out;
}

// Dialogues of the corpus (another seed than the model's) with the NPC's
// lines left for the model to write: the checker's yardstick.
std::vector<Script> corpus_scripts(std::uint64_t seed, unsigned count) {
  std::vector<Script> out;
  for (const auto &d : weft::make_npc_dialogues({.seed = seed, .target_bytes = count * 600u})) {
    if (out.size() == count) break;
    std::istringstream in(d);
    std::string header;
    std::getline(in, header);
    const auto is = header.find(" is the ");
    const auto of = header.rfind(" of Eldermoor.");
    Script s{header.substr(0, is), header.substr(is + 8, of - is - 8), {}};
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("Player: ")) s.player.push_back(line.substr(8));
    }
    out.push_back(std::move(s));
  }
  return out;
}

struct Live {
  Script npc;
  weft::Conversation conv;
  weft::Generation gen;
  std::size_t turn = 0;             // index of the line being answered
  std::string transcript;           // finished exchanges
  std::size_t tokens = 0;           // generated so far, all turns
  double first_token_s = -1;
  double done_s = -1;
  bool finished() const { return turn >= npc.player.size(); }
};

}  // namespace
}  // namespace demo_cmd

void add_demo(CLI::App &app) {
  using namespace demo_cmd;
  struct Opts {
    std::string model, transcripts, speculative = "none", draft_model;
    unsigned npcs = 8, max_tokens = 40, ctx = 4096, batch = 256, seed = 1, dialogues = 0;
    std::uint64_t script_seed = 1000;
    int threads = 0, top_k = 20;
    float temperature = 0.0f, top_p = 0.9f, repeat_penalty = 1.0f, draft_p_min = 0.5f;
    bool plain = false, check = false, grammar = true, grammar_answers = true, actions = false;
  };
  auto o = std::make_shared<Opts>();
  auto *cmd = app.add_subcommand("demo", "NPC dialogues generating together on one context, with a live view: each NPC "
                                         "answers three scripted player lines");
  cmd->add_option("-m,--model", o->model,
                  "GGUF model (default: the trained npc model, trained into the cache on first use)");
  cmd->add_option("--npcs", o->npcs, "NPC conversations at once")->check(CLI::Range(1u, 12u))->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens per NPC reply")->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "KV cells")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Tokens per step")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)")->capture_default_str();
  cmd->add_option("--temperature", o->temperature,
                  "Sampling temperature (0 = greedy: the likeliest line the role's grammar allows; docs/MODELS.md)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Sample from the k most likely tokens (0 = all)")->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->repeat_penalty, "Repetition penalty (1 = off: NPCs must repeat names and "
                                                          "prices)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  cmd->add_flag("--actions", o->actions, "Instead: a merchant who sells through tool calls the demo applies to an "
                                         "inventory (weft/tools.hpp), with the transcript of calls and replies");
  cmd->add_flag("--plain", o->plain, "No live view (also when stdout is not a terminal)");
  cmd->add_option("--grammar", o->grammar,
                  "Constrain each NPC's replies to the corpus's lines for its role (weft::npc_reply_grammar; derived "
                  "from the corpus); only with the npc model")
      ->capture_default_str();
  cmd->add_option("--grammar-answers", o->grammar_answers,
                  "With --grammar: only the lines that answer the player's line (its kind, as the checker reads it; "
                  "the model writes the details)")
      ->capture_default_str();
  cmd->add_flag("--check", o->check, "Judge every NPC reply against the corpus grammar (weft corpus --check)");
  cmd->add_option("--transcripts", o->transcripts, "Also write the transcripts to this file");
  cmd->add_option("--speculative", o->speculative,
                  "Speculative decoding: lookup (the conversation's own tokens) or model (a draft model: "
                  "--draft-model, default the npc-draft preset, trained on first use)")
      ->check(CLI::IsMember({"none", "lookup", "model"}))
      ->capture_default_str();
  cmd->add_option("--draft-model", o->draft_model, "The draft model of --speculative model (its vocabulary: the model's)");
  cmd->add_option("--draft-p-min", o->draft_p_min, "A draft ends before a token the draft model gives less than this")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--dialogues", o->dialogues,
                  "Instead of the demo's cast, play this many corpus dialogues (player lines from --script-seed, the "
                  "NPC's written by the model), --npcs at a time; prints the check, not the transcripts")
      ->check(CLI::Range(1u, 100000u));
  cmd->add_option("--script-seed", o->script_seed, "Corpus seed of --dialogues (the model trains on seed 0)")
      ->capture_default_str();
  cmd->callback([o] {
    const std::string path = o->model.empty() ? ensure_preset_model("npc", 0) : o->model;
    ProgressBar bar("loading");
    auto model = weft::Model::load({.path = path, .on_progress = [&](float f) {
                                      bar.update(f);
                                      return true;
                                    }});
    bar.finish();
    if (o->actions) {
      run_actions_demo(model, {.max_tokens = o->max_tokens, .seed = o->seed,
                               .temperature = o->temperature > 0 ? o->temperature : 0.8f, .threads = o->threads,
                               .transcripts = o->transcripts});
      return;
    }
    weft::ExecutorParams xp{
        .n_ctx = o->ctx, .n_batch = o->batch, .n_seq_max = std::max(16u, o->npcs + 1), .n_threads = o->threads};
    std::string draft_path;
    if (o->speculative == "model") {
      draft_path = o->draft_model.empty() ? ensure_preset_model("npc-draft", 0) : o->draft_model;
      xp.draft_model = weft::DraftModelParams{
          .model = weft::Model::load({.path = draft_path}), .n_ctx = o->ctx, .n_seq_max = xp.n_seq_max,
          .p_min = o->draft_p_min};
      xp.speculative.drafter = weft::Drafter::model;
    } else if (o->speculative == "lookup") {
      xp.speculative.drafter = weft::Drafter::lookup;
    }
    weft::Executor ex(model, xp);
    const auto t0 = Clock::now();
    auto secs = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

    // The shared system prompt is decoded once; every NPC forks from it.
    auto system = ex.create();
    system.prompt(kSystem, {.add_bos = true});
    while (!ex.step().idle) {
    }
    const std::uint32_t system_tokens = system.n_decoded();
    const weft::SamplerParams sampler{.temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p,
                                      .repeat_penalty = o->repeat_penalty};
    const bool scripted = o->dialogues > 0;
    // The grammar speaks the npc corpus's words: another model keeps its freedom.
    const bool use_grammar = o->grammar && model.meta("weft.preset") == "npc";
    const auto scripts = scripted ? corpus_scripts(o->script_seed, o->dialogues) : demo_scripts(o->npcs);
    auto reply = [&](Live &n, unsigned i) {
      auto sp = sampler;
      sp.seed = o->seed + i * 7919u + static_cast<unsigned>(n.turn);
      if (use_grammar) {
        sp.grammar = o->grammar_answers ? weft::npc_reply_grammar(n.npc.name, n.npc.role, n.npc.player[n.turn])
                                        : weft::npc_reply_grammar(n.npc.name, n.npc.role);
      }
      // One NPC line per turn: it ends at the newline, where the player speaks.
      n.gen = n.conv.generate({.max_tokens = o->max_tokens, .sampler = sp, .stop = {"\n"}});
    };
    // A finished reply goes into the transcript; the next scripted line is
    // queued and the NPC answers it, in the same steps as everyone else.
    auto advance = [&](Live &n, unsigned i) {
      if (n.finished() || !n.gen.done()) return;
      n.tokens += n.gen.n_tokens();
      n.transcript += fmt::format("Player: {}\n{}:{}\n", n.npc.player[n.turn], n.npc.name, n.gen.text());
      if (++n.turn == n.npc.player.size()) return;
      n.conv.prompt(fmt::format("Player: {}\n{}:", n.npc.player[n.turn], n.npc.name));
      reply(n, i);
    };

    const bool live = !o->plain && !scripted && ::isatty(STDOUT_FILENO) != 0;
    std::size_t drawn_lines = 0;
    std::vector<Live> npcs;     // the wave in progress
    std::vector<Live> done_npcs;  // finished waves
    auto generated_tokens = [&] {
      std::size_t g = 0;
      for (auto *list : {&done_npcs, &npcs}) {
        for (auto &n : *list) g += n.tokens + (n.finished() ? 0 : n.gen.n_tokens());
      }
      return g;
    };
    auto draw = [&](bool final) {
      const auto s = ex.stats();
      const std::size_t done = static_cast<std::size_t>(
          std::count_if(npcs.begin(), npcs.end(), [](auto &n) { return n.finished(); }));
      const double t = secs();
      const char *clear = live ? "\x1b[2K" : "";
      std::string out;
      if (live && drawn_lines > 0) out += fmt::format("\x1b[{}A", drawn_lines);
      out += fmt::format("{}weft demo | {:.1f} s | step {} | {:.1f} tok/s generated | KV {}/{} cells | {}/{} done\n",
                         clear, t, s.steps, t > 0 ? static_cast<double>(generated_tokens()) / t : 0.0, s.cells_used,
                         s.n_ctx, done, npcs.size());
      for (auto &n : npcs) {
        const std::size_t turn = std::min(n.turn + 1, n.npc.player.size());
        const std::string line = n.finished() ? "(farewell)" : n.gen.text();
        out += fmt::format("{}{:>7} {:<10} turn {}/{} {:4} tok  {}\n", clear, n.npc.name, n.npc.role, turn,
                           n.npc.player.size(), n.tokens + (n.finished() ? 0 : n.gen.n_tokens()), tail_line(line, 56));
      }
      drawn_lines = npcs.size() + 1;
      if (live || final) std::fputs(out.c_str(), stdout);
      std::fflush(stdout);
    };

    std::uint64_t steps = 0;
    std::size_t private_cells = 0;
    for (std::size_t first = 0; first < scripts.size(); first += o->npcs) {
      for (auto &n : npcs) {
        private_cells += n.conv.n_tokens();
        n.conv.dispose();
        done_npcs.push_back(std::move(n));
      }
      npcs.clear();
      for (std::size_t k = first; k < std::min(scripts.size(), first + o->npcs); ++k) {
        const unsigned i = static_cast<unsigned>(k);
        Live n{scripts[k], system.fork()};
        n.transcript = weft::npc_header(n.npc.name, n.npc.role);
        // BOS starts the NPC's dialogue, as it starts every dialogue the model trained on.
        n.conv.prompt(n.transcript, {.add_bos = true});
        n.conv.prompt(fmt::format("Player: {}\n{}:", n.npc.player[0], n.npc.name));
        reply(n, i);
        npcs.push_back(std::move(n));
      }
      auto last_draw = Clock::now();
      while (std::any_of(npcs.begin(), npcs.end(), [](auto &n) { return !n.finished(); })) {
        ex.step();
        ++steps;
        for (unsigned j = 0; j < npcs.size(); ++j) {
          auto &n = npcs[j];
          if (n.first_token_s < 0 && n.gen.n_tokens() > 0) n.first_token_s = secs();
          advance(n, static_cast<unsigned>(first) + j);
          if (n.done_s < 0 && n.finished()) n.done_s = secs();
        }
        if (live && Clock::now() - last_draw > std::chrono::milliseconds(100)) {
          draw(false);
          last_draw = Clock::now();
        }
        if (steps > 1000000) break;  // bounded, whatever the model does
      }
    }
    const double total_s = secs();
    if (!scripted) draw(true);
    for (auto &n : npcs) private_cells += n.conv.n_tokens();
    const auto s = ex.stats();
    const std::size_t generated = generated_tokens();
    for (auto &n : npcs) done_npcs.push_back(std::move(n));

    std::string all;
    for (auto &n : done_npcs) all += n.transcript + "\n";
    if (!scripted) {
      fmt::print("\n{:>7} {:<10} {:>6} {:>9} {:>8}\n", "npc", "role", "tokens", "first(s)", "done(s)");
      for (auto &n : done_npcs) {
        fmt::print("{:>7} {:<10} {:>6} {:>9.2f} {:>8.2f}\n", n.npc.name, n.npc.role, n.tokens, n.first_token_s,
                   n.done_s);
      }
      fmt::print("\n{}", all);
    }
    if (!o->transcripts.empty()) {
      std::ofstream f(o->transcripts, std::ios::binary);
      f << all;
      if (!f.flush()) throw weft::Error(weft::Errc::io, fmt::format("could not write '{}'", o->transcripts));
    }
    fmt::print("{} NPCs, {} tokens generated in {:.1f} s ({:.1f} tok/s), {} steps (p50 {:.1f} ms, p99 {:.1f} ms)\n",
               done_npcs.size(), generated, total_s, static_cast<double>(generated) / total_s, s.steps,
               s.step_ms_p50, s.step_ms_p99);
    if (!scripted) {
      fmt::print("KV cells in use: {} (the {}-token system prompt is shared: {} without forking)\n", s.cells_used,
                 system_tokens, private_cells + system_tokens);
    }
    if (o->check || scripted || o->model.empty()) {
      const auto r = weft::check_npc_replies(all);
      std::size_t shown = 0;
      for (const auto &v : r.verdicts) {
        if (v.fits || ++shown > 12) continue;
        fmt::print("  misfit: {} ({}) to \"{}\": \"{}\" — {}\n", v.npc, v.role, v.player, v.reply,
                   v.reasons.empty() ? "" : v.reasons.front());
      }
      fmt::print("check: {} of {} NPC replies fit the corpus grammar ({:.1f}%) in {} dialogues\n", r.fit, r.replies,
                 100.0 * r.share(), r.dialogues);
    }
    if (s.tokens_drafted > 0 || o->speculative != "none") {
      fmt::print("speculative ({}): {} draft tokens verified, {} kept ({:.0f}%){}\n", o->speculative, s.tokens_drafted,
                 s.drafts_accepted, s.tokens_drafted > 0 ? 100.0 * s.drafts_accepted / s.tokens_drafted : 0.0,
                 draft_path.empty() ? std::string()
                                    : fmt::format("; draft model {}: {} tokens, {:.2f} s", draft_path,
                                                  s.draft_model_tokens, s.draft_model_seconds));
    }
    fmt::print("model: {} ({})\n", path, model.description());
  });
}

}  // namespace weft_cli
