// weft make-model: write a generated GGUF (random presets, any weft::ModelArch)
// or a trained one (npc, npc-draft).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "commands.hpp"
#include "model_cache.hpp"
#include "progress.hpp"
#include "weft/weft.hpp"
#include "weft/make_model.hpp"
#include "weft/reply_check.hpp"
#include "weft/train.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace make_model_cmd {
namespace {

// Replaces `out` through `<out>.tmp.<pid>`: `write` fills the temp file and
// says whether it succeeded, then a rename puts it in place. On any failure
// the temp file is removed and `out` is untouched. Throws Errc::io.
void replace_atomically(const std::string &out, const std::function<bool(const std::string &tmp)> &write) {
  const std::string tmp = fmt::format("{}.tmp.{}", out, ::getpid());
  std::error_code ec;
  const bool ok = write(tmp);
  if (ok) std::filesystem::rename(tmp, out, ec);
  if (!ok || ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw weft::Error(weft::Errc::io, fmt::format("could not write '{}'{}", out, ec ? ": " + ec.message() : ""));
  }
}

// Copies the cached model to `out`, so `out` is the old file or the whole new one.
void copy_atomic(const std::string &from, const std::string &out) {
  if (std::filesystem::exists(out) && std::filesystem::equivalent(from, out)) return;
  replace_atomically(out, [&](const std::string &tmp) {
    std::error_code ec;
    std::filesystem::copy_file(from, tmp, std::filesystem::copy_options::overwrite_existing, ec);
    return !ec;
  });
}

}  // namespace
}  // namespace make_model_cmd

void add_make_model(CLI::App &app) {
  using namespace make_model_cmd;
  struct Opts {
    std::string preset = "tiny", arch = "llama", type, out, vocab;
    std::optional<int> sliding_window;
    std::uint64_t seed = 0;
    bool quiet = false, no_cache = false;
    weft::TrainParams train;
    // Per training option: copies it into a preset's TrainParams if given.
    std::vector<std::function<void(weft::TrainParams &to, weft::TrainParams &given)>> train_given;
  };
  auto o = std::make_shared<Opts>();
  auto *cmd = app.add_subcommand("make-model",
                                 "Write a GGUF: seeded random weights (tiny, small, 1b; llama, gemma3, lfm2, mamba or "
                                 "moe) or a llama trained on generated NPC dialogue (npc; npc-draft, its drafter for "
                                 "speculative decoding)");
  cmd->add_option("--preset", o->preset, "tiny | small | 1b | npc | npc-draft | embed")
      ->check(CLI::IsMember({"tiny", "small", "1b", "npc", "npc-draft"}))
      ->capture_default_str();
  cmd->add_option("--arch", o->arch,
                  "Model family: llama | gemma3 (sliding-window attention) | lfm2 (conv/attention hybrid) | mamba "
                  "(recurrent) | moe (4 experts, 2 used); npc: llama only")
      ->capture_default_str();
  cmd->add_option("--sliding-window", o->sliding_window,
                  fmt::format("gemma3's sliding window in tokens (default {})", weft::kDefaultSlidingWindow));
  cmd->add_option("--seed", o->seed, "Weight seed (same seed, same bytes); for npc also the corpus seed")
      ->capture_default_str();
  cmd->add_option("--type", o->type, "Matrix type: f32 | f16 | q8_0 | q4_0 (default: the preset's; npc: f32 only)")
      ->check(CLI::IsMember({"f32", "f16", "q8_0", "q4_0"}));
  cmd->add_option("--out", o->out, "Output GGUF path")->required();
  cmd->add_option("--vocab", o->vocab, "GGUF to copy the tokenizer from")->default_str(weft::default_vocab_path());
  cmd->add_flag("-q,--quiet", o->quiet, "No progress bar or summary");
  // The defaults shown are npc's; npc-draft starts from its own
  // (npc_train_params) and takes only the options given.
  const char *g = "npc / npc-draft training (defaults: npc's; npc-draft: 2 layers, 64 wide, 2 heads, FFN 192)";
  auto train_opt = [&](const char *name, auto field, const char *what) {
    CLI::Option *opt = cmd->add_option(name, field(o->train), what)->capture_default_str()->group(g);
    o->train_given.push_back([opt, field](weft::TrainParams &to, weft::TrainParams &given) {
      if (opt->count() > 0) field(to) = field(given);
    });
  };
  using TP = weft::TrainParams;
  train_opt("--epochs", [](TP &t) -> auto & { return t.epochs; }, "Passes over the corpus");
  train_opt("--corpus-bytes", [](TP &t) -> auto & { return t.corpus.target_bytes; }, "Corpus size in bytes");
  train_opt("--layers", [](TP &t) -> auto & { return t.n_layer; }, "Transformer blocks");
  train_opt("--embd", [](TP &t) -> auto & { return t.n_embd; }, "Model width");
  train_opt("--heads", [](TP &t) -> auto & { return t.n_head; }, "Attention heads");
  train_opt("--ff", [](TP &t) -> auto & { return t.n_ff; }, "Feed-forward width");
  train_opt("--train-ctx", [](TP &t) -> auto & { return t.n_ctx; }, "Training window (multiple of 256)");
  train_opt("--train-batch", [](TP &t) -> auto & { return t.n_batch; }, "Tokens per optimizer step");
  train_opt("--lr", [](TP &t) -> auto & { return t.lr; }, "Peak learning rate");
  train_opt("--lr-min", [](TP &t) -> auto & { return t.lr_min; }, "Final learning rate");
  train_opt("--warmup", [](TP &t) -> auto & { return t.warmup_steps; }, "Warm-up optimizer steps");
  train_opt("--threads", [](TP &t) -> auto & { return t.n_threads; }, "CPU threads (0 = all)");
  cmd->add_flag("--no-cache", o->no_cache, "Train even when the cache holds this model; do not cache it")->group(g);
  cmd->callback([o] {
    const auto t0 = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    const weft::ModelArch arch = weft::parse_model_arch(o->arch);
    if (o->preset == "npc" || o->preset == "npc-draft") {
      if (arch != weft::ModelArch::llama) {
        throw weft::Error(weft::Errc::invalid_argument,
                          fmt::format("--arch {}: the {} preset is trained as llama only", o->arch, o->preset));
      }
      if (o->sliding_window) {
        throw weft::Error(weft::Errc::invalid_argument, fmt::format("--sliding-window {}: the {} preset has no "
                                                                    "sliding window", *o->sliding_window, o->preset));
      }
      if (!o->type.empty() && o->type != "f32") {
        throw weft::Error(weft::Errc::invalid_argument,
                          fmt::format("--type {}: the {} preset is trained and written in f32", o->type, o->preset));
      }
      weft::TrainParams t = weft::npc_train_params(weft::parse_preset(o->preset));
      for (const auto &take : o->train_given) take(t, o->train);
      t.seed = o->seed;
      t.corpus.seed = o->seed;
      t.vocab = o->vocab;
      if (o->no_cache) {
        t.out = o->out;
        t.on_progress = train_progress(o->quiet, o->preset);
        t.cancel = cancel_on_interrupt();
        const auto r = weft::train_npc_model(t);
        if (o->quiet) return;
        fmt::print("held-out accuracy {:.1f}% (untrained {:.1f}%), loss {:.3f} (untrained {:.3f}); train accuracy "
                   "{:.1f}% loss {:.3f}; {} train / {} held-out tokens, {} steps, {:.1f} s\n",
                   100 * r.eval_accuracy, 100 * r.eval_accuracy_before, r.eval_loss, r.eval_loss_before,
                   100 * r.train_accuracy, r.train_loss, r.train_tokens, r.eval_tokens, r.optimizer_steps, r.seconds);
        return;
      }
      copy_atomic(ensure_npc_model(t, o->quiet), o->out);
      if (!o->quiet) {
        fmt::print("wrote {} ({} preset, {} layers x {} wide, seed {}) in {:.1f} s\n", o->out, o->preset, t.n_layer,
                   t.n_embd, o->seed, seconds());
      }
      return;
    }
    weft::MakeModelParams p;
    p.preset = weft::parse_preset(o->preset);
    p.seed = o->seed;
    p.arch = arch;
    p.sliding_window = o->sliding_window;
    if (!o->type.empty()) p.type = weft::parse_weight_type(o->type);
    p.out = o->out;
    p.vocab = o->vocab;
    ProgressBar bar(fmt::format("make-model {}", o->preset), !o->quiet);
    p.on_progress = [&bar](float f) { bar.update(f); };
    weft::make_model(p);
    bar.finish();
    if (!o->quiet) {
      const auto shape = weft::preset_shape(p.preset);
      const std::string window = arch == weft::ModelArch::gemma3
                                     ? fmt::format(", sliding window {}",
                                                   p.sliding_window.value_or(weft::kDefaultSlidingWindow))
                                     : std::string();
      fmt::print("wrote {} ({} preset, {} arch{}, {} layers x {} wide, {}, seed {}) in {:.1f} s\n", p.out, o->preset,
                 weft::model_arch_name(arch), window, shape.n_layer, shape.n_embd,
                 weft::weight_type_name(p.type.value_or(shape.default_type)), p.seed, seconds());
    }
  });
}

void add_corpus(CLI::App &app) {
  using namespace make_model_cmd;
  auto params = std::make_shared<weft::CorpusParams>();
  auto out = std::make_shared<std::string>();
  auto check = std::make_shared<std::string>();
  auto min_share = std::make_shared<double>(0.0);
  auto *cmd = app.add_subcommand("corpus", "Print (or write) the generated NPC dialogue the npc preset trains on, or "
                                           "check a transcript's NPC replies against its grammar");
  cmd->add_option("--seed", params->seed, "Corpus seed")->capture_default_str();
  cmd->add_option("--bytes", params->target_bytes, "Approximate size")->capture_default_str();
  cmd->add_option("--out", *out, "Write to this file instead of stdout (atomically)");
  cmd->add_option("--check", *check,
                  "Judge every NPC reply in this transcript (as `weft demo --transcripts` writes): does it fit the "
                  "player line, the NPC's name and role, the role's goods and prices?");
  cmd->add_option("--min-share", *min_share, "With --check: exit 1 when fewer than this share of replies fit")
      ->check(CLI::Range(0.0, 1.0));
  cmd->callback([params, out, check, min_share] {
    if (!check->empty()) {
      const auto r = weft::check_npc_replies_file(*check);
      for (const auto &v : r.verdicts) {
        if (v.fits) continue;
        fmt::print("line {}: {} ({}) to \"{}\": \"{}\"\n", v.line, v.npc, v.role, v.player, v.reply);
        for (const auto &why : v.reasons) fmt::print("    {}\n", why);
      }
      fmt::print("{} of {} NPC replies fit ({:.1f}%) in {} dialogues{}\n", r.fit, r.replies, 100.0 * r.share(),
                 r.dialogues, r.unjudged > 0 ? fmt::format("; {} not judged (player lines outside the grammar)",
                                                           r.unjudged) : std::string());
      if (r.share() < *min_share) {
        throw weft::Error(weft::Errc::out_of_range, fmt::format("{:.1f}% of replies fit, below --min-share {:.1f}%",
                                                                100.0 * r.share(), 100.0 * *min_share));
      }
      return;
    }
    const std::string text = weft::make_npc_corpus(*params);
    if (out->empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      return;
    }
    replace_atomically(*out, [&](const std::string &tmp) {
      std::FILE *f = std::fopen(tmp.c_str(), "wb");
      if (f == nullptr) return false;
      const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
      return std::fclose(f) == 0 && wrote;
    });
  });
}

}  // namespace weft_cli
