# Install rules: headers, the library, a CMake package (find_package(weft))
# and a pkg-config file.

include(CMakePackageConfigHelpers)

install(DIRECTORY include/weft DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/weft/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/weft)
install(TARGETS weft weft_modelgen weft_warnings EXPORT weftTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET weft-cli)
  install(TARGETS weft-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT weftTargets NAMESPACE weft:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)

# A static libweft needs llama.cpp (and fmt) at link time: the package
# config finds the same llama.cpp install weft was built against.
get_filename_component(_weft_llama_dir "${llama_DIR}" ABSOLUTE)
configure_package_config_file(cmake/weftConfig.cmake.in
  ${PROJECT_BINARY_DIR}/weftConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/weftConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/weftConfig.cmake ${PROJECT_BINARY_DIR}/weftConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)

configure_file(cmake/weft.pc.in ${PROJECT_BINARY_DIR}/weft.pc @ONLY)
configure_file(cmake/weft-modelgen.pc.in ${PROJECT_BINARY_DIR}/weft-modelgen.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/weft.pc ${PROJECT_BINARY_DIR}/weft-modelgen.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
