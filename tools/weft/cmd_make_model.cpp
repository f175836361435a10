// weft make-model: write a generated GGUF.
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "commands.hpp"
#include "progress.hpp"
#include "weft/weft.hpp"

namespace weft_cli {

void add_make_model(CLI::App &app) {
  struct Opts {
    std::string preset = "tiny", type, out, vocab;
    std::uint64_t seed = 0;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  auto *cmd = app.add_subcommand("make-model", "Write a llama-architecture GGUF with seeded random weights");
  cmd->add_option("--preset", o->preset, "tiny | small | 1b")->check(CLI::IsMember({"tiny", "small", "1b"}))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Weight seed (same seed, same bytes)")->capture_default_str();
  cmd->add_option("--type", o->type, "Matrix type: f32 | f16 | q8_0 | q4_0 (default: the preset's)")
      ->check(CLI::IsMember({"f32", "f16", "q8_0", "q4_0"}));
  cmd->add_option("--out", o->out, "Output GGUF path")->required();
  cmd->add_option("--vocab", o->vocab, "GGUF to copy the tokenizer from")->default_str(weft::default_vocab_path());
  cmd->add_flag("-q,--quiet", o->quiet, "No progress bar or summary");
  cmd->callback([o] {
    weft::MakeModelParams p;
    p.preset = weft::parse_preset(o->preset);
    p.seed = o->seed;
    if (!o->type.empty()) p.type = weft::parse_weight_type(o->type);
    p.out = o->out;
    p.vocab = o->vocab;
    ProgressBar bar(fmt::format("make-model {}", o->preset), !o->quiet);
    p.on_progress = [&bar](float f) { bar.update(f); };
    const auto t0 = std::chrono::steady_clock::now();
    weft::make_model(p);
    bar.finish();
    if (!o->quiet) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const auto shape = weft::preset_shape(p.preset);
      fmt::print("wrote {} ({} preset, {} layers x {} wide, {}, seed {}) in {:.1f} s\n", p.out, o->preset,
                 shape.n_layer, shape.n_embd, weft::weight_type_name(p.type.value_or(shape.default_type)), p.seed, s);
    }
  });
}

}  // namespace weft_cli
