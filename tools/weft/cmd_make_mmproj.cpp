// weft make-mmproj: a seeded random vision or audio projector (mmproj GGUF)
// for a text model, loadable by llama.cpp's mtmd (`llama-mtmd-cli --mmproj`;
// docs/MODELS.md).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "commands.hpp"
#include "weft/make_mmproj.hpp"
#include "weft/weft.hpp"

namespace weft_cli {

void add_make_mmproj(CLI::App &app) {
  struct Opts {
    weft::MakeMmprojParams p;
    std::string kind = "gemma3";
    std::string qwen2vl_model;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  auto *cmd = app.add_subcommand("make-mmproj",
                                 "Write a seeded random vision or audio projector (mmproj GGUF) for a text model, "
                                 "loadable by llama.cpp's mtmd (llama-mtmd-cli --mmproj)");
  cmd->add_option("--base,--model", o->p.base, "Text model GGUF the projector is for (its width comes from it)")
      ->required();
  cmd->add_option("--kind", o->kind,
                  "Projector kind: gemma3 (images, ordinary positions) | qwen2vl (images, M-RoPE positions) | "
                  "qwen2a (audio, Whisper-style encoder)")
      ->capture_default_str();
  cmd->add_option("--qwen2vl-model", o->qwen2vl_model,
                  "Also write --base (a llama-architecture GGUF) converted to the qwen2vl architecture (M-RoPE) "
                  "here, and make the projector for it");
  cmd->add_option("--seed", o->p.seed, "Seed (same base, options and seed: same bytes)")->capture_default_str();
  cmd->add_option("--image-size", o->p.image_size, "Image side in pixels the encoder sees")->capture_default_str();
  cmd->add_option("--patch-size", o->p.patch_size, "Patch side in pixels")->capture_default_str();
  cmd->add_option("--merge", o->p.merge, "Pooling per side (tokens = (image/(patch*merge))^2)")->capture_default_str();
  cmd->add_option("--layers", o->p.n_layer, "Encoder transformer blocks")->capture_default_str();
  cmd->add_option("--embd", o->p.n_embd, "Encoder transformer width")->capture_default_str();
  cmd->add_option("--heads", o->p.n_head, "Encoder attention heads")->capture_default_str();
  cmd->add_option("--ff", o->p.n_ff, "Encoder FFN width (image kinds: not equal to --embd)")->capture_default_str();
  cmd->add_option("--mel-bins", o->p.n_mel_bins, "qwen2a: log-mel channels (80 or 128 as Whisper)")
      ->capture_default_str();
  cmd->add_option("--out", o->p.out, "Output GGUF path")->required();
  cmd->add_flag("-q,--quiet", o->quiet, "No summary");
  cmd->callback([o] {
    weft::MakeMmprojParams p = o->p;
    p.kind = weft::parse_mmproj_kind(o->kind);
    if (!o->qwen2vl_model.empty()) {
      weft::make_qwen2vl_text_model(p.base, o->qwen2vl_model);
      p.base = o->qwen2vl_model;
      if (!o->quiet) fmt::print("wrote {} (the text model as qwen2vl, M-RoPE)\n", p.base);
    }
    weft::make_mmproj(p);
    if (o->quiet) return;
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(p.out, ec);
    if (p.kind == weft::MmprojKind::qwen2a) {
      fmt::print("wrote {} (qwen2a audio projector, {} mel bins, 750 tokens per 30 s chunk, seed {}, {} bytes) for {}\n",
                 p.out, p.n_mel_bins, p.seed, ec ? 0 : bytes, p.base);
      return;
    }
    fmt::print("wrote {} ({} projector, {}x{} image, {} tokens per image, seed {}, {} bytes) for {}\n", p.out,
               o->kind, p.image_size, p.image_size, weft::mmproj_tokens_per_image(p), p.seed, ec ? 0 : bytes, p.base);
  });
}

}  // namespace weft_cli
