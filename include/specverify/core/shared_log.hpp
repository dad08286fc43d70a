// The shared log: log x in double as one fixed sequence of IEEE operations, so every C library,
// build and backend gets the same bits. Coupled sampling needs it: a Gumbel race (the key
// log p + G with G = -log(-log u)) is decided by whichever key is larger, and libm's log differs
// between C libraries, and from CUDA's, in the last bit; a race that one bit decides would give
// different tokens.
//
// Method (the classic reduction of Sun's fdlibm, with its published minimax coefficients Lg1..Lg7;
// every multiply-add written as core::fused so no compiler contracts one on its own):
//   x = 2^k m, m in [sqrt(1/2), sqrt(2))   from x's bits (exact)
//   f = m - 1 (exact), s = f / (2 + f)     log m = log(1 + s) - log(1 - s) = 2s + 2s^3/3 + ...
//   log m = f - (f^2/2 - s (f^2/2 + R))    R = s^2 P(s^2), P of degree 6
//   log x = k ln2_hi + (log m + k ln2_lo)  ln 2 in two parts, k ln2_hi exact
// Accuracy, measured against long double over a dense sweep of positive normal doubles (the
// sweep tests/test_logit_rows.cpp runs, SharedLog.*): at most kLogMaxUlp units in the last place.
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/core/fixed_sum.hpp"
#include "specverify/core/fused.hpp"

namespace specverify::core {

inline constexpr double kLogMaxUlp = 0.77;  // measured: 0.763 ulp, at x = 2.69291 (-log of a uniform)

/// log x for a positive normal double x (every caller's argument is one: a float probability, a
/// uniform in (0, 1), or -log of it), as the fixed operations above.
SPECVERIFY_HD inline double shared_log(double x) {
  constexpr double kLn2Hi = 0x1.62e42feep-1;  // 32 significant bits: k ln2_hi is exact
  constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
  constexpr double kLg1 = 0x1.5555555555593p-1, kLg2 = 0x1.999999997fa04p-2, kLg3 = 0x1.2492494229359p-2,
                   kLg4 = 0x1.c71c51d8e78afp-3, kLg5 = 0x1.7466496cb03dep-3, kLg6 = 0x1.39a09d078c69fp-3,
                   kLg7 = 0x1.2f112df3e5244p-3;
  constexpr std::int64_t kFraction = (std::int64_t{1} << 52) - 1;
  constexpr std::int64_t kSqrt2Fraction = 0x6a09e667f3bcdll;  // the fraction of sqrt(2), rounded up
  const std::int64_t bits = double_bits(x);  // x > 0: the sign bit is clear
  const std::int64_t fraction = bits & kFraction;
  // m = 1.fraction, halved (exponent field 1022) where it reaches sqrt(2).
  const bool halve = fraction >= kSqrt2Fraction;
  const int k = static_cast<int>(bits >> 52) - 1023 + (halve ? 1 : 0);
  const double m = bits_double(fraction | (std::int64_t{halve ? 1022 : 1023} << 52));
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double z = s * s;
  double poly = kLg7;
  poly = fused(poly, z, kLg6);
  poly = fused(poly, z, kLg5);
  poly = fused(poly, z, kLg4);
  poly = fused(poly, z, kLg3);
  poly = fused(poly, z, kLg2);
  poly = fused(poly, z, kLg1);
  const double kd = static_cast<double>(k);
  const double h = 0.5 * f;
  const double t = fused(z, poly, h * f);        // f^2/2 + R
  const double a = fused(s, t, kd * kLn2Lo);     // s (f^2/2 + R) + k ln2_lo
  const double b = fused(h, f, -a);              // f^2/2 - a
  return fused(kd, kLn2Hi, f - b);
}

}  // namespace specverify::core
