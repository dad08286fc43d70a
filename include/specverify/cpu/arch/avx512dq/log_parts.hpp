// AVX-512DQ: cpu/fast_log.hpp's exponent and fraction, read in one instruction each, subnormals
// included (getexp(0) = -inf, getmant(0) = 1): the same k and f as the generic bit manipulation.
#pragma once

#include <xsimd/xsimd.hpp>

#include "specverify/cpu/fused.hpp"
#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_AVX512DQ
template <class Arch>
SPECVERIFY_ALWAYS_INLINE void log_parts(const xsimd::batch<float, Arch>& x, xsimd::batch<float, Arch>& k,
                                        xsimd::batch<float, Arch>& f, xsimd::kernel::requires_arch<xsimd::avx512dq>) {
  using B = xsimd::batch<float, Arch>;
  const __m512 v = x;
  const B e(_mm512_getexp_ps(v));
  const B m(_mm512_getmant_ps(v, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero));  // [1, 2)
  const auto halve = m >= B(1.41421354f);  // 2 x the float of bits 0x3f3504f3
  f = xsimd::select(halve, cpu::fused(m, B(0.5f), B(-1.0f)), m - B(1.0f));  // exact
  k = xsimd::select(halve, e + B(1.0f), e);
}
#endif

}  // namespace specverify::cpu::kernel
