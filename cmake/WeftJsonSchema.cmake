# JSON Schema -> GBNF inside libweft (include/weft/json_schema.hpp): llama.cpp's
# own converter, common/json-schema-to-grammar.cpp and common/json.cpp from the
# cached source tree (WEFT_LLAMA_SRC), compiled here on their own — not
# llama.cpp's `common` library — as the object library weft_jsg, whose objects
# go inside libweft.a (and libweft.so) like mtmd's. Included from
# src/CMakeLists.txt.
#
# Every global name the two files define or take from common.cpp is renamed
# weft_jsg_* (WEFT_JSG_RENAMES), so a program that links libweft.a and
# llama.cpp's own libcommon sees no duplicate symbol; ggml_abort is renamed
# too (src/core/jsg/jsg_bridge.cpp defines it), so a broken invariant in json.cpp
# throws instead of aborting. Without the source tree WEFT_JSG_ENABLED stays
# OFF and weft::json_schema_to_grammar throws Errc::invalid_argument.

set(WEFT_JSG_ENABLED OFF)
set(_jsg_dir "${WEFT_LLAMA_SRC}/common")
if(WEFT_LLAMA_SRC AND EXISTS "${_jsg_dir}/json-schema-to-grammar.cpp" AND EXISTS "${_jsg_dir}/json.cpp"
   AND EXISTS "${WEFT_LLAMA_SRC}/vendor/nlohmann/json.hpp")
  set(_jsg_upstream "${_jsg_dir}/json-schema-to-grammar.cpp" "${_jsg_dir}/json.cpp")
  add_library(weft_jsg OBJECT ${_jsg_upstream} core/jsg/jsg_bridge.cpp core/jsg/schema_check.cpp
    core/jsg/tool_calls.cpp)
  set_target_properties(weft_jsg PROPERTIES UNITY_BUILD OFF)  # the renames below must not reach other units
  set_source_files_properties(${_jsg_upstream} PROPERTIES COMPILE_OPTIONS "-w")
  target_compile_features(weft_jsg PRIVATE cxx_std_20)
  target_include_directories(weft_jsg PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include)
  target_include_directories(weft_jsg SYSTEM PRIVATE "${_jsg_dir}" "${WEFT_LLAMA_SRC}/include"
    "${WEFT_LLAMA_SRC}/ggml/include" "${WEFT_LLAMA_SRC}/vendor")
  set(_jsg_renames ggml_abort string_join string_split string_repeat json_schema_to_grammar build_grammar
    gbnf_format_literal common_json common_json_value common_json_item common_json_error common_json_is_value
    common_json_entry common_schema_info common_schema_converter common_grammar_builder common_grammar_options)
  foreach(_n IN LISTS _jsg_renames)
    target_compile_definitions(weft_jsg PRIVATE ${_n}=weft_jsg_${_n})
  endforeach()
  target_compile_definitions(weft_jsg PRIVATE WEFT_BUILDING)
  target_link_libraries(weft_jsg PRIVATE fmt::fmt weft_warnings)
  set(WEFT_JSG_ENABLED ON)
  message(STATUS "weft: JSON Schema -> grammar from ${_jsg_dir}, inside libweft")
else()
  message(STATUS "weft: no llama.cpp source tree; weft::json_schema_to_grammar refuses every schema")
endif()
