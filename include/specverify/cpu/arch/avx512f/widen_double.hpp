// AVX-512: float lanes [0, 8) and [8, 16) as doubles, in registers (cpu/row_kernels.hpp's
// widen_low, widen_high).
#pragma once

#include <xsimd/xsimd.hpp>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_AVX512F
// g++ 12 reports the _mm*_undefined_* operand inside the AVX-512 cast and extract intrinsics as
// uninitialised (a false positive); silenced here alone so -Werror users stay clean.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_low(const xsimd::batch<float, Arch>& v,
                                                              xsimd::kernel::requires_arch<xsimd::avx512f>) {
  return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_high(const xsimd::batch<float, Arch>& v,
                                                               xsimd::kernel::requires_arch<xsimd::avx512f>) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace specverify::cpu::kernel
