# The C ABI test program's sources (tests/capi), for every build that runs
# it: Linux (c_api_tests.cmake), the portable plugin (tests/dist) and
# Windows under wine (tests/windows).
set(WEFT_CAPI_TEST_SOURCES)
foreach(_f c_api_test c_api_test_model c_api_test_executor c_api_test_conversation c_api_test_generation c_api_test_sampler_stages
           c_api_test_state c_api_test_save_async c_api_test_threads c_api_test_adapter c_api_test_adapter_life c_api_test_projector
           c_api_test_embedding c_api_test_embedding_life c_api_test_memory c_api_test_fit c_api_test_speculative c_api_test_draft_model
           c_api_header_c99)
  list(APPEND WEFT_CAPI_TEST_SOURCES ${CMAKE_CURRENT_LIST_DIR}/${_f}.c)
endforeach()
