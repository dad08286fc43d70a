# Installed package: headers, one export file per layer under specverify::, config and version
# files. The config loads a layer's file only when that layer is asked for (find_package
# COMPONENTS), so specverify::core needs neither xsimd nor Eigen on the consumer's machine.
include(CMakePackageConfigHelpers)

set(SPECVERIFY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/specverify)
foreach(layer IN ITEMS Core Cpu Heads)
  string(TOLOWER ${layer} target_suffix)
  install(TARGETS specverify_${target_suffix} EXPORT specverify${layer}Targets)
  install(EXPORT specverify${layer}Targets NAMESPACE specverify:: DESTINATION ${SPECVERIFY_CMAKE_DIR})
endforeach()
if(TARGET specverify_mpi)
  install(TARGETS specverify_mpi EXPORT specverifyMpiTargets)
  install(EXPORT specverifyMpiTargets NAMESPACE specverify:: DESTINATION ${SPECVERIFY_CMAKE_DIR})
endif()
install(TARGETS specverify EXPORT specverifyTargets)
install(EXPORT specverifyTargets NAMESPACE specverify:: DESTINATION ${SPECVERIFY_CMAKE_DIR})
install(DIRECTORY include/specverify DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

configure_package_config_file(cmake/specverifyConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/specverifyConfig.cmake
  INSTALL_DESTINATION ${SPECVERIFY_CMAKE_DIR})
# Header-only: the version file must not pin the consumer's pointer size.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/specverifyConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES cmake/specverifyCpuDependencies.cmake
              cmake/specverifyHeadsDependencies.cmake
              cmake/specverifyMpiDependencies.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/specverifyConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/specverifyConfigVersion.cmake
        DESTINATION ${SPECVERIFY_CMAKE_DIR})
