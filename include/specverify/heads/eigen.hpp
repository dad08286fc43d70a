// Eigen, included once for every head header.
//
// g++ 12.2 with AVX-512 (-march=native here) reports -W(maybe-)uninitialized inside its own
// avx512fintrin.h (the `__m512 __Y = __Y;` idiom of _mm512_undefined_ps, GCC bug 105593) wherever
// Eigen's GEMM and packet math are inlined. The warning is a compiler false positive, so it is
// silenced for Eigen's code only; our own code stays under the caller's warning flags. (If Eigen
// was already included before this header, the guard has no effect and the caller's flags apply.)
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Dense>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
