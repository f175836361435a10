// weft::default_cache_dir (weft/cache.hpp).
#include <cstdlib>
#include <string>

#include "weft/cache.hpp"

namespace weft {

std::string default_cache_dir() {
  if (const char *d = std::getenv("WEFT_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char *d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d != '\0') return std::string(d) + "/weft";
#ifdef _WIN32
  if (const char *d = std::getenv("LOCALAPPDATA"); d != nullptr && *d != '\0') return std::string(d) + "/weft";
#endif
  if (const char *d = std::getenv("HOME"); d != nullptr && *d != '\0') return std::string(d) + "/.cache/weft";
  return {};
}

}  // namespace weft
