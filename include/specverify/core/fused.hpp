// a * b + c with one rounding, in float and double, on every backend and build: a compiler left to
// contract a * b + c itself does so on some instruction sets only (and nvcc by default), which
// would make the same inputs give different bits.
#pragma once

#include <type_traits>

#include "specverify/config.hpp"

namespace specverify::core {

template <class T>
SPECVERIFY_HD inline T fused(T a, T b, T c) {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value, "fused takes float or double");
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same<T, float>::value) return __fmaf_rn(a, b, c);
  else return __fma_rn(a, b, c);
#else
  if constexpr (std::is_same<T, float>::value) return __builtin_fmaf(a, b, c);
  else return __builtin_fma(a, b, c);
#endif
}

}  // namespace specverify::core
