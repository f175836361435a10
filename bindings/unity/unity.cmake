# The Unity package (UPM): generated from bindings/csharp's sources (they
# exist once) plus bindings/unity's glue, sample and docs, by
# make_package.cmake; `unity-package` makes the folder and the .tgz that
# Unity's Package Manager installs ("Add package from tarball").
# Its tests compile the package's Runtime and sample against a UnityEngine
# stub (Tests/UnityStub.cs, never shipped) under Mono.
# Included from bindings/csharp/CMakeLists.txt (after find_program(mcs, mono)).

set(_weft_unity_dir ${CMAKE_CURRENT_LIST_DIR})
set(_weft_unity_out ${PROJECT_BINARY_DIR}/unity-package)
set(_weft_unity_tgz ${_weft_unity_out}/com.weft.llm-${PROJECT_VERSION}.tgz)
# Windows x64's library to ship beside Linux's: by default the windows
# preset's, when it was built before this package is made (the README's
# test command builds `windows` before `dist`); "" for Linux only.
set(WEFT_UNITY_WINDOWS_DLL "${PROJECT_SOURCE_DIR}/build/windows/plugins/weft.dll" CACHE FILEPATH
    "weft.dll to put in the Unity package (Windows x64); packed when the file exists")
set(_weft_unity_expect_dll "")
if(WEFT_UNITY_WINDOWS_DLL AND EXISTS "${WEFT_UNITY_WINDOWS_DLL}")
  set(_weft_unity_expect_dll "${WEFT_UNITY_WINDOWS_DLL}")  # there at configure time: packed, and checked
endif()

file(GLOB _weft_unity_inputs CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/Weft*.cs
  ${_weft_unity_dir}/Runtime/*
  ${_weft_unity_dir}/Editor/*
  ${_weft_unity_dir}/Samples~/NpcDialogue/*
  ${_weft_unity_dir}/package.json.in ${_weft_unity_dir}/README.md
  ${_weft_unity_dir}/make_package.cmake ${_weft_unity_dir}/metas.cmake)

# The library this build makes goes in as Linux x86-64's (only Linux builds
# include this file: a Windows cross build's tests stop before it).
# The portable build (`dist` preset) adds llama.cpp, ggml and the CPU
# variants beside it. Lists travel '|'-separated through the command line.
set(_weft_unity_linux_lib "")
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  get_property(_weft_unity_linux_lib GLOBAL PROPERTY WEFT_PLUGIN_FILES)
  string(REPLACE ";" "|" _weft_unity_linux_lib "${_weft_unity_linux_lib}")
endif()

if(WEFT_CPU_VARIANTS)
  set(_weft_unity_note "libweft.so portable: every ggml CPU variant beside it, the best loaded at run time")
elseif(WEFT_NATIVE)
  set(_weft_unity_note "note: WEFT_NATIVE=ON tunes libweft.so for this CPU: ship the dist preset's package (cmake --workflow --preset dist)")
else()
  set(_weft_unity_note "libweft.so built without -march=native, one ISA level")
endif()

add_custom_command(OUTPUT ${_weft_unity_tgz} ${_weft_unity_out}/stamp
  COMMAND ${CMAKE_COMMAND}
          -DCS_DIR=${CMAKE_CURRENT_SOURCE_DIR} -DUNITY_DIR=${_weft_unity_dir} -DOUT=${_weft_unity_out}
          -DVERSION=${PROJECT_VERSION} -DTGZ=${_weft_unity_tgz}
          "-DLINUX_LIBS=${_weft_unity_linux_lib}" -DWINDOWS_DLL=${WEFT_UNITY_WINDOWS_DLL}
          -P ${_weft_unity_dir}/make_package.cmake
  COMMAND ${CMAKE_COMMAND} -E echo "${_weft_unity_note}"
  COMMAND ${CMAKE_COMMAND} -E touch ${_weft_unity_out}/stamp
  DEPENDS ${_weft_unity_inputs} weft_shared ${_weft_unity_expect_dll}
  COMMENT "Generating the Unity package and ${_weft_unity_tgz}"
  VERBATIM)
add_custom_target(unity-package ALL DEPENDS ${_weft_unity_tgz})

# The layout Unity expects, checked on the folder and the unpacked .tgz.
add_test(NAME unity_package_layout
  COMMAND ${CMAKE_COMMAND} -DPKG=${_weft_unity_out}/package -DTGZ=${_weft_unity_tgz} -DCS_DIR=${CMAKE_CURRENT_SOURCE_DIR}
          "-DEXPECT_WINDOWS=${_weft_unity_expect_dll}"
          -DWORK=${_weft_unity_out}/check -P ${_weft_unity_dir}/check_package.cmake)
set_tests_properties(unity_package_layout PROPERTIES TIMEOUT 60)

# Installing by git URL: the package committed as a branch's root.
add_test(NAME unity_publish_branch
  COMMAND ${CMAKE_COMMAND} -DSCRIPT=${_weft_unity_dir}/publish_branch.sh -DPKG=${_weft_unity_out}/package
          -DWORK=${_weft_unity_out}/publish-check -P ${_weft_unity_dir}/check_publish.cmake)
set_tests_properties(unity_publish_branch PROPERTIES TIMEOUT 120 ENVIRONMENT
  "GIT_AUTHOR_NAME=weft tests;GIT_AUTHOR_EMAIL=tests@weft.invalid;GIT_COMMITTER_NAME=weft tests;GIT_COMMITTER_EMAIL=tests@weft.invalid")

set(_weft_unity_tests log_swap unity_reload app_domain load_async android_path pump sample omp_passive editor_build_check)
if(_weft_cs_skip)
  foreach(_t IN LISTS _weft_unity_tests)
    add_test(NAME unity_${_t} COMMAND ${CMAKE_COMMAND} -E echo "unity tests skipped: ${_weft_cs_skip}")
    set_tests_properties(unity_${_t} PROPERTIES SKIP_REGULAR_EXPRESSION "unity tests skipped")
  endforeach()
  add_custom_target(unity_tests)  # named by the dist build preset
  return()
endif()

# Compiled from the generated package, as Unity would see it, with the
# defines of the Linux editor; the stub and the tests beside it.
set(_weft_unity_exe ${CMAKE_CURRENT_BINARY_DIR}/WeftUnityTests.exe)
file(GLOB _weft_unity_test_sources CONFIGURE_DEPENDS ${_weft_unity_dir}/Tests/*.cs)
add_custom_command(OUTPUT ${_weft_unity_exe}
  COMMAND ${CMAKE_COMMAND} -DMCS=${WEFT_MCS} -DPKG=${_weft_unity_out}/package -DOUT=${_weft_unity_exe}
          "-DEXTRA=${_weft_unity_test_sources};${CMAKE_CURRENT_SOURCE_DIR}/Samples/Check.cs"
          -P ${_weft_unity_dir}/compile_tests.cmake
  DEPENDS ${_weft_unity_tgz} ${_weft_unity_test_sources} ${_weft_unity_dir}/compile_tests.cmake
  COMMENT "Compiling the Unity package's Runtime and sample against the UnityEngine stub"
  VERBATIM)
add_custom_target(unity_tests ALL DEPENDS ${_weft_unity_exe} ${CMAKE_CURRENT_BINARY_DIR}/libweft.so)

foreach(_t IN LISTS _weft_unity_tests)
  add_test(NAME unity_${_t}
    COMMAND ${WEFT_MONO} --debug ${_weft_unity_exe} ${WEFT_TEST_MODELS}/tiny.gguf ${_t}
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  # The sample and the reload tests time frames and count threads: alone.
  set_tests_properties(unity_${_t} PROPERTIES FIXTURES_REQUIRED "models;capi_adapters" TIMEOUT 300 RUN_SERIAL ON)
endforeach()
