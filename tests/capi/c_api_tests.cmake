# The C ABI's tests (included from tests/CMakeLists.txt): the C program
# against libweft.so, the header as strict C99, the export check, and the
# C# binding under Mono (bindings/csharp).

find_package(Threads REQUIRED)
add_executable(c_api_test capi/c_api_test.c capi/c_api_header_c99.c)
# Only weft.h: the C program sees none of the C++ headers.
target_include_directories(c_api_test PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(c_api_test PRIVATE weft_shared Threads::Threads m)
set_target_properties(c_api_test PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(c_api_test PRIVATE -Wall -Wextra -Werror -pedantic -Wstrict-prototypes -Wmissing-prototypes)
# libweft.so leaves the sanitizer runtimes to the executable.
if(WEFT_SANITIZE_FLAGS)
  target_link_options(c_api_test PRIVATE ${WEFT_SANITIZE_FLAGS})
elseif(WEFT_SANITIZE)
  target_link_options(c_api_test PRIVATE -fsanitize=address,undefined)
endif()
add_test(NAME c_api COMMAND c_api_test ${WEFT_TEST_MODELS}/tiny.gguf)
set_tests_properties(c_api PROPERTIES FIXTURES_REQUIRED models TIMEOUT 300)

# libweft.so exports exactly the functions weft.h declares and needs no
# C++ runtime, llama.cpp or fmt beside it.
add_test(NAME c_api_exports
  COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:weft_shared> -DHEADER=${PROJECT_SOURCE_DIR}/include/weft/weft.h
          -DSANITIZE=${WEFT_SANITIZE} -P ${CMAKE_CURRENT_SOURCE_DIR}/capi/c_api_exports.cmake)

add_subdirectory(${PROJECT_SOURCE_DIR}/bindings/csharp ${PROJECT_BINARY_DIR}/bindings/csharp)
