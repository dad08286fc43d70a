# Warnings and flags for this repository's own targets (never imposed on users).
add_library(specverify_dev_flags INTERFACE)
target_compile_options(specverify_dev_flags INTERFACE -Wall -Wextra -Wpedantic -Werror)
option(SPECVERIFY_NATIVE "Compile tests and benchmarks with -march=native (AVX-512 here)" ON)
if(SPECVERIFY_NATIVE)
  target_compile_options(specverify_dev_flags INTERFACE -march=native)
endif()
