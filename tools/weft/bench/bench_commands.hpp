// The `weft bench` subcommands; cmd_bench.cpp registers them under `bench`.
#pragma once

#include <CLI/CLI.hpp>

namespace weft_cli {

void add_bench_throughput(CLI::App &bench);
void add_bench_mixed(CLI::App &bench);
void add_bench_frame(CLI::App &bench);
void add_bench_spill(CLI::App &bench);
void add_bench_main_thread(CLI::App &bench);
void add_bench_prefix(CLI::App &bench);
void add_bench_adapters(CLI::App &bench);
void add_bench_rpc(CLI::App &bench);
void add_bench_overhead(CLI::App &bench);
void add_bench_schema(CLI::App &bench);
void add_bench_rewind(CLI::App &bench);
void add_bench_embed(CLI::App &bench);
void add_bench_speculative(CLI::App &bench);

}  // namespace weft_cli
