#include "bench_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <sys/utsname.h>
#include <unistd.h>

#include "model_cache.hpp"
#include "weft/make_adapter.hpp"
#include "progress.hpp"

namespace weft_cli::bench {

std::string model_path(const std::string &option) {
  return option.empty() ? ensure_preset_model("small", 1) : option;
}

weft::Model load_model(const std::string &path) {
  ProgressBar bar("loading");
  auto model = weft::Model::load({.path = path, .on_progress = [&](float f) {
                                    bar.update(f);
                                    return true;
                                  }});
  bar.finish();
  return model;
}

// Nearest rank: the smallest value with at least p% of them at or below it —
// the definition ExecutorStats' step_ms_p50/p99 use, so both agree.
double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 *
                                                       static_cast<double>(values.size())));
  const std::size_t k = std::min(values.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

std::vector<weft::Token> random_tokens(std::mt19937_64 &rng, std::size_t n, std::int32_t n_vocab, std::int32_t lo) {
  std::vector<weft::Token> out(n);
  const auto span = static_cast<std::uint64_t>(n_vocab - lo);
  for (auto &t : out) t = lo + static_cast<weft::Token>(rng() % span);
  return out;
}

double load_average_1min() {
  std::ifstream in("/proc/loadavg");
  double v = -1;
  in >> v;
  return v;
}

bool cpu_has_amx() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) == 0) return line.find(" amx_int8") != std::string::npos;
  }
  return false;
}

nlohmann::json machine_info() {
  std::string cpu;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  utsname u{};
  ::uname(&u);
  return {{"cpu", cpu},
          {"hardware_threads", std::thread::hardware_concurrency()},
          {"kernel", fmt::format("{} {}", u.sysname, u.release)},
          {"load_average_1min", load_average_1min()},
          {"amx", cpu_has_amx()}};
}

void write_json(const std::string &path, const nlohmann::json &doc) {
  std::ofstream out(path);
  if (out) out << doc.dump(2) << '\n';
  if (!out) throw weft::Error(weft::Errc::io, fmt::format("cannot write the JSON report to '{}'", path));
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double seconds_since(std::int64_t t0_ns) { return static_cast<double>(now_ns() - t0_ns) * 1e-9; }

BenchLoras::BenchLoras(const weft::Model &model, const std::string &path, unsigned n, unsigned rank) {
  namespace fs = std::filesystem;
  dir = (fs::temp_directory_path() / fmt::format("weft-bench-loras-{}", ::getpid())).string();
  fs::create_directories(dir);
  try {
    for (unsigned k = 0; k < n; ++k) {
      files.push_back((fs::path(dir) / fmt::format("lora-{}.gguf", k)).string());
      weft::make_adapter({.base = path, .out = files.back(), .seed = 100 + k, .rank = static_cast<int>(rank)});
      adapters.push_back(model.load_adapter(files.back()));
    }
  } catch (...) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    throw;
  }
}

BenchLoras::~BenchLoras() {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace weft_cli::bench
