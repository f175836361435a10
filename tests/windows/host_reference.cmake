# The Linux side of the Windows tests (cmake -P, from tests/windows):
# models made by the native `weft` CLI, a copy of tiny.gguf under a
# directory with non-ASCII characters, and the scenarios built against the
# native libweft.so and run there, for the Windows run to compare with.
#   -DCLI=<native weft> -DPLUGIN=<native libweft.so> -DCC=<host cc>
#   -DINCLUDE=<include dir> -DSRC=<scenarios.c> -DMODELS=<dir> -DUDIR=<dir>
#   [-DSUBDIRS=a|b]  the runs' folders under UDIR (default linux|windows)
foreach(v CLI PLUGIN CC INCLUDE SRC MODELS UDIR)
  if(NOT ${v})
    message(FATAL_ERROR "host_reference.cmake: -D${v}= is required")
  endif()
endforeach()
foreach(f CLI PLUGIN)
  if(NOT EXISTS "${${f}}")
    message(FATAL_ERROR "the Windows tests need the native build's ${${f}}: "
      "cmake --preset release && cmake --build --preset release --target weft-cli weft_shared "
      "(or -DWEFT_HOST_CLI= / -DWEFT_HOST_PLUGIN= when configuring the windows preset)")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc TIMEOUT 600)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()

file(MAKE_DIRECTORY "${MODELS}")
# As tests/CMakeLists.txt and tests/capi make them for the Linux tests.
run("${CLI}" make-model --preset tiny --seed 7 -q --out "${MODELS}/tiny.gguf")
foreach(kind lora cvec)
  run("${CLI}" make-adapter --base "${MODELS}/tiny.gguf" --kind ${kind} --seed 5 -q --out "${MODELS}/tiny-${kind}.gguf")
endforeach()
run("${CLI}" make-mmproj --base "${MODELS}/tiny.gguf" --seed 1 -q --out "${MODELS}/tiny-mmproj.gguf")

# A fresh non-ASCII directory: the model is loaded from it, state and spill
# files are written in it, on both platforms.
if(NOT SUBDIRS)
  set(SUBDIRS "linux|windows")
endif()
string(REPLACE "|" ";" SUBDIRS "${SUBDIRS}")
file(REMOVE_RECURSE "${UDIR}")
foreach(d IN LISTS SUBDIRS)
  file(MAKE_DIRECTORY "${UDIR}/${d}")
endforeach()
file(COPY_FILE "${MODELS}/tiny.gguf" "${UDIR}/tiny.gguf")

get_filename_component(plugin_dir "${PLUGIN}" DIRECTORY)
run("${CC}" -std=c99 -O1 -Wall -Wextra -pedantic -Werror "-I${INCLUDE}" "${SRC}" -o "${MODELS}/scenarios-linux"
    "${PLUGIN}" "-Wl,-rpath,${plugin_dir}" -lm)
run("${MODELS}/scenarios-linux" "${UDIR}/tiny.gguf" "${UDIR}/linux" "${MODELS}/scenarios-linux.txt")
message(STATUS "Linux transcript: ${MODELS}/scenarios-linux.txt")
