#include "bench_options.hpp"

#include <fmt/format.h>

#include "attention_cli.hpp"

namespace weft_cli::bench {

const char *default_llama_server() {
#ifdef WEFT_LLAMA_TOOLS_DIR
  return WEFT_LLAMA_TOOLS_DIR "/llama-server";
#else
  return "";
#endif
}

void add_model_and_target(CLI::App &cmd, std::string &model, std::string &target) {
  cmd.add_option("-m,--model", model, "GGUF model (default: the generated small model, made on first use)");
  cmd.add_option("--target", target, "Engines to run")->check(CLI::IsMember({"weft", "server", "both"}))->capture_default_str();
}

void add_run_options(CLI::App &cmd, double &timeout_s, std::string &json, bool &quiet) {
  cmd.add_option("--timeout", timeout_s, "Give up on an engine's run after this many seconds")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  cmd.add_option("--json", json, "Also write the results as JSON to this file");
  cmd.add_flag("-q,--quiet", quiet, "No progress line");
}

void add_engine_options(CLI::App &cmd, TargetParams &e, const std::string &slots_what) {
  const char *server = default_llama_server();
  cmd.add_option("--server", e.server_binary,
                 fmt::format("llama-server binary (default: {})", *server ? server : "none built in"));
  cmd.add_option("--server-log", e.server_log, "Where llama-server's output goes (default: /tmp/weft-bench-...)");
  cmd.add_option("--slots", e.slots, slots_what + " (llama-server --parallel)")
      ->check(CLI::Range(1u, 255u))
      ->capture_default_str();
  cmd.add_option("--ctx", e.ctx, "KV cells, shared by all slots (unified cache on both)")
      ->check(CLI::Range(16u, 1u << 24))
      ->capture_default_str();
  cmd.add_option("--batch", e.batch, "n_batch")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  cmd.add_option("--ubatch", e.ubatch, "n_ubatch")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  cmd.add_option("--threads", e.threads, "CPU threads for each engine (0 = all)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  add_flash_attn_option(cmd, e.flash_attn);
  cmd.add_option("--step-tokens", e.step_tokens, "weft: tokens per step (StepBudget::max_tokens)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd.add_option("--step-ms", e.step_ms, "weft: wall-clock target per step in ms (StepBudget::max_time; 0 = none)")
      ->check(CLI::Range(0u, 60000u))
      ->capture_default_str();
  cmd.add_option("--ready-timeout", e.server_ready_timeout_s, "Seconds llama-server may take to get ready")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
}

}  // namespace weft_cli::bench
