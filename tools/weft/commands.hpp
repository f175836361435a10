// The weft CLI's subcommands; each registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

namespace weft_cli {

void add_make_model(CLI::App &app);
void add_make_adapter(CLI::App &app);
void add_make_mmproj(CLI::App &app);
void add_corpus(CLI::App &app);
void add_info(CLI::App &app);
void add_demo(CLI::App &app);
void add_bench(CLI::App &app);
void add_serve(CLI::App &app);  // tools/weft/serve, when built with cpp-httplib

}  // namespace weft_cli
