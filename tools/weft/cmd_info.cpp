// weft info: load a model and show what weft sees of it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

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

std::string describe_use(const weft::MemoryUse &u) {
  return fmt::format("{} bytes (weights {}, KV {}, compute {}{})", u.total(), u.weights, u.kv, u.compute,
                     u.spill > 0 ? fmt::format(", spill RAM tier {}", u.spill) : std::string());
}

void print_fit(const weft::MemoryFit &f, std::uint64_t device, std::uint64_t host) {
  fmt::print("fit         n_gpu_layers {}, n_ctx {} ({} of {} layers, the output layer counted, on {}; {} "
             "configurations tried)\n",
             f.model.n_gpu_layers, f.executor.n_ctx, f.layers_on_device, f.n_layer + 1,
             f.device.empty() ? "the GPU" : f.device, f.configurations_tried);
  fmt::print("fit device  {} of {}\n", describe_use(f.device_use), device);
  fmt::print("fit host    {} of {}\n", describe_use(f.host_use),
             host == UINT64_MAX ? std::string("no limit") : std::to_string(host));
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
    std::optional<std::uint64_t> fit;
    std::uint64_t fit_host = UINT64_MAX;
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
  cmd->add_option("--fit", o->fit,
                  "GPU bytes left for the model: choose n_gpu_layers and n_ctx (at most --ctx) to fit them and "
                  "--fit-host (weft::fit_memory), then load with that choice");
  cmd->add_option("--fit-host", o->fit_host, "RAM bytes left for the model with --fit (default: no limit)");
  cmd->callback([o] {
    int n_gpu_layers = 0;
    std::optional<weft::MemoryFit> fit;
    if (o->fit) {
      weft::MemoryFitRequest r{.model_path = o->model, .budget = {*o->fit, o->fit_host}};
      r.executor = {.n_ctx = o->ctx, .n_batch = std::max(o->parallel, std::min(512u, o->ctx)), .n_seq_max = o->parallel,
                    .n_threads = o->threads, .flash_attn = o->flash_attn};
      r.min_n_ctx = std::min(r.min_n_ctx, o->ctx);
      fit = weft::fit_memory(r);
      n_gpu_layers = fit->model.n_gpu_layers;
      o->ctx = fit->executor.n_ctx;
    }
    ProgressBar bar("loading");
    const auto t0 = std::chrono::steady_clock::now();
    auto model = weft::Model::load({.path = o->model, .n_gpu_layers = n_gpu_layers, .on_progress = [&bar](float f) {
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
    if (fit) print_fit(*fit, *o->fit, o->fit_host);
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
