// FMA3 (with SSE4.2, AVX or AVX2): cpu/fused.hpp's one-rounding multiply-add is xsimd::fma.
#pragma once

#include <xsimd/xsimd.hpp>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_FMA3_SSE
template <class B>
SPECVERIFY_ALWAYS_INLINE B fused(const B& a, const B& b, const B& c, xsimd::kernel::requires_arch<xsimd::fma3<xsimd::sse4_2>>) {
  return xsimd::fma(a, b, c);
}
#endif
#if XSIMD_WITH_FMA3_AVX
template <class B>
SPECVERIFY_ALWAYS_INLINE B fused(const B& a, const B& b, const B& c, xsimd::kernel::requires_arch<xsimd::fma3<xsimd::avx>>) {
  return xsimd::fma(a, b, c);
}
#endif
#if XSIMD_WITH_FMA3_AVX2
template <class B>
SPECVERIFY_ALWAYS_INLINE B fused(const B& a, const B& b, const B& c, xsimd::kernel::requires_arch<xsimd::fma3<xsimd::avx2>>) {
  return xsimd::fma(a, b, c);
}
#endif

}  // namespace specverify::cpu::kernel
