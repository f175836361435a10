# The C ABI (include/weft/weft.h) as one self-contained shared library,
# `plugins/libweft.so` in the build tree: the static weft, llama.cpp, ggml,
# fmt and libstdc++ inside, only `weft_*` exported, so a Unity project drops
# this one file into Assets/Plugins. Included from src/CMakeLists.txt.
# Why each choice: docs/C_API.md.

add_library(weft_shared SHARED capi/c_api.cpp capi/c_api_executor.cpp capi/c_api_conversation.cpp capi/c_api_state.cpp
  capi/c_api_adapter.cpp capi/c_api_projector.cpp capi/c_api_tools.cpp capi/c_api_embedding.cpp capi/c_api_memory.cpp
  capi/c_api_fit.cpp capi/c_api_speculative.cpp)
# Debian's fmt is a shared library only; its compiled part goes inside too.
get_target_property(_weft_fmt_type fmt::fmt TYPE)
if(_weft_fmt_type STREQUAL "SHARED_LIBRARY")
  target_sources(weft_shared PRIVATE capi/c_api_fmt.cpp)
endif()
# One file, no SONAME version links: Unity copies exactly one file. Its own
# directory, so `-lweft` next to the static libweft.a stays unambiguous.
set_target_properties(weft_shared PROPERTIES
  OUTPUT_NAME weft
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/plugins
  RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/plugins
  LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/capi/weft.map)
target_compile_definitions(weft_shared PRIVATE WEFT_C_BUILDING WEFT_BUILDING)
target_link_libraries(weft_shared PRIVATE weft llama fmt::fmt weft_warnings)
if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
  target_link_options(weft_shared PRIVATE
    # Export weft_* only; keep every archive's symbols (llama, ggml, fmt) local.
    -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/capi/weft.map
    -Wl,--exclude-libs,ALL
    # libstdc++ inside: Unity's editor and players bring their own, maybe older.
    -static-libstdc++ -static-libgcc
    # libfmt.so is on the line through weft's link interface but no longer needed.
    -Wl,--as-needed)
  if(NOT WEFT_SANITIZE)
    # Every symbol resolved now, not at dlopen time in someone's game. (A
    # sanitized build leaves the runtime's symbols to the executable.)
    target_link_options(weft_shared PRIVATE -Wl,--no-undefined)
  endif()
elseif(APPLE)
  target_link_options(weft_shared PRIVATE "-Wl,-exported_symbol,_weft_*")
elseif(WIN32)
  # weft.dll exactly, no "lib" prefix: the C# binding's [DllImport("weft")]
  # and Unity look for that name. Beside it the import library libweft.dll.a
  # (mingw) and weft.def (MSVC: lib /def:weft.def /machine:x64 /out:weft.lib).
  set_target_properties(weft_shared PROPERTIES
    PREFIX ""
    IMPORT_PREFIX "lib"
    ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/plugins)
  target_link_options(weft_shared PRIVATE
    # Only what WEFT_C_API marks dllexport (weft_*, src/capi/weft.map's rule);
    # never ld's export-everything fallback. tests/windows checks the table.
    -Wl,--exclude-all-symbols
    -Wl,--output-def,${PROJECT_BINARY_DIR}/plugins/weft.def
    # libstdc++, libgcc and winpthread inside: only Windows' own DLLs needed.
    -static -static-libgcc -static-libstdc++
    -Wl,--no-undefined)
endif()

if(WEFT_CPU_VARIANTS)
  # The portable plugin is a folder: libweft.so with llama.cpp's and ggml's
  # shared libraries and every CPU variant beside it, found through $ORIGIN
  # (include/weft/backend.hpp). Unity ships each .so of the folder.
  file(GLOB _weft_llama_shared "${_weft_llama_prefix}/lib/*.so" "${_weft_llama_prefix}/bin/*.so")
  set_target_properties(weft_shared PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "$ORIGIN")
  add_custom_command(TARGET weft_shared POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E copy_if_different ${_weft_llama_shared} ${PROJECT_BINARY_DIR}/plugins
    COMMENT "Copying llama.cpp, ggml and the CPU variants into plugins/"
    VERBATIM)
  install(FILES ${_weft_llama_shared} DESTINATION ${CMAKE_INSTALL_LIBDIR}/weft)
  set(_weft_plugin_files $<TARGET_FILE:weft_shared> ${_weft_llama_shared})
else()
  set(_weft_plugin_files $<TARGET_FILE:weft_shared>)
endif()
# What a game copies: the plugin and whatever must sit beside it (read by
# the C# tests and the Unity package).
set_property(GLOBAL PROPERTY WEFT_PLUGIN_FILES ${_weft_plugin_files})

# Installed beside, not over, the static C++ library: lib/weft/libweft.so
# (Windows: bin/weft.dll, lib/weft/libweft.dll.a).
install(TARGETS weft_shared
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/weft
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}/weft
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
target_include_directories(weft_shared PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
