# fmt for a cross build (Windows via mingw-w64): Debian has no mingw package
# of fmt, so the host's fmt headers are used header-only (FMT_HEADER_ONLY).
# Only fmt's own headers are put on the include path, through a directory of
# symlinks, never the host's whole /usr/include (its glibc headers would
# shadow mingw's). Defines the target fmt::fmt as find_package(fmt) would.
set(WEFT_FMT_INCLUDE_DIR "/usr/include" CACHE PATH "Directory holding fmt/format.h (header-only fmt for cross builds)")
if(NOT EXISTS "${WEFT_FMT_INCLUDE_DIR}/fmt/format.h")
  message(FATAL_ERROR "weft: no fmt/format.h under WEFT_FMT_INCLUDE_DIR=${WEFT_FMT_INCLUDE_DIR} "
    "(Debian: apt-get install libfmt-dev)")
endif()
set(_weft_fmt_dir "${PROJECT_BINARY_DIR}/third_party/fmt-include")
file(MAKE_DIRECTORY "${_weft_fmt_dir}")
file(CREATE_LINK "${WEFT_FMT_INCLUDE_DIR}/fmt" "${_weft_fmt_dir}/fmt" SYMBOLIC)
# Imported, as find_package's is: weft's export set names it, never owns it.
add_library(fmt::fmt INTERFACE IMPORTED GLOBAL)
set_target_properties(fmt::fmt PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_weft_fmt_dir}"
  INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_weft_fmt_dir}"
  INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY)
