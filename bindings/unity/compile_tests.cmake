# cmake -DMCS= -DPKG=<package folder> -DOUT=<exe> -DEXTRA=<test sources> -P compile_tests.cmake
# Compiles the package's Runtime, Editor and sample exactly as generated
# (into one assembly: the stub stands for both of Unity's), with the
# defines Unity's Linux editor sets, plus the stub and the tests.
cmake_minimum_required(VERSION 3.21)  # script mode: IN_LIST, file(COPY_FILE), string(JSON)
file(GLOB _runtime ${PKG}/Runtime/*.cs)
file(GLOB _editor ${PKG}/Editor/*.cs)
file(GLOB _sample "${PKG}/Samples~/NpcDialogue/*.cs")
if(NOT _runtime OR NOT _sample)
  message(FATAL_ERROR "no Runtime or sample sources under ${PKG}")
endif()
execute_process(
  COMMAND ${MCS} -nologo -warnaserror -debug -target:exe -out:${OUT}
          -define:UNITY_5_3_OR_NEWER -define:UNITY_2021_3_OR_NEWER -define:UNITY_EDITOR -define:UNITY_EDITOR_LINUX
          -define:UNITY_STANDALONE_LINUX -define:ENABLE_LEGACY_INPUT_MANAGER
          ${_runtime} ${_editor} ${_sample} ${EXTRA}
  RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "mcs failed (${_rc})")
endif()
