# llama.cpp as a pinned, verified, cached dependency.
#
# Three ways to get llama.cpp, first match wins:
#   -DWEFT_LLAMA_PREFIX=/opt/llama      an installed llama.cpp (lib/cmake/llama)
#   -DWEFT_LLAMA_SOURCE_DIR=~/llama.cpp your own source tree, built into the cache
#   (default)                           the pinned release, fetched from the npm
#                                       registry, integrity checked, built once
# Built trees live in WEFT_CACHE_DIR (default ~/.cache/weft), keyed by source,
# flags and compiler, so a fresh clone of weft does not recompile llama.cpp.

set(WEFT_LLAMA_VERSION   "v0.4.0")
set(WEFT_LLAMA_COMMIT    "80fb11ac73e66d89eae2c6a91d8a77428fa733ed")
set(WEFT_LLAMA_NPM       "node-llama-cpp@3.21.1")
set(WEFT_LLAMA_INTEGRITY "sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg=="
    CACHE STRING "npm integrity of the package that carries the pinned llama.cpp")

set(WEFT_LLAMA_PREFIX     "" CACHE PATH "Use an installed llama.cpp at this prefix")
set(WEFT_LLAMA_SOURCE_DIR "" CACHE PATH "Use this llama.cpp source tree instead of the pinned release")
if(DEFINED ENV{WEFT_CACHE_DIR})
  set(_weft_cache_default "$ENV{WEFT_CACHE_DIR}")
elseif(DEFINED ENV{XDG_CACHE_HOME})
  set(_weft_cache_default "$ENV{XDG_CACHE_HOME}/weft")
else()
  set(_weft_cache_default "$ENV{HOME}/.cache/weft")
endif()
set(WEFT_CACHE_DIR "${_weft_cache_default}" CACHE PATH "Where the llama.cpp source and builds are cached")
set(WEFT_LLAMA_EXTRA_ARGS "" CACHE STRING "Extra -D arguments for the llama.cpp build (;-separated)")
set(WEFT_LLAMA_JOBS "" CACHE STRING "Parallel jobs for the one-time llama.cpp build (default: all cores)")
option(WEFT_CUDA   "Build llama.cpp with the CUDA backend"   OFF)
option(WEFT_VULKAN "Build llama.cpp with the Vulkan backend" OFF)
option(WEFT_METAL  "Build llama.cpp with the Metal backend"  OFF)
option(WEFT_NATIVE "Tune llama.cpp for this CPU (GGML_NATIVE)" ON)
# The portable build (the `dist` preset): ggml's CPU backend once per x86-64
# ISA level (x64 ... sapphirerapids) as loadable modules beside the library,
# the best one this CPU runs chosen at run time (src/core/backend_loader.cpp).
# llama.cpp and ggml become shared libraries; WEFT_NATIVE is ignored.
option(WEFT_CPU_VARIANTS "Portable build: every ggml CPU variant, chosen at run time (GGML_BACKEND_DL)" OFF)
if(WEFT_CPU_VARIANTS AND WEFT_NATIVE)
  message(STATUS "weft: WEFT_CPU_VARIANTS=ON builds portable CPU variants; WEFT_NATIVE is ignored")
  set(WEFT_NATIVE OFF)
endif()
# ggml's RPC backend: models split over ggml-rpc-server peers (ModelParams::rpc).
option(WEFT_RPC    "Build llama.cpp with the RPC backend (GGML_RPC)" ON)

# The source of the pinned release, as a script so it also runs on its own
# (cmake -P cmake/WeftFetchLlama.cmake) and reports errors without a stack.
function(weft_llama_pinned_source out_dir)
  set(src "${WEFT_CACHE_DIR}/src/llama.cpp-${WEFT_LLAMA_VERSION}")
  if(NOT EXISTS "${src}/.weft-verified")
    execute_process(
      COMMAND "${CMAKE_COMMAND}" -DDEST=${src} -DPACKAGE=${WEFT_LLAMA_NPM}
              -DINTEGRITY=${WEFT_LLAMA_INTEGRITY} -DCOMMIT=${WEFT_LLAMA_COMMIT}
              -P "${PROJECT_SOURCE_DIR}/cmake/WeftFetchLlama.cmake"
      RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "weft: could not get the pinned llama.cpp (see the message above).\n"
        "Alternatives: -DWEFT_LLAMA_SOURCE_DIR=<llama.cpp checkout> or -DWEFT_LLAMA_PREFIX=<install prefix>.")
    endif()
  endif()
  set(${out_dir} "${src}" PARENT_SCOPE)
endfunction()

function(weft_llama_build src out_prefix)
  if(WEFT_CPU_VARIANTS)
    # Shared libraries that find each other in their own directory ($ORIGIN),
    # so the plugin folder can move as a whole; unversioned (libllama.so, not
    # libllama.so.0), because Unity ships only files that end in .so.
    # -Bsymbolic-functions: a library's calls to its own functions bind at
    # link time, not through the PLT, as in the static build (ggml's graph
    # building makes thousands such calls a step).
    set(link_args -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON
                  "-DCMAKE_INSTALL_RPATH=$ORIGIN" -DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON
                  -DCMAKE_SHARED_LINKER_FLAGS=-Wl,-Bsymbolic-functions
                  -DCMAKE_MODULE_LINKER_FLAGS=-Wl,-Bsymbolic-functions)
  else()
    set(link_args -DBUILD_SHARED_LIBS=OFF)
  endif()
  set(args
    -DCMAKE_BUILD_TYPE=Release
    ${link_args}
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
    -DLLAMA_OPENSSL=OFF
    -DGGML_NATIVE=${WEFT_NATIVE}
    -DGGML_CUDA=${WEFT_CUDA} -DGGML_VULKAN=${WEFT_VULKAN} -DGGML_METAL=${WEFT_METAL}
    -DGGML_RPC=${WEFT_RPC}
    ${WEFT_LLAMA_EXTRA_ARGS})
  if(WEFT_SANITIZE STREQUAL "thread")
    # TSan must see every access and every synchronisation: instrument
    # llama.cpp and ggml, and use ggml's own threadpool (libgomp is opaque to it).
    list(APPEND args -DLLAMA_SANITIZE_THREAD=ON -DGGML_SANITIZE_THREAD=ON -DGGML_OPENMP=OFF)
  endif()
  # A cross build (cmake/toolchains/*.cmake) builds llama.cpp with the same
  # toolchain. Keyed by the toolchain file's content, not its path, so another
  # checkout shares the cache; a native build adds nothing (its key is unchanged).
  set(key_args "${args}")
  if(CMAKE_TOOLCHAIN_FILE)
    file(SHA256 "${CMAKE_TOOLCHAIN_FILE}" _toolchain_hash)
    list(APPEND args "-DCMAKE_TOOLCHAIN_FILE=${CMAKE_TOOLCHAIN_FILE}" "-DCMAKE_SYSTEM_NAME=${CMAKE_SYSTEM_NAME}")
    list(APPEND key_args "toolchain=${_toolchain_hash}" "-DCMAKE_SYSTEM_NAME=${CMAKE_SYSTEM_NAME}")
  endif()
  # Debian 12's Vulkan headers lack what ggml-vulkan.cpp names from newer
  # ones: a shim directory first on the include path supplies it
  # (cmake/vulkan-compat/vulkan/vulkan.hpp), keyed by its content.
  if(WEFT_VULKAN)
    set(_vk_shim "${PROJECT_SOURCE_DIR}/cmake/vulkan-compat")
    file(SHA256 "${_vk_shim}/vulkan/vulkan.hpp" _vk_shim_hash)
    list(APPEND args "-DCMAKE_CXX_FLAGS=-I${_vk_shim}")
    list(APPEND key_args "vulkan-compat=${_vk_shim_hash}")
  endif()
  # The key covers everything that changes the binaries.
  set(src_id "")
  if(EXISTS "${src}/.weft-verified")
    file(READ "${src}/.weft-verified" src_id LIMIT 200)
  endif()
  if(src_id STREQUAL "")
    set(src_id "${src}")  # a user tree: keyed by its path and HEAD
    execute_process(COMMAND git -C "${src}" rev-parse HEAD OUTPUT_VARIABLE head
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    string(APPEND src_id "@${head}")
  endif()
  string(SHA256 key "${src_id};${key_args};${CMAKE_CXX_COMPILER_ID};${CMAKE_CXX_COMPILER_VERSION};${CMAKE_C_COMPILER}")
  string(SUBSTRING "${key}" 0 16 key)
  set(base "${WEFT_CACHE_DIR}/build/llama.cpp-${WEFT_LLAMA_VERSION}-${key}")
  set(prefix "${base}/install")
  set(${out_prefix} "${prefix}" PARENT_SCOPE)
  set(WEFT_LLAMA_BUILD_ARGS "${args}" CACHE INTERNAL "")
  set(WEFT_LLAMA_BUILD_BASE "${base}" CACHE INTERNAL "")
  if(EXISTS "${prefix}/.weft-complete")
    return()
  endif()

  file(MAKE_DIRECTORY "${WEFT_CACHE_DIR}/build")
  # Two configures at once (two presets) must not build into one tree.
  file(LOCK "${base}.lock" GUARD FUNCTION TIMEOUT 3600 RESULT_VARIABLE lock_rc)
  if(NOT lock_rc EQUAL 0)
    message(FATAL_ERROR "weft: could not lock ${base}.lock within an hour: ${lock_rc}")
  endif()
  if(EXISTS "${prefix}/.weft-complete")
    return()
  endif()
  message(STATUS "weft: building llama.cpp ${WEFT_LLAMA_VERSION} once into ${base} (a few minutes; cached afterwards)")
  set(gen_args)
  find_program(WEFT_NINJA ninja)
  if(WEFT_NINJA)
    set(gen_args -G Ninja)
  endif()
  include(ProcessorCount)
  ProcessorCount(ncpu)
  if(ncpu EQUAL 0)
    set(ncpu 2)
  endif()
  if(WEFT_LLAMA_JOBS)
    set(ncpu ${WEFT_LLAMA_JOBS})  # a shared machine: fewer jobs (not part of the key)
  endif()
  foreach(step
      "${CMAKE_COMMAND};-S;${src};-B;${base}/lib;${gen_args};-DCMAKE_C_COMPILER=${CMAKE_C_COMPILER};-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER};${args}"
      "${CMAKE_COMMAND};--build;${base}/lib;--parallel;${ncpu}"
      "${CMAKE_COMMAND};--install;${base}/lib;--prefix;${prefix}")
    execute_process(COMMAND ${step} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "weft: building llama.cpp failed in: ${step}")
    endif()
  endforeach()
  file(WRITE "${prefix}/.weft-complete" "${src_id}\n")
endfunction()

if(WEFT_LLAMA_PREFIX)
  set(_weft_llama_prefix "${WEFT_LLAMA_PREFIX}")
  set(WEFT_LLAMA_SRC "" CACHE INTERNAL "")
else()
  if(WEFT_LLAMA_SOURCE_DIR)
    if(NOT EXISTS "${WEFT_LLAMA_SOURCE_DIR}/include/llama.h")
      message(FATAL_ERROR "weft: WEFT_LLAMA_SOURCE_DIR=${WEFT_LLAMA_SOURCE_DIR} has no include/llama.h; point it at a llama.cpp source tree.")
    endif()
    set(_weft_src "${WEFT_LLAMA_SOURCE_DIR}")
  else()
    weft_llama_pinned_source(_weft_src)
  endif()
  set(WEFT_LLAMA_SRC "${_weft_src}" CACHE INTERNAL "llama.cpp source tree (vocab files, tools)")
  weft_llama_build("${_weft_src}" _weft_llama_prefix)
endif()

# A build tree that found llama.cpp under another prefix (other flags, say
# WEFT_RPC toggled) has its package and library paths cached: forget them,
# or the old libraries would be linked.
if(NOT "${_weft_llama_prefix}" STREQUAL "${WEFT_LLAMA_FOUND_PREFIX}")
  get_cmake_property(_weft_cached CACHE_VARIABLES)
  foreach(v IN LISTS _weft_cached)
    if(v MATCHES "^(llama_DIR|ggml_DIR|llama_LIBRARY|GGML_[A-Z0-9_]*LIBRARY)$")
      unset(${v} CACHE)
    endif()
  endforeach()
  set(WEFT_LLAMA_FOUND_PREFIX "${_weft_llama_prefix}" CACHE INTERNAL "prefix the cached llama/ggml paths belong to")
endif()
if(CMAKE_CROSSCOMPILING)
  # A toolchain that searches its sysroot only (cmake/toolchains/*.cmake)
  # must also see the llama.cpp it built, and ggml's and llama's own lookups.
  list(APPEND CMAKE_FIND_ROOT_PATH "${_weft_llama_prefix}")
endif()
find_package(llama CONFIG REQUIRED PATHS "${_weft_llama_prefix}" NO_DEFAULT_PATH)
message(STATUS "weft: llama.cpp from ${_weft_llama_prefix}")

# `cmake --build <dir> --target llama-tools` builds llama.cpp's own
# llama-batched, llama-batched-bench, llama-server and llama-embedding from the same source
# and flags, for side-by-side checks; their directory is WEFT_LLAMA_TOOLS_DIR.
if(WEFT_LLAMA_SRC)
  set(WEFT_LLAMA_TOOLS_DIR "${WEFT_LLAMA_BUILD_BASE}/tools/bin")
  # Lists travel '|'-separated: a custom command would split them at ';'.
  string(REPLACE ";" "|" _weft_args "${WEFT_LLAMA_BUILD_ARGS}")
  add_custom_target(llama-tools
    COMMAND "${CMAKE_COMMAND}" -DSRC=${WEFT_LLAMA_SRC} -DBASE=${WEFT_LLAMA_BUILD_BASE}
            "-DARGS=${_weft_args}" "-DTARGETS=llama-batched|llama-batched-bench|llama-server|llama-embedding"
            -P "${PROJECT_SOURCE_DIR}/cmake/WeftLlamaTools.cmake"
    USES_TERMINAL VERBATIM
    COMMENT "llama.cpp tools in ${WEFT_LLAMA_TOOLS_DIR}")
endif()

# ggml-rpc-server from the same source and flags: the peer that
# ModelParams::rpc talks to (the RPC tests start it; docs/DEPLOYING.md).
if(WEFT_LLAMA_SRC AND NOT WEFT_CPU_VARIANTS AND "ggml-rpc" IN_LIST GGML_AVAILABLE_BACKENDS AND EXISTS "${WEFT_LLAMA_SRC}/tools/rpc/rpc-server.cpp")
  add_executable(ggml-rpc-server "${WEFT_LLAMA_SRC}/tools/rpc/rpc-server.cpp")
  target_link_libraries(ggml-rpc-server PRIVATE ggml::ggml)
  target_compile_features(ggml-rpc-server PRIVATE cxx_std_17)
  set_target_properties(ggml-rpc-server PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/bin")
endif()
