#include "model_cache.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "progress.hpp"
#include "weft/weft.hpp"

namespace weft_cli {

std::string cache_dir() {
  if (const char *d = std::getenv("WEFT_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char *d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d != '\0') return std::string(d) + "/weft";
  if (const char *h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/weft";
  return ".weft-cache";
}

std::string ensure_preset_model(const std::string &preset, unsigned seed) {
  const auto dir = std::filesystem::path(cache_dir()) / "models";
  const auto path = dir / fmt::format("{}-seed{}.gguf", preset, seed);
  if (std::filesystem::exists(path)) return path.string();
  std::filesystem::create_directories(dir);
  fmt::print(stderr, "weft: generating the {} model into {} (once)\n", preset, path.string());
  ProgressBar bar("make-model " + preset);
  weft::make_model({.preset = weft::parse_preset(preset),
                    .seed = seed,
                    .out = path.string(),
                    .on_progress = [&](float f) { bar.update(f); }});
  bar.finish();
  return path.string();
}

}  // namespace weft_cli
