// Shared by the `weft bench` subcommands: model resolution, statistics,
// JSON output and a description of the machine the numbers come from.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "weft/weft.hpp"
#include "weft/make_model.hpp"
#include "weft/train.hpp"

namespace weft_cli::bench {

// --model, or the generated `small` preset when empty.
std::string model_path(const std::string &option);
// Loads with a progress bar; a missing file is weft's Errc::not_found.
weft::Model load_model(const std::string &path);

// p in [0, 100], nearest rank (the same definition as ExecutorStats); 0 when empty.
double percentile(std::vector<double> values, double p);

// Uniform random token ids in [lo, n_vocab), seeded: the same seed gives the
// same tokens on every machine (mt19937 and our own range reduction).
std::vector<weft::Token> random_tokens(std::mt19937_64 &rng, std::size_t n, std::int32_t n_vocab,
                                       std::int32_t lo = 0);

// CPU model, cores, load average, kernel: what a reader needs to weigh the numbers.
nlohmann::json machine_info();
double load_average_1min();
// Whether the CPU has AMX (the amx_int8 flag in /proc/cpuinfo). weft turns
// llama.cpp's extra weight buffers off there (its AMX matmul crashes on
// quantised weights), so llama-server gets --no-repack to run the same
// kernels (and not crash).
bool cpu_has_amx();

// Writes `doc` pretty-printed; throws weft::Error(io) naming the path.
void write_json(const std::string &path, const nlohmann::json &doc);

// `n` seeded LoRAs (weft::make_adapter, seeds 100..) for the model at
// `path`, in a private temp directory removed with the object, and loaded.
struct BenchLoras {
  std::string dir;
  std::vector<std::string> files;
  std::vector<weft::Adapter> adapters;
  BenchLoras(const weft::Model &model, const std::string &path, unsigned n, unsigned rank);
  ~BenchLoras();
  BenchLoras(const BenchLoras &) = delete;
  BenchLoras &operator=(const BenchLoras &) = delete;
};

// Seconds since `t0` on the steady clock.
double seconds_since(std::int64_t t0_ns);
std::int64_t now_ns();

}  // namespace weft_cli::bench
