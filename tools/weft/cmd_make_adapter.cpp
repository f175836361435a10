// weft make-adapter: a seeded random LoRA adapter or control vector for a base
// GGUF, in the files stock llama.cpp loads (docs/ADAPTER_FILES.md).
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "progress.hpp"
#include "weft/make_adapter.hpp"
#include "weft/weft.hpp"

namespace weft_cli {

void add_make_adapter(CLI::App &app) {
  struct Opts {
    weft::MakeAdapterParams p;
    std::string kind = "lora";
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  auto *cmd = app.add_subcommand("make-adapter",
                                 "Write a seeded random LoRA adapter (--kind lora) or control vector (--kind cvec) for "
                                 "a base GGUF, loadable by llama.cpp's --lora / --control-vector");
  cmd->add_option("--base", o->p.base, "Base model GGUF (architecture, shapes and weight scale come from it)")
      ->required();
  cmd->add_option("--kind", o->kind, "lora | cvec")->check(CLI::IsMember({"lora", "cvec"}))->capture_default_str();
  cmd->add_option("--seed", o->p.seed, "Seed (same base, options and seed: same bytes)")->capture_default_str();
  cmd->add_option("--rank", o->p.rank, "LoRA rank")->capture_default_str();
  cmd->add_option("--alpha", o->p.alpha, "LoRA alpha (adapter.lora.alpha; the effect does not depend on it)")
      ->capture_default_str();
  cmd->add_option("--strength", o->p.strength,
                  "Nominal effect: mean |dlogit| / logit spread on the random presets (docs/ADAPTER_FILES.md); "
                  "use ~0.1 for control vectors on the trained npc model")
      ->capture_default_str();
  cmd->add_option("--targets", o->p.targets,
                  "LoRA targets, comma-separated: attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down, "
                  "output")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--out", o->p.out, "Output GGUF path")->required();
  cmd->add_flag("-q,--quiet", o->quiet, "No progress bar or summary");
  cmd->callback([o] {
    const auto t0 = std::chrono::steady_clock::now();
    weft::MakeAdapterParams p = o->p;
    p.kind = weft::parse_adapter_kind(o->kind);
    ProgressBar bar(fmt::format("make-adapter {}", o->kind), !o->quiet);
    p.on_progress = [&bar](float f) { bar.update(f); };
    weft::make_adapter(p);
    bar.finish();
    if (o->quiet) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(p.out, ec);
    const std::string what = p.kind == weft::AdapterKind::lora
                                 ? fmt::format("LoRA rank {}, alpha {}, {} targets", p.rank, p.alpha, p.targets.size())
                                 : std::string("control vector");
    fmt::print("wrote {} ({}, strength {}, seed {}, {} bytes) for {} in {:.1f} s\n", p.out, what, p.strength, p.seed,
               ec ? 0 : bytes, p.base, s);
  });
}

}  // namespace weft_cli
