// weft — the command-line tool: models, demo, benchmarks.
#include <fmt/format.h>

#include <cstdio>

#include "commands.hpp"
#include "weft/weft.hpp"
#include "weft/make_model.hpp"
#include "weft/train.hpp"

int main(int argc, char **argv) {
  CLI::App app{"weft: many LLM conversations on one llama.cpp context"};
  app.set_version_flag("--version", fmt::format("weft {} (llama.cpp {})", weft::version(), weft::llama_version()));
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Print llama.cpp's log to stderr");
  app.parse_complete_callback([&] {
    if (verbose) weft::set_log_sink(weft::stderr_log_sink(), weft::LogLevel::info);
  });
  weft_cli::add_make_model(app);
  weft_cli::add_make_adapter(app);
  weft_cli::add_make_mmproj(app);
  weft_cli::add_corpus(app);
  weft_cli::add_info(app);
  weft_cli::add_demo(app);
  weft_cli::add_bench(app);
#ifdef WEFT_HAVE_SERVE
  weft_cli::add_serve(app);
#endif
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const weft::Error &e) {
    fmt::print(stderr, "weft: error ({}): {}\n", weft::errc_name(e.code()), e.what());
    return 1;
  }
  return 0;
}
