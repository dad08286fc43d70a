// A vectorised natural log for the row statistics: about 25 instructions a vector instead of
// xsimd::log's generic path, and a split form log x = k ln 2 + r that lets a caller take the
// difference of two logs without rounding the large k ln 2 parts first.
//
// Method: x = 2^k m with m in [sqrt(1/2), sqrt(2)) by bit manipulation (exact), f = m - 1 (exact,
// Sterbenz), log(1 + f) = f - f^2/2 + f^3 P(f) with Cephes' degree-8 minimax P for logf.
// Subnormal x is handled exactly (through its integer bit pattern): same accuracy as a normal x.
//
// Error against the exact log, measured over every positive finite float (normal and subnormal)
// once, and re-checked over a dense sweep by tests/test_divergence_kernels.cpp (FastLog.*):
//   log_split: k and f exact, |f + y - log m| <= kLogSplitAbsError = 1.04e-8 (y's roundings).
//   fast_log:  |fast_log(x) - log x| <= kLogRelError * |log x| with kLogRelError = 8.4e-8, and
//              also <= 2^-24 |log x| + kLogAbsError (the final rounding, plus 2.45e-8).
// Subnormals are not flushed: log(1e-40) is as accurate as any other.
// Special values: fast_log(0) = -inf, fast_log(+inf) = +inf, fast_log(x < 0 or NaN) = NaN.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cfloat>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "specverify/cpu/arch/avx512dq/log_parts.hpp"
#include "specverify/cpu/fused.hpp"
#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu {

inline constexpr double kLogSplitAbsError = 1.04e-8;
inline constexpr double kLogAbsError = 2.45e-8;
inline constexpr double kLogRelError = 8.4e-8;
inline constexpr float kLn2 = 0.693147180559945309f;
inline constexpr float kLn2Hi = 0.693359375f;  // 9 significant bits
inline constexpr float kLn2Lo = -2.12194440e-4f;

/// log x = k ln 2 + f + y: k an integer (held as float; -inf for x == 0), f = m - 1 exact, y the
/// small rest of log(1 + f). Keeping f and y apart lets a difference of two logs subtract the exact
/// parts exactly. Other x (negative, inf, NaN) give finite garbage: callers validate separately.
template <class Arch>
struct LogSplit {
  xsimd::batch<float, Arch> k, f, y;
};

// g++ 12 reports the _mm512_undefined_* operand inside the AVX-512 shift and int-to-float
// intrinsics as uninitialised (a false positive); there is no select-style rewrite for those two.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace detail {

/// y = log(1 + f) - f for f = m - 1, m in [sqrt(1/2), sqrt(2)): -f^2/2 + f^3 P(f).
template <class B>
SPECVERIFY_ALWAYS_INLINE B log1p_rest(const B& f) {
  const B z = f * f;
  B poly(7.0376836292e-2f);
  poly = fused(poly, f, B(-1.1514610310e-1f));
  poly = fused(poly, f, B(1.1676998740e-1f));
  poly = fused(poly, f, B(-1.2420140846e-1f));
  poly = fused(poly, f, B(1.4249322787e-1f));
  poly = fused(poly, f, B(-1.6668057665e-1f));
  poly = fused(poly, f, B(2.0000714765e-1f));
  poly = fused(poly, f, B(-2.4999993993e-1f));
  poly = fused(poly, f, B(3.3333331174e-1f));
  return fused(z * f, poly, B(-0.5f) * z);
}

}  // namespace detail

namespace kernel {

/// x = 2^k m, m in [sqrt(1/2), sqrt(2)), by bit manipulation: k (as float; -inf for x == 0) and
/// f = m - 1, both exact (cpu/arch/avx512dq/log_parts.hpp reads them in one instruction each).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE void log_parts(const xsimd::batch<float, Arch>& x, xsimd::batch<float, Arch>& k_out,
                                        xsimd::batch<float, Arch>& f_out, xsimd::kernel::requires_arch<xsimd::generic>) {
  using B = xsimd::batch<float, Arch>;
  using I = xsimd::batch<std::int32_t, Arch>;
  // A subnormal x is its bit pattern times 2^-149: converting that integer is exact and, unlike
  // scaling by a power of 2, costs no microcode assist (a multiply with a subnormal input does).
  const auto subnormal = x < B(FLT_MIN);
  const I bits = xsimd::bitwise_cast<I>(
      xsimd::select(subnormal, xsimd::to_float(xsimd::bitwise_cast<I>(x)), x));
  // Subtracting the bits of sqrt(1/2) makes the exponent field of `offset` the k that puts m in
  // [sqrt(1/2), sqrt(2)); taking those k out of x's bits leaves m's bits.
  const I offset = bits - I(0x3f3504f3);
  const I k_int = offset >> 23;  // arithmetic shift: k may be negative
  const B m = xsimd::bitwise_cast<B>(bits - (offset & I(~0x7fffff)));
  f_out = m - B(1.0f);
  const B k = xsimd::to_float(k_int) - xsimd::select(subnormal, B(149.0f), B(0.0f));
  k_out = xsimd::select(x == B(0.0f), B(-std::numeric_limits<float>::infinity()), k);
}

}  // namespace kernel

/// The log is a few dozen instructions called from every term's loop body; compilers otherwise
/// keep it out of line and pass its three vectors through memory (a third of the time).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE LogSplit<Arch> log_split(const xsimd::batch<float, Arch>& x) {
  xsimd::batch<float, Arch> k, f;
  kernel::log_parts(x, k, f, Arch{});
  return {k, f, detail::log1p_rest(f)};
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// log a - log b from their splits. The k difference is exact and so is f_a - f_b (both m lie
/// within a factor 2: Sterbenz), and the fma adds them with one rounding, so the large parts
/// cancel exactly and the error is that of y_a and y_b plus roundings relative to the result.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> log_difference(const LogSplit<Arch>& a, const LogSplit<Arch>& b) {
  return fused(a.k - b.k, xsimd::batch<float, Arch>(kLn2), a.f - b.f) + (a.y - b.y);
}

/// k ln 2 + f + y: the log of a positive normal x from its split (fast_log without the special
/// values), within the fast_log bounds. ln 2 in two parts (Cody and Waite): k * kLn2Hi is exact,
/// so big |k| adds no rounding.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> log_from_split(const LogSplit<Arch>& s) {
  using B = xsimd::batch<float, Arch>;
  return fused(s.k, B(kLn2Hi), s.f + fused(s.k, B(kLn2Lo), s.y));
}

template <class Arch = xsimd::default_arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> fast_log(const xsimd::batch<float, Arch>& x) {
  using B = xsimd::batch<float, Arch>;
  const B finite = log_from_split(log_split(x));
  const B inf(std::numeric_limits<float>::infinity());
  const B special = xsimd::select(x == B(0.0f), -inf,
                                  xsimd::select(x == inf, inf, B(std::numeric_limits<float>::quiet_NaN())));
  return xsimd::select((x > B(0.0f)) & (x <= B(FLT_MAX)), finite, special);
}

}  // namespace specverify::cpu
