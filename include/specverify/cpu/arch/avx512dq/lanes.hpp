// AVX-512DQ: cpu/lanes.hpp's classifications of float lanes, one fpclass instruction each.
#pragma once

#include <xsimd/xsimd.hpp>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_AVX512DQ
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<float, Arch> nan_or_inf(const xsimd::batch<float, Arch>& x,
                                                                   xsimd::kernel::requires_arch<xsimd::avx512dq>) {
  return xsimd::batch_bool<float, Arch>(_mm512_fpclass_ps_mask(x, 0x89));  // QNaN, +inf, SNaN
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<float, Arch> not_zero_or_normal(const xsimd::batch<float, Arch>& x,
                                                                           xsimd::kernel::requires_arch<xsimd::avx512dq>) {
  return xsimd::batch_bool<float, Arch>(_mm512_fpclass_ps_mask(x, 0xf9));  // NaN, +-inf, subnormal, negative
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<float, Arch> not_normal(const xsimd::batch<float, Arch>& x,
                                                                   xsimd::kernel::requires_arch<xsimd::avx512dq>) {
  return xsimd::batch_bool<float, Arch>(_mm512_fpclass_ps_mask(x, 0xff));
}
#endif

}  // namespace specverify::cpu::kernel
