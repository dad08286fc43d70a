// SSE2: float lanes [0, 2) and [2, 4) as doubles, in registers (cpu/row_kernels.hpp's widen_low,
// widen_high).
#pragma once

#include <xsimd/xsimd.hpp>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_SSE2
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_low(const xsimd::batch<float, Arch>& v,
                                                              xsimd::kernel::requires_arch<xsimd::sse2>) {
  return _mm_cvtps_pd(v);
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_high(const xsimd::batch<float, Arch>& v,
                                                               xsimd::kernel::requires_arch<xsimd::sse2>) {
  return _mm_cvtps_pd(_mm_movehl_ps(v, v));
}
#endif

}  // namespace specverify::cpu::kernel
