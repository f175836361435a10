// weft info: load a model and show what weft sees of it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "attention_cli.hpp"
#include "commands.hpp"
#include "progress.hpp"
#include "weft/weft.hpp"
#include "weft/make_model.hpp"
#include "weft/train.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace info_cmd {
namespace {

// "zen4 (portable, the best this CPU runs; variants, best first, ...; from <dir>)".
std::string describe_cpu(const weft::CpuBackend &b) {
  if (!b.runtime_dispatch) {
    return b.variant == "native" ? "native (built for the build machine's CPU: -march=native)"
                                 : fmt::format("{} (one ISA chosen at build time)", b.variant);
  }
  std::vector<std::string> names;
  for (const auto &v : b.available) names.push_back(v.supported ? v.name : v.name + "*");
  return fmt::format("{} (portable, {}; variants, best first, * = not on this CPU: {}; from {})", b.variant,
                     b.forced ? "forced by WEFT_CPU_VARIANT" : "the best this CPU runs", fmt::join(names, " "),
                     b.directory);
}

// What a rewind or a fork of a prefix costs on this model (docs/EXECUTOR.md).
std::string describe_memory(const weft::Model &m) {
  switch (m.memory()) {
    case weft::Model::Memory::plain: return "plain attention: rewinds and forks of a prefix are exact, no re-decode";
    case weft::Model::Memory::sliding_window:
      return fmt::format("sliding window of {} tokens: rewinds exact while the window's cells are kept, else "
                         "decoded again from the start",
                         m.sliding_window());
    case weft::Model::Memory::recurrent:
      return "recurrent: a rewind or a fork of a prefix is decoded again from the start";
    case weft::Model::Memory::hybrid:
      return "hybrid (recurrent state beside attention): a rewind or a fork of a prefix is decoded again from the start";
  }
  return "?";
}

}  // namespace
}  // namespace info_cmd

void add_info(CLI::App &app) {
  using namespace info_cmd;
  struct Opts {
    std::string model, text = "Hello, blacksmith! What do you sell?";
    std::vector<std::string> rpc;
    unsigned ctx = 4096, parallel = 16;
    int threads = 0;
    weft::FlashAttention flash_attn = weft::FlashAttention::automatic;
    bool no_executor = false;
  };
  auto o = std::make_shared<Opts>();
  auto *cmd = app.add_subcommand("info", "Load a model, print its metadata and a tokenizer round trip");
  cmd->add_option("-m,--model", o->model, "GGUF model path")->required();
  cmd->add_option("--text", o->text, "Text to tokenize")->capture_default_str();
  cmd->add_option("--rpc", o->rpc, "ggml-rpc-server peers host:port,... that hold the model's layers")->delimiter(',');
  cmd->add_option("-c,--ctx", o->ctx, "KV cells of the executor whose attention kernel is shown")
      ->check(CLI::Range(16u, 1u << 24))
      ->capture_default_str();
  cmd->add_option("--parallel,--np", o->parallel, "Its conversation slots (n_seq_max)")
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Its CPU threads (0 = all)")->check(CLI::Range(0, 1024))->capture_default_str();
  add_flash_attn_option(*cmd, o->flash_attn);
  cmd->add_flag("--no-executor", o->no_executor, "Only the model: make no executor (and run no attention probe)");
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
    fmt::print("memory      {}\n", describe_memory(model));
    fmt::print("fingerprint {:016x}\n", model.fingerprint());
    fmt::print("loaded in   {:.0f} ms\n", ms);
    fmt::print("cpu code    {}\n", describe_cpu(weft::cpu_backend()));
    const auto tokens = model.tokenize(o->text, {.add_bos = true});
    fmt::print("tokenize    \"{}\" -> {}\n", o->text, tokens);
    fmt::print("detokenize  -> \"{}\"\n", model.detokenize(tokens, {.remove_special = true}));
    if (o->no_executor) return;
    // What an executor of this shape gets (automatic: measured once, then remembered).
    const auto t1 = std::chrono::steady_clock::now();
    weft::Executor ex(model, {.n_ctx = o->ctx,
                              .n_batch = std::max(o->parallel, std::min(512u, o->ctx)),
                              .n_seq_max = o->parallel,
                              .n_threads = o->threads,
                              .flash_attn = o->flash_attn});
    const double ex_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    fmt::print("executor    n_ctx {}, n_seq_max {}, made in {:.0f} ms\n", ex.stats().n_ctx, o->parallel, ex_ms);
    fmt::print("attention   {}\n", describe_attention(ex.stats()));
  });
}

}  // namespace weft_cli
