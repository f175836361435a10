// Command-line options `weft bench mixed` and `weft bench prefix` share: the
// engines under test (llama-server's binary, slots, context, batch sizes,
// threads, weft's step budget), registered once.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "bench_mixed.hpp"

namespace weft_cli::bench {

// The llama-server built with weft's llama.cpp (`llama-tools`), or "".
const char *default_llama_server();

// -m/--model (default: the generated small model) and --target (weft |
// server | both: the engines to run) into `model` and `target`.
void add_model_and_target(CLI::App &cmd, std::string &model, std::string &target);

// --timeout (seconds an engine's run may take), --json (a file for the
// results) and -q/--quiet (no progress line).
void add_run_options(CLI::App &cmd, double &timeout_s, std::string &json, bool &quiet);

// --server, --server-log, --slots, --ctx, --batch, --ubatch, --threads,
// --step-tokens, --step-ms, --ready-timeout into `e`; `slots_what` says what a slot
// serves in this bench.
void add_engine_options(CLI::App &cmd, TargetParams &e, const std::string &slots_what);

}  // namespace weft_cli::bench
