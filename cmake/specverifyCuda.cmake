# The CUDA backend (specverify::cuda), when a CUDA compiler is found. It is exported in its own
# file, specverifyCudaTargets.cmake, which the package config loads only where CUDAToolkit is
# found, so the package keeps working for users without CUDA.
option(SPECVERIFY_CUDA "Build the CUDA backend, its tests and benchmark where nvcc is found" ON)
if(NOT SPECVERIFY_CUDA)
  message(STATUS "specverify: SPECVERIFY_CUDA is OFF, the CUDA backend is not built")
  return()
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "specverify: no CUDA compiler, the CUDA backend is not built")
  return()
endif()
# The GPU at hand's architecture (nvidia-smi's compute capability); where there is none the tests
# only compile, and PTX alone (80-virtual: every device function through the front end and NVVM)
# skips ptxas, which is most of the time the CUDA tests take to build. Set CMAKE_CUDA_ARCHITECTURES
# to choose (e.g. 90 for an H100).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader
                  OUTPUT_VARIABLE specverify_gpu_cc RESULT_VARIABLE specverify_smi ERROR_QUIET)
  if(specverify_smi EQUAL 0 AND specverify_gpu_cc MATCHES "^([0-9]+)\\.([0-9]+)")
    set(specverify_arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
  else()
    set(specverify_arch 80-virtual)
    set(specverify_no_gpu ON)
  endif()
  set(CMAKE_CUDA_ARCHITECTURES ${specverify_arch} CACHE STRING "CUDA architectures for tests and benchmarks")
  message(STATUS "specverify: CUDA architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

add_library(specverify_cuda INTERFACE)
add_library(specverify::cuda ALIAS specverify_cuda)
target_include_directories(specverify_cuda INTERFACE
  $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/cuda/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(specverify_cuda INTERFACE cuda_std_17)
target_link_libraries(specverify_cuda INTERFACE specverify::specverify CUDA::cudart)
set_target_properties(specverify_cuda PROPERTIES EXPORT_NAME cuda)

install(TARGETS specverify_cuda EXPORT specverifyCudaTargets)
install(DIRECTORY cuda/include/specverify DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT specverifyCudaTargets NAMESPACE specverify:: DESTINATION ${SPECVERIFY_CMAKE_DIR})

# NVVM's default -O3 took test_cuda_logits 26 minutes on a 2-core machine (98 s at -O1), and ptxas
# then ran over 55 minutes on that -O3 PTX for sm_90, longer than the README's test command and
# than tools/gpu_check.sh's whole budget. The tests check bits, which the contract makes the same at
# every optimisation level (they compare with the CPU's), so their device code is optimised at -O1
# (all three CUDA test binaries built so pass on an H200). The benchmark measures speed: its device
# code is optimised fully, except where no GPU was found and it only compiles.
option(SPECVERIFY_CUDA_TESTS_O1 "Optimise the CUDA tests' device code at -O1 (NVVM's -O3 takes tens of minutes)" ON)
option(SPECVERIFY_CUDA_COMPILE_ONLY "No GPU: the CUDA sources only compile, so their host and device code at -O0"
       ${specverify_no_gpu})
# Where the CUDA sources only compile, nothing of them runs but the host halves of the bad-input
# cases, so neither half is optimised: host and NVVM at -O0 (NVVM still compiles every device
# function to PTX). In this directory's scope only, so a project that adds ours as a subdirectory
# keeps its own flags.
if(SPECVERIFY_CUDA_COMPILE_ONLY)
  string(REPLACE "-O3" "-O0" CMAKE_CUDA_FLAGS_RELEASE "${CMAKE_CUDA_FLAGS_RELEASE}")
endif()
# Host warnings for this repository's CUDA sources (nvcc forwards them to the host compiler).
add_library(specverify_cuda_dev_flags INTERFACE)
target_compile_options(specverify_cuda_dev_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${SPECVERIFY_CUDA_COMPILE_ONLY}>>:-Xcicc=-O0>)
add_library(specverify_cuda_test_flags INTERFACE)
target_compile_options(specverify_cuda_test_flags INTERFACE
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${SPECVERIFY_CUDA_TESTS_O1}>,$<NOT:$<BOOL:${SPECVERIFY_CUDA_COMPILE_ONLY}>>>:-Xcicc=-O1>)
