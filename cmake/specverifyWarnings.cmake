# Warnings and flags for this repository's own targets (never imposed on users). C++ sources
# only: a CUDA source in the same target takes specverify_cuda_dev_flags (nvcc has other options).
add_library(specverify_dev_flags INTERFACE)
option(SPECVERIFY_WERROR "Make warnings errors in this repository's own targets" ON)
target_compile_options(specverify_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>)
if(SPECVERIFY_WERROR)
  target_compile_options(specverify_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
option(SPECVERIFY_NATIVE "Compile tests and benchmarks with -march=native (AVX-512 here)" ON)
if(SPECVERIFY_NATIVE)
  target_compile_options(specverify_dev_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
