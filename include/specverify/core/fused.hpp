// a * b + c with one rounding, in float and double, on every backend and build: a compiler left to
// contract a * b + c itself does so on some instruction sets only (and nvcc by default), which
// would make the same inputs give different bits.
#pragma once

#include "specverify/config.hpp"

namespace specverify::core {

SPECVERIFY_HD inline float fused(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

SPECVERIFY_HD inline double fused(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return __builtin_fma(a, b, c);
#endif
}

}  // namespace specverify::core
