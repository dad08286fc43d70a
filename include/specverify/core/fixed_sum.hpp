// Sums over the vocabulary that give the same bits in any order (docs/api.md "One answer
// everywhere"): whatever the SIMD width, the thread or block a slice runs on, or how a row is
// split, a row's normaliser, masses, a draw's cumulative weights and its statistics are the same.
//
// Method: fixed point. Every term t is rounded once, to the nearest multiple of 2^-80 (ties to
// even), and those multiples are added exactly, as integers: in two 64-bit words, `hi` counting
// units of 2^-40 and `lo` units of 2^-80. Integer addition is associative, so the sum is a
// function of the multiset of terms alone, and FixedSums of slices merge bit for bit.
//   Per term: s = t 2^40 (exact), h = round(s), r = s - h (exact, |r| <= 1/2), l = round(r 2^40);
//   h 2^40 + l = round(t 2^80), since h 2^40 is an even number of units (ties stay ties to even).
//   The roundings are double additions of kMagic = 1.5 * 2^52 (t + kMagic - kMagic rounds t to an
//   integer for |t| < 2^51): two IEEE roundings per term, identical in scalar, SIMD and CUDA code.
//
// Domain: |t| < 2^10 per term and |sum| <= 2^22 (the hi word holds sums below 2^23); callers
// scale rows outside it, and rows whose largest term lies below 2^-32, by a power of two first
// (fixed_scale). Terms below 2^-81 of that scale count as 0.
// Accuracy: each term moves by at most 2^-81, so n terms by at most n 2^-81: for V = 2^20 a sum
// is within 2^-61 (4.3e-19) absolute of the exact sum of its terms. A draw whose weights total M
// follows them within V 2^-81 / M in total variation: below 1e-6 for M >= 4.4e-13 at V = 2^20.
// value() rounds the exact fixed-point sum to double (at most two roundings, a function of the
// sum alone).
#pragma once

#include <cstdint>

#include "specverify/config.hpp"

namespace specverify::core {

inline constexpr double kFixedMagic = 6755399441055744.0;  // 1.5 * 2^52
inline constexpr double kFixedHalfScale = 1099511627776.0;  // 2^40
inline constexpr double kFixedHalfUnit = 1.0 / kFixedHalfScale;
inline constexpr std::int64_t kFixedLoMask = (std::int64_t{1} << 40) - 1;

/// round(s) for |s| < 2^51, ties to even, in double arithmetic (s + 1.5 * 2^52 has unit spacing).
/// No compiler reassociates (s + M) - M without -ffast-math, and contracting a product into the
/// addition changes nothing here: every product added to kMagic is exact.
SPECVERIFY_HD inline double round_magic(double s) { return (s + kFixedMagic) - kFixedMagic; }

/// The bits of x as an integer.
SPECVERIFY_HD inline std::int64_t double_bits(double x) {
#if defined(__CUDA_ARCH__)
  return __double_as_longlong(x);
#else
  std::int64_t bits;
  __builtin_memcpy(&bits, &x, sizeof bits);
  return bits;
#endif
}

/// The double whose bits are `bits`.
SPECVERIFY_HD inline double bits_double(std::int64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(bits);
#else
  double x;
  __builtin_memcpy(&x, &bits, sizeof x);
  return x;
#endif
}

/// round(s) as an integer for |s| < 2^51: s + 1.5 * 2^52 holds it in its low mantissa bits, so it
/// is a subtraction of bit patterns (cpu/fixed_lanes.hpp does the same lane by lane), no
/// conversion instruction.
SPECVERIFY_HD inline std::int64_t round_magic_int(double s) {
  return double_bits(s + kFixedMagic) - double_bits(kFixedMagic);
}

/// Terms at or above this (after scaling) are outside the domain.
inline constexpr double kFixedMaxTerm = 1024.0;  // 2^10
inline constexpr double kFixedMaxSum = 4194304.0;  // 2^22

/// a + b modulo 2^64: a sum of garbage terms (an invalid row, which its caller refuses anyway)
/// wraps instead of overflowing; within the domain no sum comes near the range.
SPECVERIFY_HD inline std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}

struct FixedSum {
  std::int64_t hi = 0;  // units of 2^-40
  std::int64_t lo = 0;  // units of 2^-80

  /// round(t 2^80) 2^-80 as units, lo not carried (|lo| <= 2^39): what add(t) adds. A term
  /// outside the domain (NaN, infinite, too large: a row its caller refuses) is 0, as its
  /// conversion to an integer would be undefined. Selected, not branched on: a GPU thread then
  /// converts several terms at once instead of waiting out each one's chain of double operations
  /// (Nsight Compute on an H200: the branch kept a draw's chunk sums at one term per latency).
  SPECVERIFY_HD static FixedSum term(double t) {
    const double s = in_domain(t) ? t * kFixedHalfScale : 0.0;
    const double h = round_magic(s);
    FixedSum u;
    u.hi = round_magic_int(s);
    u.lo = round_magic_int((s - h) * kFixedHalfScale);
    return u;
  }

  /// round(t 2^40) 2^-40 as units: what add_coarse(t) adds.
  SPECVERIFY_HD static FixedSum coarse_term(double t) {
    FixedSum u;
    u.hi = round_magic_int(in_domain(t) ? t * kFixedHalfScale : 0.0);
    return u;
  }

  SPECVERIFY_HD static bool in_domain(double t) { return t < kFixedMaxTerm && t > -kFixedMaxTerm; }

  /// Adds round(t 2^80) 2^-80.
  SPECVERIFY_HD void add(double t) { merge(term(t)); }

  /// Adds round(t 2^40) 2^-40: the coarse grid alone, for sums known to be at least 1 (a logits
  /// row's normaliser and kept masses: every weight is at most 1 and the max weighs exactly 1),
  /// where n terms' roundings, n 2^-41, are far below float precision. The same in any order.
  SPECVERIFY_HD void add_coarse(double t) { hi = wrapping_add(hi, coarse_term(t).hi); }

  /// Adds t `times` times: the same words as that many add(t) (add_coarse(t) with `coarse`).
  SPECVERIFY_HD void add_repeated(double t, std::int64_t times, bool coarse = false) {
    FixedSum one;
    if (coarse) {
      one.add_coarse(t);
    } else {
      one.add(t);
    }
    const auto times_u = static_cast<std::uint64_t>(times);
    add_units(static_cast<std::int64_t>(static_cast<std::uint64_t>(one.hi) * times_u),
              static_cast<std::int64_t>(static_cast<std::uint64_t>(one.lo) * times_u));
  }

  /// Adds `units` multiples of 2^-40 and 2^-80 (a SIMD lane's or a block's partial sum).
  SPECVERIFY_HD void add_units(std::int64_t hi_units, std::int64_t lo_units) {
    hi = wrapping_add(hi, hi_units);
    lo = wrapping_add(lo, lo_units);
    carry();
  }

  SPECVERIFY_HD void merge(const FixedSum& other) {
    add_units(other.hi, other.lo);
  }

  /// Takes back `part`, a sum of some of the terms merged here: the words are those of the sum
  /// of the other terms alone, as integers subtract exactly.
  SPECVERIFY_HD void remove(const FixedSum& part) {
    add_units(static_cast<std::int64_t>(std::uint64_t{0} - static_cast<std::uint64_t>(part.hi)),
              static_cast<std::int64_t>(std::uint64_t{0} - static_cast<std::uint64_t>(part.lo)));
  }

  /// The canonical form: lo in [0, 2^40), so equal sums have equal words.
  SPECVERIFY_HD void carry() {
    hi = wrapping_add(hi, lo >> 40);  // arithmetic shift: floor division by 2^40
    lo &= kFixedLoMask;
  }

  /// Whether the words are in canonical form (every sum carry() leaves is).
  SPECVERIFY_HD bool canonical() const { return lo >= 0 && lo <= kFixedLoMask; }

  SPECVERIFY_HD bool positive() const { return hi > 0 || (hi == 0 && lo > 0); }

  SPECVERIFY_HD double value() const {
    return static_cast<double>(hi) * kFixedHalfUnit + static_cast<double>(lo) * (kFixedHalfUnit * kFixedHalfUnit);
  }

  SPECVERIFY_HD friend bool operator==(const FixedSum& a, const FixedSum& b) { return a.hi == b.hi && a.lo == b.lo; }
};

/// Below this (2^-32), a row's largest term is scaled up before summing: a row of tiny weights
/// (an unnormalised row, all of it far below 1) keeps its relative precision and its mass.
inline constexpr double kFixedMinTerm = 2.3283064365386963e-10;

/// Whether n terms of magnitude at most max_term fit the domain at scale 1 (no overflow).
SPECVERIFY_HD inline bool fixed_fits(double max_term, std::int64_t n) {
  return max_term < kFixedMaxTerm && max_term * static_cast<double>(n) < kFixedMaxSum;
}

/// Whether a row of weights whose largest is max_term is summed at scale 1: it fits, and it is not
/// so small that the grid would hold it coarsely (a row of zeros is summed as it is). The draws and
/// masses use this; statistics whose slices must merge at one scale (entropy, divergences) only
/// ask fixed_fits.
SPECVERIFY_HD inline bool fixed_in_domain(double max_term, std::int64_t n) {
  return fixed_fits(max_term, n) && (max_term >= kFixedMinTerm || max_term == 0.0);
}

/// The power of two above a valid probability or weight x (its binade's top; 2^-126 for 0 and
/// subnormals): from x's bits alone, so every worker that has seen the row's max agrees.
SPECVERIFY_HD inline double fixed_bound(float x) {
  std::uint32_t bits;
#if defined(__CUDA_ARCH__)
  bits = static_cast<std::uint32_t>(__float_as_int(x));
#else
  __builtin_memcpy(&bits, &x, sizeof bits);
#endif
  const int exponent = static_cast<int>(bits >> 23) - 126;  // x < 2^exponent
  double b = 1.0;
  for (int e = 0; e < exponent; ++e) b *= 2.0;
  for (int e = 0; e > exponent; --e) b *= 0.5;
  return b;
}

/// The power of two by which terms bounded by `max_term` (> 0), n of them, are scaled: so that
/// each stays below 2^10 and their sum below 2^22, and a row whose max lies below 2^-32 is
/// scaled up to a max near 1. A function of max_term's binade and n alone, so every worker that
/// knows the row's max picks the same scale (1 whenever fixed_in_domain holds).
SPECVERIFY_HD inline double fixed_scale(double max_term, std::int64_t n) {
  if (fixed_in_domain(max_term, n)) return 1.0;
  int log_n = 0;
  while ((std::int64_t{1} << log_n) < n && log_n < 62) ++log_n;
  int e = 0;  // max_term < 2^e, max_term >= 2^(e-1)
  double bound = 1.0;
  while (bound <= max_term && e < 1100) {
    bound *= 2.0;
    ++e;
  }
  while (bound * 0.5 > max_term && e > -1100) {
    bound *= 0.5;
    --e;
  }
  int k = max_term >= kFixedMinTerm ? e - 10 : e;  // down to below 2^10, or up to below 1
  if (e + log_n - 22 > k) k = e + log_n - 22;
  double scale = 1.0;
  for (; k > 0; --k) scale *= 0.5;
  for (; k < 0; ++k) scale *= 2.0;
  return scale;
}

}  // namespace specverify::core
