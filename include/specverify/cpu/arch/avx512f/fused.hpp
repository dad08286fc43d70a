// AVX-512: cpu/fused.hpp's one-rounding multiply-add as the intrinsic (xsimd 8.1 writes its AVX-512
// fma as x * y + z, fused only where the compiler contracts it: not at -O1).
#pragma once

#include <xsimd/xsimd.hpp>

#include <type_traits>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_AVX512F
template <class B>
SPECVERIFY_ALWAYS_INLINE B fused(const B& a, const B& b, const B& c, xsimd::kernel::requires_arch<xsimd::avx512f>) {
  if constexpr (std::is_same<typename B::value_type, float>::value) {
    return B(_mm512_fmadd_ps(a, b, c));
  } else {
    return B(_mm512_fmadd_pd(a, b, c));
  }
}
#endif

}  // namespace specverify::cpu::kernel
