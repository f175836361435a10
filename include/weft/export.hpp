// weft/export.hpp — symbol visibility. weft builds with hidden visibility;
// only what is marked WEFT_API is exported from a shared libweft.
#pragma once

#if defined(_WIN32)
// weft's C++ library is static on Windows (weft.dll exports the C ABI
// only): nothing to import or export unless it is built as a DLL itself.
#if !defined(WEFT_CXX_DLL)
#define WEFT_API
#elif defined(WEFT_BUILDING)
#define WEFT_API __declspec(dllexport)
#else
#define WEFT_API __declspec(dllimport)
#endif
#else
#define WEFT_API __attribute__((visibility("default")))
#endif
