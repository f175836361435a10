// --flash-attn for the commands that make an executor, and one line that
// says which attention kernel an executor uses and why.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "weft/executor.hpp"

namespace weft_cli {

// --flash-attn auto|on|off into `out` (default: what `out` holds).
void add_flash_attn_option(CLI::App &cmd, weft::FlashAttention &out);

// --cache-type f16|f32|bf16|q8_0|q5_1|q5_0|q4_1|q4_0|iq4_nl (llama-server's
// -ctk/-ctv names, one type for keys and values) into `out`.
void add_cache_type_option(CLI::App &cmd, weft::KvType &out);

// "on"/"off"/"auto", as llama.cpp's tools spell it.
const char *flash_attn_name(weft::FlashAttention f);

// E.g. "flash attention on (measured: 12.1 ms with it, 20.3 ms without, 16 conversations x 248 cells)".
std::string describe_attention(const weft::ExecutorStats &s);

}  // namespace weft_cli
