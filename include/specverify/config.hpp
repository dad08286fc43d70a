// Build-environment macros shared by every header.
#pragma once

// Decision functions and Philox are compiled for host and device from one source, so the CPU and
// CUDA backends give identical tokens by sharing code rather than by keeping two copies in step.
#if defined(__CUDACC__)
#define SPECVERIFY_HD __host__ __device__
#else
#define SPECVERIFY_HD
#endif
