# Installed package: headers, exported targets under specverify::, config and version files.
include(CMakePackageConfigHelpers)

install(TARGETS specverify EXPORT specverifyTargets)
install(DIRECTORY include/specverify DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(SPECVERIFY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/specverify)
install(EXPORT specverifyTargets NAMESPACE specverify:: DESTINATION ${SPECVERIFY_CMAKE_DIR})

configure_package_config_file(cmake/specverifyConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/specverifyConfig.cmake
  INSTALL_DESTINATION ${SPECVERIFY_CMAKE_DIR})
# Header-only: the version file must not pin the consumer's pointer size.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/specverifyConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES cmake/specverifyDependencies.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/specverifyConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/specverifyConfigVersion.cmake
        DESTINATION ${SPECVERIFY_CMAKE_DIR})
