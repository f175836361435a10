// weft/backend.hpp — which CPU code this weft runs.
//
// Three kinds of build (docs/BUILDING.md, "Shipping weft in a game"):
//  - portable (the `dist` preset, WEFT_CPU_VARIANTS=ON): ggml's CPU backend
//    once per x86-64 ISA level, as libggml-cpu-<variant>.so beside libweft.so
//    (x64, sse42, sandybridge, ..., haswell, skylakex, icelake, zen4,
//    alderlake, sapphirerapids). The first time weft needs llama.cpp it loads
//    the best variant this CPU runs (the highest of ggml's own scores).
//  - native (WEFT_NATIVE=ON, developers' default): one CPU backend compiled
//    for the build machine (-march=native); it may not run on another CPU.
//  - fixed: one CPU backend for the ISA chosen at build time (the Windows
//    preset's AVX2). Before any of llama.cpp's code runs, weft checks that
//    this CPU has those instructions (an error, not SIGILL, if not).
//
// A portable build reads two environment variables, once:
//  - WEFT_CPU_VARIANT=<name>: load that variant instead of the best (tests;
//    a player whose CPU or OS misreports a feature).
//  - WEFT_BACKEND_DIR=<folder>: look there first for the variants (default:
//    the folder of the library weft is in, then the llama.cpp build it was
//    built against).
//
// Thread-safe. The backend is loaded once per process and never unloaded.
#pragma once

#include <string>
#include <vector>

#include "weft/export.hpp"

namespace weft {

struct CpuBackend {
  // "native", "fixed", or the portable variant loaded ("zen4", "haswell", ...).
  std::string variant;
  // True in a portable build: `variant` was chosen when the process first
  // needed llama.cpp, among `available`.
  bool runtime_dispatch = false;
  // Portable build: every variant found, and whether this CPU runs it, in
  // ggml's order of preference (best first). Empty otherwise.
  struct Variant {
    std::string name;
    bool supported = false;  // ggml's score for this CPU is above zero
  };
  std::vector<Variant> available;
  // Portable build: the folder `variant` was loaded from (UTF-8); "" otherwise.
  std::string directory;
  // True when WEFT_CPU_VARIANT chose `variant`.
  bool forced = false;
  // llama.cpp's system info for the loaded backend ("CPU : SSE3 = 1 | ...").
  std::string features;
};

// The CPU backend, loading it first if no Model was loaded yet.
// Throws Error: Errc::not_found when a portable build finds no variant (or
// not the one WEFT_CPU_VARIANT names; the message lists the folders searched
// and the variants found), Errc::incompatible when the named variant (or a
// fixed build's ISA level) needs instructions this CPU lacks. Model::load
// and the other entry points that reach llama.cpp throw the same error.
// Returns a copy the caller owns.
WEFT_API CpuBackend cpu_backend();

}  // namespace weft
