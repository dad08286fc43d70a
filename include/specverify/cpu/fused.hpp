// a * b + c with one rounding per lane, on every instruction set: the exp, the log and every other
// polynomial here rely on single roundings for their error bounds, and every build must compute
// the same bits (docs/api.md "One answer everywhere": the same tokens for SSE2, AVX2+FMA and AVX-512 builds).
//   generic: lane by lane through the scalar fused multiply-add (slow, but the same bits; a build
//            for a machine without FMA trades speed for the common answer), here;
//   FMA3:    xsimd::fma (cpu/arch/fma3/fused.hpp);
//   AVX-512: the intrinsic (cpu/arch/avx512f/fused.hpp).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <type_traits>

#include "specverify/cpu/arch/avx512f/fused.hpp"
#include "specverify/cpu/arch/fma3/fused.hpp"
#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu {

namespace kernel {

template <class B>
SPECVERIFY_ALWAYS_INLINE B fused(const B& a, const B& b, const B& c, xsimd::kernel::requires_arch<xsimd::generic>) {
  using T = typename B::value_type;
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

}  // namespace kernel

template <class B>
SPECVERIFY_ALWAYS_INLINE B fused(const B& a, const B& b, const B& c) {
  return kernel::fused(a, b, c, typename B::arch_type{});
}

}  // namespace specverify::cpu
