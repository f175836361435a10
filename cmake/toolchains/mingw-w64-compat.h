/* Force-included by cmake/toolchains/mingw-w64-x86_64.cmake into every C and
   C++ file (weft's and the inner llama.cpp build's). Debian 12's mingw-w64
   (10.0) lacks THREAD_POWER_THROTTLING_STATE, which ggml-cpu.c uses to keep
   Windows 11 from parking its threads; mingw-w64 11 has it. Same layout as
   the Windows SDK's (three ULONGs). */
#ifndef WEFT_MINGW_W64_COMPAT_H
#define WEFT_MINGW_W64_COMPAT_H
#if defined(_WIN32) && defined(__MINGW32__)
#include <_mingw.h>
#if __MINGW64_VERSION_MAJOR < 11 && !defined(THREAD_POWER_THROTTLING_CURRENT_VERSION)
typedef struct _THREAD_POWER_THROTTLING_STATE {
  unsigned long Version;
  unsigned long ControlMask;
  unsigned long StateMask;
} THREAD_POWER_THROTTLING_STATE;
#define THREAD_POWER_THROTTLING_CURRENT_VERSION 1
#define THREAD_POWER_THROTTLING_EXECUTION_SPEED 0x1
#endif
#endif
#endif
