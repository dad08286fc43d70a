// a * b + c with one rounding per lane, on every instruction set: the exp, the log and every other
// polynomial here rely on single roundings for their error bounds, and every build must compute
// the same bits (API.md v3: the same tokens for SSE2, AVX2+FMA and AVX-512 builds).
//   AVX-512: the intrinsic (xsimd 8.1 writes its AVX-512 fma as x * y + z, fused only where the
//            compiler contracts it: not at -O1).
//   FMA3:    xsimd::fma.
//   others:  lane by lane through the scalar fused multiply-add (slow, but the same bits; a build
//            for a machine without FMA trades speed for the common answer).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <type_traits>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu {

// Whether Arch has AVX-512F (and DQ: fpclass, getexp, getmant, the wide conversions); the
// intrinsics are declared only when the compile flags enable them.
#if XSIMD_WITH_AVX512F
template <class Arch>
inline constexpr bool kAvx512 = std::is_base_of<xsimd::avx512f, Arch>::value;
#else
template <class Arch>
inline constexpr bool kAvx512 = false;
#endif
#if XSIMD_WITH_AVX512DQ
template <class Arch>
inline constexpr bool kAvx512dq = std::is_base_of<xsimd::avx512dq, Arch>::value;
#else
template <class Arch>
inline constexpr bool kAvx512dq = false;
#endif

template <class Arch>
inline constexpr bool kFma3 =
#if XSIMD_WITH_FMA3_AVX2
    std::is_base_of<xsimd::fma3<xsimd::avx2>, Arch>::value ||
#endif
#if XSIMD_WITH_FMA3_AVX
    std::is_base_of<xsimd::fma3<xsimd::avx>, Arch>::value ||
#endif
#if XSIMD_WITH_FMA3_SSE
    std::is_base_of<xsimd::fma3<xsimd::sse4_2>, Arch>::value ||
#endif
    false;

template <class B>
SPECVERIFY_ALWAYS_INLINE B fused(const B& a, const B& b, const B& c) {
  using Arch = typename B::arch_type;
  using T = typename B::value_type;
#if XSIMD_WITH_AVX512F
  if constexpr (kAvx512<Arch>) {
    if constexpr (std::is_same<T, float>::value) {
      return B(_mm512_fmadd_ps(a, b, c));
    } else {
      return B(_mm512_fmadd_pd(a, b, c));
    }
  } else
#endif
  if constexpr (kFma3<Arch>) {
    return xsimd::fma(a, b, c);
  } else {
    constexpr std::size_t W = B::size;
    alignas(64) T x[W], y[W], z[W];
    a.store_aligned(x);
    b.store_aligned(y);
    c.store_aligned(z);
    for (std::size_t l = 0; l < W; ++l) {
      if constexpr (std::is_same<T, float>::value) {
        x[l] = __builtin_fmaf(x[l], y[l], z[l]);
      } else {
        x[l] = __builtin_fma(x[l], y[l], z[l]);
      }
    }
    return B::load_aligned(x);
  }
}

}  // namespace specverify::cpu
