// AVX: float lanes [0, 4) and [4, 8) as doubles, in registers (cpu/row_kernels.hpp's widen_low,
// widen_high).
#pragma once

#include <xsimd/xsimd.hpp>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_AVX
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_low(const xsimd::batch<float, Arch>& v,
                                                              xsimd::kernel::requires_arch<xsimd::avx>) {
  return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_high(const xsimd::batch<float, Arch>& v,
                                                               xsimd::kernel::requires_arch<xsimd::avx>) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
#endif

}  // namespace specverify::cpu::kernel
