// Error codes and version strings.
#include "core/internal.hpp"
#include "weft/error.hpp"
#include "weft/version.hpp"

namespace weft {

const char *errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::out_of_range: return "out_of_range";
    case Errc::not_found: return "not_found";
    case Errc::io: return "io";
    case Errc::corrupt: return "corrupt";
    case Errc::incompatible: return "incompatible";
    case Errc::backend: return "backend";
    case Errc::disposed: return "disposed";
    case Errc::cancelled: return "cancelled";
  }
  return "unknown";
}

const char *version() noexcept { return WEFT_VERSION_STRING; }

const char *llama_version() noexcept { return WEFT_LLAMA_VERSION_STRING; }

namespace detail {

void fail(Errc code, const std::string &message) { throw Error(code, message); }

}  // namespace detail
}  // namespace weft
