# Windows x64 from Debian: mingw-w64 with posix threads (std::thread and
# std::mutex need them; Debian's g++-mingw-w64-x86-64-posix). The inner
# llama.cpp build gets this same file (cmake/WeftLlamaCpp.cmake).
#   cmake --preset windows   (CMakePresets.json; docs/BUILDING.md)
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)

set(WEFT_MINGW_TRIPLE x86_64-w64-mingw32)
set(CMAKE_C_COMPILER   ${WEFT_MINGW_TRIPLE}-gcc-posix)
set(CMAKE_CXX_COMPILER ${WEFT_MINGW_TRIPLE}-g++-posix)
set(CMAKE_RC_COMPILER  ${WEFT_MINGW_TRIPLE}-windres)

# Headers and libraries from the mingw sysroot only, never the Linux ones;
# programs (ninja, git) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${WEFT_MINGW_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# What Debian 12's mingw-w64 headers lack and llama.cpp uses (see the file).
set(CMAKE_C_FLAGS_INIT   "-include ${CMAKE_CURRENT_LIST_DIR}/mingw-w64-compat.h")
set(CMAKE_CXX_FLAGS_INIT "-include ${CMAKE_CURRENT_LIST_DIR}/mingw-w64-compat.h")

# Everything static: weft.dll and the test programs need no libstdc++-6.dll,
# libgcc_s_seh-1.dll or libwinpthread-1.dll beside them, only Windows' own DLLs.
set(CMAKE_EXE_LINKER_FLAGS_INIT    "-static -static-libgcc -static-libstdc++")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-static -static-libgcc -static-libstdc++")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "-static -static-libgcc -static-libstdc++")
