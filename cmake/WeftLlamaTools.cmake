# cmake -DSRC=... -DBASE=... -DARGS="a;b" -DTARGETS="llama-batched;..." -P WeftLlamaTools.cmake
# Builds llama.cpp's own tools (for compatibility checks and side-by-side
# benchmarks) from the same source and flags as weft's llama.cpp, into the
# cache next to the library build. Built on demand only; ccache keeps a
# rebuild cheap.
foreach(v SRC BASE TARGETS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "WeftLlamaTools.cmake needs -D${v}=...")
  endif()
endforeach()
string(REPLACE "|" ";" ARGS "${ARGS}")
string(REPLACE "|" ";" TARGETS "${TARGETS}")
set(build "${BASE}/tools")
set(stamp "${BASE}/tools/.weft-tools")
string(SHA256 want "${TARGETS};${ARGS}")
if(EXISTS "${stamp}")
  file(READ "${stamp}" have)
  if(have STREQUAL want)
    return()
  endif()
endif()
file(LOCK "${BASE}.tools.lock" TIMEOUT 3600)
find_program(NINJA ninja)
set(gen)
if(NINJA)
  set(gen -G Ninja)
endif()
message(STATUS "weft: building llama.cpp tools (${TARGETS}) into ${build}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SRC}" -B "${build}" ${gen} ${ARGS}
    -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF
    -DCMAKE_RUNTIME_OUTPUT_DIRECTORY=${build}/bin
    RESULT_VARIABLE rc)
if(rc EQUAL 0)
  cmake_host_system_information(RESULT ncpu QUERY NUMBER_OF_LOGICAL_CORES)
  execute_process(COMMAND "${CMAKE_COMMAND}" --build "${build}" --parallel ${ncpu} --target ${TARGETS}
                  RESULT_VARIABLE rc)
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "weft: building llama.cpp tools failed")
endif()
file(WRITE "${stamp}" "${want}")
