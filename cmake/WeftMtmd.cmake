# llama.cpp's multimodal library (mtmd: clip, image and audio preprocessing,
# mtmd-helper) compiled from the same llama.cpp source as weft's llama.cpp.
#
# Built here rather than in the cached llama.cpp build (cmake/WeftLlamaCpp.cmake)
# because it is small (one clip.cpp, the projector graphs) and because its
# objects go *inside* weft: `weft_mtmd` is an OBJECT library whose objects are
# added to the static libweft.a (and so to plugins/libweft.so, whose version
# script exports weft_* only). Nothing is added to weft's link interface, so an
# installed weft needs no extra library and find_package(weft) is unchanged.
# The sources compile with weft's hidden visibility (MTMD_API is empty in a
# static build) and weft's sanitizer flags (TSan must see mtmd's threads),
# with warnings off: third-party code is not ours to fix.
#
# Sets WEFT_MTMD_ENABLED (ON when built) and WEFT_MTMD_INCLUDE_DIRS (mtmd.h,
# mtmd-helper.h) for weft's private sources and tests.

option(WEFT_MTMD "Build llama.cpp's mtmd (images, audio) into weft" ON)
set(WEFT_MTMD_ENABLED OFF)
set(WEFT_MTMD_INCLUDE_DIRS "")

if(WEFT_MTMD)
  set(_mtmd_dir "${WEFT_LLAMA_SRC}/tools/mtmd")
  if(NOT WEFT_LLAMA_SRC OR NOT EXISTS "${_mtmd_dir}/CMakeLists.txt")
    # An installed llama.cpp (WEFT_LLAMA_PREFIX) brings no mtmd source.
    message(WARNING "weft: WEFT_MTMD needs llama.cpp's source tree (tools/mtmd), "
      "which WEFT_LLAMA_PREFIX does not provide: building without mtmd. "
      "-DWEFT_MTMD=OFF silences this; -DWEFT_LLAMA_SOURCE_DIR=<tree> builds it.")
  else()
    # The source list of upstream's add_library(mtmd ...), read from its own
    # CMakeLists.txt so a llama.cpp update that adds a projector needs no edit here.
    file(READ "${_mtmd_dir}/CMakeLists.txt" _mtmd_cmake)
    string(REGEX MATCH "add_library\\(mtmd[^)]*\\)" _mtmd_block "${_mtmd_cmake}")
    string(REGEX MATCHALL "[A-Za-z0-9_./-]+\\.cpp" _mtmd_srcs "${_mtmd_block}")
    if(NOT _mtmd_srcs)
      message(FATAL_ERROR "weft: found no sources in add_library(mtmd ...) of ${_mtmd_dir}/CMakeLists.txt")
    endif()
    list(TRANSFORM _mtmd_srcs PREPEND "${_mtmd_dir}/")
    # vendor::hash (mtmd-helper hashes media for its cache); stb_image and
    # miniaudio are header-only. Video (MTMD_VIDEO, an ffmpeg subprocess) is off.
    set(_mtmd_vendor "${WEFT_LLAMA_SRC}/vendor")
    set(_mtmd_hash_c
      "${_mtmd_vendor}/hash/xxhash/xxhash.c"
      "${_mtmd_vendor}/hash/sha1/sha1.c"
      "${_mtmd_vendor}/hash/sha256/sha256.c")
    # sha1 lives in a C++ namespace upstream (vendor/hash/CMakeLists.txt).
    set_source_files_properties("${_mtmd_vendor}/hash/sha1/sha1.c" PROPERTIES LANGUAGE CXX)

    add_library(weft_mtmd OBJECT ${_mtmd_srcs} "${_mtmd_vendor}/hash/hash.cpp" ${_mtmd_hash_c})
    # C++17 as upstream compiles it (weft's C++20 default changes u8 literals).
    set_target_properties(weft_mtmd PROPERTIES
      CXX_STANDARD 17
      POSITION_INDEPENDENT_CODE ON
      CXX_VISIBILITY_PRESET hidden
      C_VISIBILITY_PRESET hidden
      VISIBILITY_INLINES_HIDDEN ON
      UNITY_BUILD OFF)  # upstream's sources are not written to share one unit
    target_include_directories(weft_mtmd PRIVATE
      "${_mtmd_dir}" "${_mtmd_vendor}" "${_mtmd_vendor}/hash")
    # Headers and usage requirements of the same llama.cpp and ggml weft links.
    target_link_libraries(weft_mtmd PRIVATE llama)
    find_package(Threads REQUIRED)
    target_link_libraries(weft_mtmd PRIVATE Threads::Threads)
    target_compile_options(weft_mtmd PRIVATE -w)
    # An -O0 vision encoder makes every image test slow; asserts stay on.
    target_compile_options(weft_mtmd PRIVATE $<$<CONFIG:Debug>:-O1>)
    if(WIN32)
      # mingw's math.h hides M_PI under strict -std=c++17 (upstream builds gnu++17).
      target_compile_definitions(weft_mtmd PRIVATE _USE_MATH_DEFINES)
    endif()

    set(WEFT_MTMD_ENABLED ON)
    set(WEFT_MTMD_INCLUDE_DIRS "${_mtmd_dir}")
    list(LENGTH _mtmd_srcs _mtmd_n)
    message(STATUS "weft: mtmd from ${_mtmd_dir} (${_mtmd_n} sources), inside libweft")
  endif()
endif()
