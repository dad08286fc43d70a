// The C API's entry points as compiled for one instruction set. The C libraries hold one table per
// instruction set they were built for (specverify_c.cpp compiled once for each, its copy of the
// library's code kept private to it: src/CMakeLists.txt), and dispatch.cpp calls the one it picks.
#pragma once

#include "specverify/specverify.h"

extern "C" {

struct specverify_entry_points {
  const char* isa;  // what the table's kernels were compiled for: "sse2", "avx2", "avx512" or "generic"
  int (*verify_chains)(const sv_rule*, const sv_chain_batch*, const sv_randomness*, const sv_chain_output*, int,
                       sv_error*);
  int (*verify_trees)(const sv_rule*, const sv_tree_batch*, const sv_randomness*, const sv_tree_output*, int,
                      sv_error*);
  int (*sample)(const float*, int32_t, const sv_sampling_params*, uint64_t, int64_t, const int32_t*, const int32_t*,
                int32_t, const int32_t*, const float*, int32_t, int32_t*, sv_error*);
};

}  // extern "C"

/// The table's getter in each copy: specverify_isa_<set>_entry_points, <set> the name CMake gave
/// the copy ("build" for the one compiled with the build's own flags).
#define SPECVERIFY_C_ENTRY_POINTS_NAME(set) SPECVERIFY_C_ENTRY_POINTS_PASTE(set)
#define SPECVERIFY_C_ENTRY_POINTS_PASTE(set) specverify_isa_##set##_entry_points
