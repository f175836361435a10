#include "model_cache.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <memory>

#include <unistd.h>

#include "progress.hpp"
#include "weft/weft.hpp"

namespace weft_cli {

std::string cache_dir() {
  const std::string d = weft::default_cache_dir();
  return d.empty() ? ".weft-cache" : d;
}

namespace {
std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }
}  // namespace

std::function<bool()> cancel_on_interrupt() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  return [] { return g_interrupted.load(); };
}

std::function<void(const weft::TrainProgress &)> train_progress(bool quiet, const std::string &preset) {
  if (quiet) return {};
  const std::string label = "train " + preset;
  auto bar = std::make_shared<ProgressBar>(label);
  auto next_line = std::make_shared<int>(1);
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  return [bar, next_line, tty, label](const weft::TrainProgress &p) {
    const std::string status = fmt::format("epoch {}/{} loss {:.3f} acc {:.1f}%", p.epoch + 1, p.epochs,
                                           p.train_loss, 100.0 * p.train_accuracy);
    bar->update(static_cast<float>(p.fraction), status);
    // Without a terminal (logs, CI) a line every tenth of the run instead.
    if (!tty && p.fraction * 10 >= *next_line) {
      fmt::print(stderr, "{} {:3.0f}% {}\n", label, 100 * p.fraction, status);
      *next_line = static_cast<int>(p.fraction * 10) + 1;
    }
    if (p.fraction >= 1.0) bar->finish();
  };
}

std::string ensure_npc_model(weft::TrainParams params, bool quiet) {
  const auto dir = std::filesystem::path(cache_dir()) / "models";
  const std::string preset = weft::preset_name(params.preset);
  const auto path = dir / fmt::format("{}-{}.gguf", preset, weft::npc_model_key(params));
  if (std::filesystem::exists(path)) return path.string();
  std::filesystem::create_directories(dir);
  if (!quiet) {
    fmt::print(stderr,
               "weft: training the {} model into {} (once; {} on 2 cores):\n"
               "      {} layers x {} wide, {} epochs over {} KB of generated NPC dialogue\n",
               preset, path.string(), params.preset == weft::ModelPreset::npc ? "a few minutes" : "a minute or two",
               params.n_layer, params.n_embd, params.epochs, params.corpus.target_bytes / 1000);
  }
  params.out = path.string();
  params.on_progress = train_progress(quiet, preset);
  params.cancel = cancel_on_interrupt();
  const auto r = weft::train_npc_model(params);
  if (!quiet) {
    fmt::print(stderr,
               "weft: trained in {:.0f} s, {} optimizer steps; held-out next-token accuracy {:.1f}% (untrained "
               "{:.1f}%), loss {:.3f} (untrained {:.3f}); training accuracy {:.1f}%\n",
               r.seconds, r.optimizer_steps, 100.0 * r.eval_accuracy, 100.0 * r.eval_accuracy_before, r.eval_loss,
               r.eval_loss_before, 100.0 * r.train_accuracy);
  }
  return path.string();
}

std::string ensure_preset_model(const std::string &preset, unsigned seed, weft::ModelArch arch) {
  if (preset == "npc" || preset == "npc-draft") {
    weft::TrainParams t = weft::npc_train_params(weft::parse_preset(preset));
    t.seed = seed;
    t.corpus.seed = seed;
    return ensure_npc_model(t);
  }
  const auto dir = std::filesystem::path(cache_dir()) / "models";
  const std::string family = arch == weft::ModelArch::llama ? "" : fmt::format("-{}", weft::model_arch_name(arch));
  const auto path = dir / fmt::format("{}{}-seed{}.gguf", preset, family, seed);
  if (std::filesystem::exists(path)) return path.string();
  std::filesystem::create_directories(dir);
  fmt::print(stderr, "weft: generating the {} model into {} (once)\n", preset, path.string());
  ProgressBar bar("make-model " + preset);
  weft::make_model({.preset = weft::parse_preset(preset),
                    .seed = seed,
                    .arch = arch,
                    .out = path.string(),
                    .on_progress = [&](float f) { bar.update(f); }});
  bar.finish();
  return path.string();
}

}  // namespace weft_cli
