// The CPU backend: in a portable build (WEFT_BACKEND_DL) the best of ggml's
// CPU variants, loaded from beside the library; otherwise the one linked in.
#include "core/backend_loader.hpp"

#include <ggml-backend.h>
#include <llama.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string_view>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/file_io.hpp"
#include "core/internal.hpp"

#ifdef WEFT_BACKEND_DL
#ifdef _WIN32
#include <windows.h>
#else
#include <dlfcn.h>
#endif
#endif

namespace weft::detail {
namespace {

namespace fs = std::filesystem;

#ifdef WEFT_BACKEND_DL

#ifdef _WIN32
constexpr const char *k_prefix = "ggml-cpu-";
constexpr const char *k_suffix = ".dll";
#else
constexpr const char *k_prefix = "libggml-cpu-";
constexpr const char *k_suffix = ".so";
#endif

// ggml's score of one variant for this CPU (0: it cannot run here), read the
// way ggml_backend_load_best reads it, which does not say what it chose.
int variant_score(const fs::path &path) {
  using Score = int (*)();
#ifdef _WIN32
  HMODULE h = LoadLibraryW(path.wstring().c_str());
  if (h == nullptr) return -1;
  auto fn = reinterpret_cast<Score>(reinterpret_cast<void *>(GetProcAddress(h, "ggml_backend_score")));
  const int score = fn == nullptr ? -1 : fn();
  FreeLibrary(h);
#else
  void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return -1;
  auto fn = reinterpret_cast<Score>(dlsym(h, "ggml_backend_score"));
  const int score = fn == nullptr ? -1 : fn();
  dlclose(h);
#endif
  return score;
}

// The folder of the binary this code is in: libweft.so for the plugin, the
// executable for a program that links the static libweft.
fs::path own_folder() {
#ifdef _WIN32
  HMODULE self = nullptr;
  if (!GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                          reinterpret_cast<LPCWSTR>(&own_folder), &self)) {
    return {};
  }
  std::wstring name(MAX_PATH, L'\0');
  const DWORD n = GetModuleFileNameW(self, name.data(), static_cast<DWORD>(name.size()));
  name.resize(n);
  return fs::path(name).parent_path();
#else
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&own_folder), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  fs::path p = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path(info.dli_fname).parent_path() : p.parent_path();
#endif
}

// UTF-8 of a path (C++20's u8string() is a std::u8string).
std::string utf8(const fs::path &p) {
  const std::u8string s = p.u8string();
  return std::string(s.begin(), s.end());
}

struct Found {
  std::string name;
  fs::path path;
  int score = 0;
};

std::vector<Found> variants_in(const fs::path &dir) {
  std::vector<Found> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string file = utf8(it->path().filename());
    if (file.size() <= std::char_traits<char>::length(k_prefix) + std::char_traits<char>::length(k_suffix) ||
        file.rfind(k_prefix, 0) != 0 || !file.ends_with(k_suffix)) {
      continue;
    }
    const std::size_t start = std::char_traits<char>::length(k_prefix);
    out.push_back({file.substr(start, file.size() - start - std::char_traits<char>::length(k_suffix)), it->path(),
                   variant_score(it->path())});
  }
  // ggml's preference: the highest score first; ties by name for a stable list.
  std::sort(out.begin(), out.end(),
            [](const Found &a, const Found &b) { return a.score != b.score ? a.score > b.score : a.name < b.name; });
  return out;
}

std::vector<fs::path> search_folders() {
  std::vector<fs::path> dirs;
  if (const char *env = std::getenv("WEFT_BACKEND_DIR"); env != nullptr && *env != '\0') {
    dirs.push_back(u8_path(env));
  }
  if (fs::path own = own_folder(); !own.empty()) dirs.push_back(own);
#ifdef WEFT_BACKEND_BUILD_DIR
  dirs.push_back(u8_path(WEFT_BACKEND_BUILD_DIR));  // the build tree's llama.cpp
#endif
  return dirs;
}

std::string names(const std::vector<Found> &found) {
  std::string out;
  for (const Found &f : found) out += (out.empty() ? "" : ", ") + f.name + (f.score > 0 ? "" : " (not on this CPU)");
  return out.empty() ? "none" : out;
}

CpuBackend load_portable() {
  const std::vector<fs::path> dirs = search_folders();
  std::string searched;
  for (const fs::path &d : dirs) searched += (searched.empty() ? "" : ", ") + utf8(d);
  const char *forced_env = std::getenv("WEFT_CPU_VARIANT");
  const std::string forced = forced_env == nullptr ? "" : forced_env;
  for (const fs::path &dir : dirs) {
    std::vector<Found> found = variants_in(dir);
    if (found.empty()) continue;  // the first folder that has variants decides
    const Found *pick = nullptr;
    if (!forced.empty()) {
      for (const Found &f : found) {
        if (f.name == forced) pick = &f;
      }
      if (pick == nullptr) {
        fail(Errc::not_found, fmt::format("WEFT_CPU_VARIANT={}: no {}{}{} in {} (variants there: {})", forced, k_prefix,
                                          forced, k_suffix, utf8(dir), names(found)));
      }
      if (pick->score <= 0) {
        fail(Errc::incompatible, fmt::format("WEFT_CPU_VARIANT={}: this CPU lacks instructions that variant needs "
                                             "(variants this CPU runs: {})",
                                             forced, names(found)));
      }
    } else if (found.front().score > 0) {
      pick = &found.front();
    } else {
      fail(Errc::incompatible, fmt::format("no CPU variant in {} runs on this CPU (found: {})", utf8(dir),
                                           names(found)));
    }
    if (ggml_backend_load(utf8(pick->path).c_str()) == nullptr) {
      fail(Errc::backend, fmt::format("could not load {}: {}", utf8(pick->path), take_llama_error()));
    }
    CpuBackend out;
    out.variant = pick->name;
    out.runtime_dispatch = true;
    out.directory = utf8(dir);
    out.forced = !forced.empty();
    for (const Found &f : found) out.available.push_back({f.name, f.score > 0});
    return out;
  }
  fail(Errc::not_found, fmt::format("this portable weft found no {}*{} (ggml's CPU variants) in {}; ship them beside "
                                    "the weft library or set WEFT_BACKEND_DIR",
                                    k_prefix, k_suffix, searched.empty() ? "no folder" : searched));
}

#endif  // WEFT_BACKEND_DL

#ifdef WEFT_CPU_REQUIRES
// This CPU's support for one of the names WEFT_CPU_REQUIRES uses.
bool cpu_supports(std::string_view name) {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  // __builtin_cpu_supports takes literals only.
  if (name == "sse42") return __builtin_cpu_supports("sse4.2");
  if (name == "avx") return __builtin_cpu_supports("avx");
  if (name == "avx2") return __builtin_cpu_supports("avx2");
  if (name == "fma") return __builtin_cpu_supports("fma");
  if (name == "bmi2") return __builtin_cpu_supports("bmi2");
  if (name == "avx512") return __builtin_cpu_supports("avx512f");
  if (name == "avx512_vbmi") return __builtin_cpu_supports("avx512vbmi");
  if (name == "avx512_vnni") return __builtin_cpu_supports("avx512vnni");
  if (name == "avx512_bf16") return __builtin_cpu_supports("avx512bf16");
#endif
  (void)name;
  return true;  // not an x86 name this compiler can test: assume present
}
#endif

}  // namespace

std::vector<std::string> missing_cpu_features(std::string_view required,
                                              const std::function<bool(std::string_view)> &has) {
  std::vector<std::string> missing;
  while (!required.empty()) {
    const std::size_t comma = required.find(',');
    const std::string_view name = required.substr(0, comma);
    if (!name.empty() && !has(name)) missing.emplace_back(name);
    required = comma == std::string_view::npos ? std::string_view{} : required.substr(comma + 1);
  }
  return missing;
}

const CpuBackend &loaded_cpu_backend() {
  static std::once_flag once;
  static std::optional<CpuBackend> backend;
  static std::optional<Error> error;
  std::call_once(once, [] {
    try {
#ifdef WEFT_BACKEND_DL
      CpuBackend b = load_portable();
#else
#ifdef WEFT_CPU_REQUIRES
      // Before ggml's CPU code first runs: a missing instruction is SIGILL.
      if (auto lacking = missing_cpu_features(WEFT_CPU_REQUIRES, cpu_supports); !lacking.empty()) {
        std::string names;
        for (const std::string &n : lacking) names += (names.empty() ? "" : ", ") + n;
        fail(Errc::incompatible, fmt::format("this weft was built for a CPU with {} (one ISA level, no run-time "
                                             "choice); this CPU lacks {}. The portable build runs here "
                                             "(docs/BUILDING.md, Shipping weft in a game)",
                                             WEFT_CPU_REQUIRES, names));
      }
#endif
      CpuBackend b;
      b.variant = WEFT_CPU_BUILD;
#endif
      b.features = llama_print_system_info();
      backend = std::move(b);
    } catch (const Error &e) {
      error = e;
    }
  });
  if (error) throw *error;
  return *backend;
}

bool cpu_backend_has(const char *feature) {
  ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
  if (cpu == nullptr) return false;
  auto get = reinterpret_cast<ggml_backend_get_features_t>(ggml_backend_reg_get_proc_address(cpu, "ggml_backend_get_features"));
  if (get == nullptr) return false;
  for (const ggml_backend_feature *f = get(cpu); f != nullptr && f->name != nullptr; ++f) {
    if (std::string_view(f->name) == feature) return std::string_view(f->value) != "0";
  }
  return false;
}

}  // namespace weft::detail

namespace weft {

CpuBackend cpu_backend() {
  detail::ensure_backend();
  return detail::loaded_cpu_backend();
}

}  // namespace weft
