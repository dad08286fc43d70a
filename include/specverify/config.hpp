// Build-environment macros shared by every header.
#pragma once

// Decision functions and Philox are compiled for host and device from one source, so the CPU and
// CUDA backends give identical tokens by sharing code rather than by keeping two copies in step.
#if defined(__CUDACC__)
#define SPECVERIFY_HD __host__ __device__
// Before a SPECVERIFY_HD template whose host instantiations call host-only code (the CPU
// backend's rows): nvcc then checks each instantiation only on the side it is used.
#define SPECVERIFY_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define SPECVERIFY_HD
#define SPECVERIFY_HD_TEMPLATE
#endif
