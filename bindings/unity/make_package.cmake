# cmake -DCS_DIR= -DUNITY_DIR= -DOUT= -DVERSION= -DTGZ= -DLINUX_LIBS=a.so|b.so [-DWINDOWS_DLL=] -P make_package.cmake
#
# Builds the UPM package in ${OUT}/package and packs it as ${TGZ}, the
# npm-pack layout (everything under "package/") that Unity's Package
# Manager installs from a tarball:
#   package.json, README.md, CHANGELOG.md   (from bindings/unity)
#   Runtime/Weft.Runtime.asmdef, link.xml  (from bindings/unity/Runtime)
#   Runtime/Weft*.cs                       (copied from bindings/csharp: one source)
#   Runtime/WeftUnity.cs                   (Unity-only glue)
#   Editor/Weft.Editor.asmdef, Editor/WeftBuildCheck.cs (player-build check)
#   Runtime/Plugins/Linux/x86_64/libweft.so (portable build: with libllama.so,
#     libggml*.so and libggml-cpu-<variant>.so beside it),
#   Runtime/Plugins/Windows/x86_64/weft.dll
#   Samples~/NpcDialogue/NpcDialogue.cs, Documentation~/weft.md
# and a .meta beside every asset outside the "~" folders and inside them
# (a sample imported into Assets/ keeps its GUIDs).
cmake_minimum_required(VERSION 3.21)  # script mode: IN_LIST, file(COPY_FILE), string(JSON)
include(${CMAKE_CURRENT_LIST_DIR}/metas.cmake)

set(_pkg ${OUT}/package)
file(REMOVE_RECURSE ${_pkg})
file(MAKE_DIRECTORY ${_pkg}/Runtime ${_pkg}/Editor ${_pkg}/Samples~/NpcDialogue ${_pkg}/Documentation~)

set(WEFT_VERSION ${VERSION})
configure_file(${UNITY_DIR}/package.json.in ${_pkg}/package.json @ONLY)
file(COPY ${UNITY_DIR}/README.md DESTINATION ${_pkg})
file(COPY ${UNITY_DIR}/README.md DESTINATION ${_pkg}/Documentation~)
file(RENAME ${_pkg}/Documentation~/README.md ${_pkg}/Documentation~/weft.md)
file(WRITE ${_pkg}/CHANGELOG.md "# Changelog\n\n## ${VERSION}\n\n- First package: the C# binding, Unity glue, the NpcDialogue sample.\n")

file(GLOB _cs ${CS_DIR}/Weft*.cs)
file(GLOB _glue ${UNITY_DIR}/Runtime/*)
file(COPY ${_cs} ${_glue} DESTINATION ${_pkg}/Runtime)
file(GLOB _editor ${UNITY_DIR}/Editor/*)
file(COPY ${_editor} DESTINATION ${_pkg}/Editor)
file(GLOB _sample "${UNITY_DIR}/Samples~/NpcDialogue/*")
file(COPY ${_sample} DESTINATION ${_pkg}/Samples~/NpcDialogue)

string(REPLACE "|" ";" LINUX_LIBS "${LINUX_LIBS}")
foreach(_lib IN LISTS LINUX_LIBS)
  if(EXISTS ${_lib})
    get_filename_component(_name ${_lib} NAME)
    file(MAKE_DIRECTORY ${_pkg}/Runtime/Plugins/Linux/x86_64)
    file(COPY_FILE ${_lib} ${_pkg}/Runtime/Plugins/Linux/x86_64/${_name})
  endif()
endforeach()
if(WINDOWS_DLL AND EXISTS ${WINDOWS_DLL})
  file(MAKE_DIRECTORY ${_pkg}/Runtime/Plugins/Windows/x86_64)
  file(COPY_FILE ${WINDOWS_DLL} ${_pkg}/Runtime/Plugins/Windows/x86_64/weft.dll)
endif()

# .meta for every file and folder but the package root's "~" folders
# themselves (Unity imports nothing there; their contents get metas).
file(GLOB_RECURSE _all LIST_DIRECTORIES true RELATIVE ${_pkg} ${_pkg}/*)
foreach(_rel IN LISTS _all)
  if(_rel MATCHES "\\.meta$" OR _rel MATCHES "^[^/]*~$")
    continue()
  endif()
  weft_write_meta(${_pkg}/${_rel} ${_rel})
endforeach()

# npm pack style: a fixed mtime so the same inputs give the same bytes.
get_filename_component(_tgz_dir ${TGZ} DIRECTORY)
file(MAKE_DIRECTORY ${_tgz_dir})
file(GLOB_RECURSE _files RELATIVE ${OUT} ${OUT}/package/*)
list(SORT _files)
execute_process(COMMAND ${CMAKE_COMMAND} -E tar czf ${TGZ} "--mtime=2020-01-01 00:00:00 UTC" -- ${_files}
  WORKING_DIRECTORY ${OUT} RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "packing ${TGZ} failed (${_rc})")
endif()
