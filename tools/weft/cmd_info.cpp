// weft info: load a model and show what weft sees of it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <memory>

#include "commands.hpp"
#include "progress.hpp"
#include "weft/weft.hpp"
#include "weft/make_model.hpp"
#include "weft/train.hpp"

namespace weft_cli {

void add_info(CLI::App &app) {
  struct Opts {
    std::string model, text = "Hello, blacksmith! What do you sell?";
    std::vector<std::string> rpc;
  };
  auto o = std::make_shared<Opts>();
  auto *cmd = app.add_subcommand("info", "Load a model, print its metadata and a tokenizer round trip");
  cmd->add_option("-m,--model", o->model, "GGUF model path")->required();
  cmd->add_option("--text", o->text, "Text to tokenize")->capture_default_str();
  cmd->add_option("--rpc", o->rpc, "ggml-rpc-server peers host:port,... that hold the model's layers")->delimiter(',');
  cmd->callback([o] {
    ProgressBar bar("loading");
    const auto t0 = std::chrono::steady_clock::now();
    auto model = weft::Model::load({.path = o->model, .on_progress = [&bar](float f) {
                                      bar.update(f);
                                      return true;
                                    }, .rpc = o->rpc});
    bar.finish();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("model       {}\n", model.path());
    fmt::print("name        {}\n", model.meta("general.name"));
    fmt::print("description {}\n", model.description());
    fmt::print("parameters  {} ({:.1f} MiB)\n", model.n_params(), static_cast<double>(model.size_bytes()) / 1048576.0);
    fmt::print("layers      {}, width {}, train context {}\n", model.n_layer(), model.n_embd(), model.n_ctx_train());
    fmt::print("vocabulary  {} tokens, bos {}, eos {}\n", model.n_vocab(), model.bos(), model.eos());
    fmt::print("fingerprint {:016x}\n", model.fingerprint());
    fmt::print("loaded in   {:.0f} ms\n", ms);
    const auto tokens = model.tokenize(o->text, {.add_bos = true});
    fmt::print("tokenize    \"{}\" -> {}\n", o->text, tokens);
    fmt::print("detokenize  -> \"{}\"\n", model.detokenize(tokens, {.remove_special = true}));
  });
}

}  // namespace weft_cli
