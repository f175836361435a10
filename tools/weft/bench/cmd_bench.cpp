// weft bench: measurements side by side with llama.cpp's own tools.
// bench/compare.sh runs every subcommand listed by `weft bench --help`
// against its peer; spill and frame benchmarks join here when they land.
#include "bench_commands.hpp"
#include "commands.hpp"

namespace weft_cli {

void add_bench(CLI::App &app) {
  auto *bench = app.add_subcommand("bench", "Benchmarks comparable with llama-batched-bench and llama-server");
  bench->require_subcommand(1);
  add_bench_throughput(*bench);
  add_bench_mixed(*bench);
  add_bench_frame(*bench);
  add_bench_spill(*bench);
  add_bench_main_thread(*bench);
  add_bench_prefix(*bench);
  add_bench_adapters(*bench);
  add_bench_rpc(*bench);
  add_bench_overhead(*bench);
  add_bench_schema(*bench);
  add_bench_rewind(*bench);
  add_bench_embed(*bench);
  add_bench_speculative(*bench);
}

}  // namespace weft_cli
