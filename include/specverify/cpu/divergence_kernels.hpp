// Row statistics for the relaxed rules: the entropy H(p) and the divergences D(p, q) of
// API.md "Divergence", natural log. One fused pass reads each row pair once, computes the whole
// statistic and validates every value it reads (NaN, inf or negative: ok = false, value
// unspecified). Each divergence is a per-element term summed by one loop template.
//
// Conventions: 0 log(0/.) = 0; positive mass against zero mass makes a KL-type term +inf, and the
// result is then +inf. Rows are taken as given (no normalisation); a one-hot draft (q == nullptr)
// is q = e_x, handled in closed form from p(x) and the mass of p off x.
//
// Accuracy. Each vector of terms takes one of two forms (the term functors below).
//   Fast form, for vectors whose values are all +-0 or positive normal floats: one log of a
//   ratio. With u = 2^-24, the ratio is rounded within u(1 + 2^-19) and fast_log adds at most
//   u |log| + 2.45e-8 (fast_log.hpp), so per unit weight the log is off by at most
//   u + 2.45e-8 = 8.41e-8 plus roundings relative to the term itself:
//     KL    p log r, r = p/q:                        8.41e-8 p.
//     FSD   (a + b) x, x = -log(r (2 - r)): r (2u through a + b and the ratio, times
//           |dx/dr| r <= 1), 2 - r and the product (u each), the log: (4u + 2.45e-8)(a + b),
//           times 1/4:                               6.57e-8 (p + q).
//   JS    the split form below in both forms (see JsTerm); the fast one only skips the clamping
//         of subnormal weights and the per-value validation, so its values are the same.
//   Careful form, for JS and for a vector with any subnormal, invalid value or out-of-range ratio: logs of
//   the split form (fast_log.hpp), whose k and f parts cancel exactly, so a term a log(a/b)
//   carries 2 x 1.04e-8 times its weight; m = (p + q)/2 is corrected to first order (TwoSum).
// Terms are summed in float lanes for kChunkVectors vectors, then in double: with the roundings
// relative to each term (the log's, the products', the lane sums', the final float) at most 8u.
// With S the sum of the magnitudes of the terms D adds up (scaled like D; S = D when no term is
// negative), this gives
//     |D - D_exact| <= kDivergenceMassError * sum(p + q) + kDivergenceTermError * S,
// 8.5e-8 (the KL figure above, the largest) and 5e-7 (8u = 4.77e-7). For rows that sum to 1,
// S <= D + 2 for every divergence here (a negative term a log(a/b) is at least a - b; those add
// up to at most the total variation). So for a threshold T,
//     `D <= T` agrees with exact arithmetic whenever |D_exact - T| > decision_margin(T),
//     decision_margin(T) = kDecisionRelMargin * T + kDecisionAbsMargin = 5e-7 T + 1.17e-6.
// The bound is a worst case: errors measured on random rows are well below it.
// tests/test_divergence_kernels.cpp checks the bound at V = 128256 and the decision near T.
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include "specverify/cpu/fast_log.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/rule.hpp"

namespace specverify::cpu {

inline constexpr double kDivergenceMassError = 8.5e-8;
inline constexpr double kDivergenceTermError = 5e-7;
inline constexpr double kDecisionRelMargin = kDivergenceTermError;
inline constexpr double kDecisionAbsMargin = 2 * kDivergenceMassError + 2 * kDivergenceTermError;

inline double decision_margin(double threshold) {
  return kDecisionRelMargin * threshold + kDecisionAbsMargin;
}

namespace detail {

/// Float lanes add this many vectors before their sums move to double: 4 roundings per lane.
inline constexpr std::int32_t kChunkVectors = 4;

/// A term's weight a: a subnormal a counts as FLT_MIN. That moves its term by less than
/// FLT_MIN * |log ratio| < 2e-36, and a multiply with a subnormal input costs a microcode assist
/// (rows whose tails are subnormal ran 10x slower).
template <class B>
SPECVERIFY_ALWAYS_INLINE B weight(const B& a) {
  return xsimd::select(a < B(FLT_MIN), B(FLT_MIN), a);
}

/// Lanes that are not +-0 or a positive normal float: invalid values, and subnormals (which the
/// fast forms below leave to the careful ones).
template <class T, class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<T, Arch> unusual(const xsimd::batch<T, Arch>& x) {
#if XSIMD_WITH_AVX512DQ
  if constexpr (kHasAvx512<Arch>) {  // one instruction: NaN, +-inf, subnormal, negative
    return xsimd::batch_bool<T, Arch>(_mm512_fpclass_ps_mask(__m512(x), 0xf9));
  } else
#endif
  {
    using B = xsimd::batch<T, Arch>;
    return !((x == B(0.0f)) | ((x >= B(FLT_MIN)) & (x <= B(FLT_MAX))));
  }
}

/// Lanes where r is not a positive normal float.
template <class T, class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<T, Arch> not_normal(const xsimd::batch<T, Arch>& r) {
#if XSIMD_WITH_AVX512DQ
  if constexpr (kHasAvx512<Arch>) {
    return xsimd::batch_bool<T, Arch>(_mm512_fpclass_ps_mask(__m512(r), 0xff));
  } else
#endif
  {
    using B = xsimd::batch<T, Arch>;
    return !((r >= B(FLT_MIN)) & (r <= B(FLT_MAX)));
  }
}

/// p / q for positive normal p and q, or a value that is not a positive normal float where the
/// quotient is not one. AVX-512: a 14-bit reciprocal, one Newton step (relative error below
/// 2^-27 for q <= 2^126; 2^-20 up to FLT_MAX, where 1/q is subnormal) and one correction of the
/// quotient by its exact residual p - r q: rounded within 2^-24 (1 + 2^-19) of p / q, against
/// 2^-24 for a divide, without the divider's throughput of one vector every 10 cycles.
template <class B>
SPECVERIFY_ALWAYS_INLINE B ratio(const B& p, const B& q) {
#if XSIMD_WITH_AVX512DQ
  if constexpr (kHasAvx512<typename B::arch_type>) {
    // Intrinsics, not xsimd::fma: xsimd 8.1 writes x * y + z for AVX-512, fused only where the
    // compiler contracts it, and the residual must come from a fused multiply-add to be exact.
    const __m512 pv = p, qv = q;
    const __m512 r0 = _mm512_maskz_rcp14_ps(0xffff, qv);  // not rcp14_ps: g++ 12 warns on it
    const __m512 r1 = _mm512_fmadd_ps(r0, _mm512_fnmadd_ps(r0, qv, _mm512_set1_ps(1.0f)), r0);
    const __m512 r = _mm512_mul_ps(pv, r1);
    return B(_mm512_fmadd_ps(_mm512_fnmadd_ps(r, qv, pv), r1, r));
  }
#endif
  return p / q;
}

template <class B>
SPECVERIFY_ALWAYS_INLINE B log_normal(const B& x) {  // log x for a positive normal x
  return log_from_split(log_split(x));
}

// Per-element terms t(p, q); the statistic is a constant times sum t. Every term is 0 at
// p = q = 0, so a zero-padded tail adds nothing.
//
// Each term has two forms. fast(p, q, rare) assumes every p and q is +-0 or a positive normal
// float and adds to `rare` the lanes where its shortcut does not hold (a ratio that is not a
// normal float); for a vector with any such lane, or any other value, the loop uses the careful
// operator() instead, which takes every valid value (subnormals, zeros) in the split form.
struct MassTerm {
  static constexpr bool reads_q = false;
  static constexpr bool has_fast_form = true;
  template <class B>
  SPECVERIFY_ALWAYS_INLINE B operator()(const B& p, const B&) const { return p; }
  template <class B, class M>
  SPECVERIFY_ALWAYS_INLINE B fast(const B& p, const B&, M&) const { return p; }
};

struct EntropyTerm {  // -p log p
  static constexpr bool reads_q = false;
  static constexpr bool has_fast_form = true;
  template <class B>
  SPECVERIFY_ALWAYS_INLINE B operator()(const B& p, const B&) const {
    return xsimd::select(p > B(0.0f), -weight(p) * fast_log(p), B(0.0f));
  }
  template <class B, class M>
  SPECVERIFY_ALWAYS_INLINE B fast(const B& p, const B&, M&) const {
    return xsimd::select(p > B(0.0f), -p * log_normal(p), B(0.0f));
  }
};

struct TvTerm {  // |p - q|, times 1/2
  static constexpr bool reads_q = true;
  static constexpr bool has_fast_form = true;
  template <class B>
  SPECVERIFY_ALWAYS_INLINE B operator()(const B& p, const B& q) const { return xsimd::abs(p - q); }
  template <class B, class M>
  SPECVERIFY_ALWAYS_INLINE B fast(const B& p, const B& q, M&) const { return xsimd::abs(p - q); }
};

struct KlTerm {  // p log(p/q); KL(q||p) swaps the rows
  static constexpr bool reads_q = true;
  static constexpr bool has_fast_form = true;
  template <class B>
  SPECVERIFY_ALWAYS_INLINE B operator()(const B& p, const B& q) const {
    return xsimd::select(p > B(0.0f), weight(p) * log_difference(log_split(p), log_split(q)),
                         B(0.0f));
  }
  /// One log of the rounded ratio: q = 0 under p > 0 (r = inf) and a ratio out of the normal
  /// range go to the careful form.
  template <class B, class M>
  SPECVERIFY_ALWAYS_INLINE B fast(const B& p, const B& q, M& rare) const {
    const B r = ratio(p, q);
    const auto positive = p > B(0.0f);
    rare = rare | (positive & not_normal(r));
    return xsimd::select(positive, p * log_normal(r), B(0.0f));
  }
};

/// p + q - s exactly, for s = fl(p + q) (Knuth's TwoSum).
template <class B>
SPECVERIFY_ALWAYS_INLINE B sum_error(const B& p, const B& q, const B& s) {
  const B q_virtual = s - p, p_virtual = s - q_virtual;
  return (p - p_virtual) + (q - q_virtual);
}

/// Splits of p, q and m = (p + q)/2. m is formed as log(p + q) - ln 2: (p + q)/2 would round a
/// lone smallest subnormal to 0. `err` = p + q - fl(p + q): the rounding of m, which the terms
/// below correct to first order (it would otherwise be an error of up to 6e-8 times the mass).
template <class B>
struct MixtureSplits {
  B s, err;
  LogSplit<typename B::arch_type> p, q, m;

  SPECVERIFY_ALWAYS_INLINE MixtureSplits(const B& pv, const B& qv)
      : s(pv + qv), err(sum_error(pv, qv, s)), p(log_split(pv)), q(log_split(qv)), m(log_split(s)) {
    m.k = m.k - B(1.0f);
  }
};

struct JsTerm {  // p log(p/m) + q log(q/m), times 1/2
  static constexpr bool reads_q = true;
  // A one-ratio form (a log r + b log(2 - r), r = 2a/(a + b)) ran 1.3x faster but missed API.md's
  // worked value 0.021901 by 1.4e-6 relative: its terms cancel ~5x and float logs near ln 2 carry
  // 2.5e-8. JS keeps the split form, whose TwoSum-corrected mixture is within 1e-6.
  static constexpr bool has_fast_form = true;
  template <class B>
  SPECVERIFY_ALWAYS_INLINE B operator()(const B& p, const B& q) const {
    const MixtureSplits<B> l(p, q);
    const B zero(0.0f);
    // d/dm of the term is -(p + q)/m = -2, and m is err/2 short: subtract err.
    return xsimd::select(p > zero, weight(p) * log_difference(l.p, l.m), zero) +
           xsimd::select(q > zero, weight(q) * log_difference(l.q, l.m), zero) - l.err;
  }
  /// The same split form for +-0 and positive normal values: their weights need no clamping, and
  /// the loop screens the values by class instead of validating each one (8% faster).
  template <class B, class M>
  SPECVERIFY_ALWAYS_INLINE B fast(const B& p, const B& q, M&) const {
    const MixtureSplits<B> l(p, q);
    const B zero(0.0f);
    return xsimd::select(p > zero, p * log_difference(l.p, l.m), zero) +
           xsimd::select(q > zero, q * log_difference(l.q, l.m), zero) - l.err;
  }
};

struct JsFsdTerm {  // (p + q) (log(m/p) + log(m/q)), times 1/4
  static constexpr bool reads_q = true;
  static constexpr bool has_fast_form = true;
  template <class B>
  SPECVERIFY_ALWAYS_INLINE B operator()(const B& p, const B& q) const {
    const MixtureSplits<B> l(p, q);
    const B zero(0.0f);
    const B x = log_difference(l.m, l.p) + log_difference(l.m, l.q);
    // d/ds of s x is x + 2. err is 0 whenever p or q is 0 (where x = inf).
    const B correction = xsimd::select(l.err != zero, l.err * (x + B(2.0f)), zero);
    return xsimd::select(l.s > zero, fmadd(weight(l.s), x, correction), zero);
  }
  /// x = log(m/p) + log(m/q) = -log(r (2 - r)) with a, b and r as for JS: one log, one ratio.
  /// a = 0 < b makes x = +inf. The rounding of s = a + b is left uncorrected (see the bound).
  template <class B, class M>
  SPECVERIFY_ALWAYS_INLINE B fast(const B& p, const B& q, M& rare) const {
    const B zero(0.0f);
    const B a = xsimd::select(p < q, p, q), b = xsimd::select(p < q, q, p);
    const B s = b + a, r = ratio(a + a, s);
    const auto positive = a > zero;
    rare = rare | (positive & not_normal(r));
    const B x = xsimd::select(positive, -log_normal(r * (B(2.0f) - r)),
                              B(std::numeric_limits<float>::infinity()));
    return xsimd::select(b > zero, s * x, zero);
  }
};

/// sum_i t(p_i, q_i) over n elements in one pass, validating every value read.
template <class Arch, class Term>
SPECVERIFY_FLATTEN Checked<double> sum_terms(const float* p, const float* q, std::int32_t n, Term term) {
  using B = xsimd::batch<float, Arch>;
  using D = xsimd::batch<double, Arch>;
  constexpr std::int32_t W = B::size;
  auto ok = B(0.0f) == B(0.0f);
  D total(0.0);
  const auto widen = [&](const B& v) { total += widen_low(v) + widen_high(v); };
  const auto at = [&](const float* pi, const float* qi, auto load) {
    const B pv = load(pi);
    B qv = pv;
    auto rare = unusual(pv);
    if constexpr (Term::reads_q) {
      qv = load(qi);
      rare = rare | unusual(qv);
    }
    if constexpr (!Term::has_fast_form) {
      ok = ok & valid_probability(pv) & valid_probability(qv);
      return term(pv, qv);
    } else {
      B t = term.fast(pv, qv, rare);
      if (xsimd::any(rare)) {  // an invalid value, a subnormal or a ratio the fast form cannot take
        ok = ok & valid_probability(pv) & valid_probability(qv);
        t = term(pv, qv);
      }
      return t;
    }
  };
  const auto unaligned = [](const float* v) { return B::load_unaligned(v); };
  const auto aligned = [](const float* v) { return B::load_aligned(v); };

  const std::int32_t body = n / W * W;
  for (std::int32_t begin = 0; begin < body; begin += kChunkVectors * W) {
    const std::int32_t end = std::min(body, begin + kChunkVectors * W);
    B acc(0.0f);
    for (std::int32_t i = begin; i < end; i += W) {
      // q + i only when q is read: q may be nullptr for one-row terms.
      acc += at(p + i, Term::reads_q ? q + i : nullptr, unaligned);
    }
    widen(acc);
  }
  if (body < n) {
    alignas(64) float tail_p[W] = {}, tail_q[W] = {};
    std::copy(p + body, p + n, tail_p);
    if constexpr (Term::reads_q) std::copy(q + body, q + n, tail_q);
    widen(at(tail_p, tail_q, aligned));
  }
  alignas(64) double sums[D::size];  // not xsimd::hadd: g++ 12 warns inside its AVX-512 intrinsic
  total.store_aligned(sums);
  return {std::accumulate(sums, sums + D::size, 0.0), xsimd::all(ok)};
}

inline Checked<float> scaled(const Checked<double>& sum, double factor) {
  return {static_cast<float>(factor * sum.value), sum.ok};
}

/// D(p, e_x): only a = p(x) and the mass R of p off x enter (m = p/2 off x, (a + 1)/2 at x).
template <class Arch>
Checked<float> one_hot_divergence(Divergence d, const float* p, std::int32_t x, std::int32_t n) {
  if (x < 0 || x >= n) return {std::numeric_limits<float>::quiet_NaN(), false};
  const Checked<double> before = sum_terms<Arch>(p, nullptr, x, MassTerm{});
  const Checked<double> after = sum_terms<Arch>(p + x + 1, nullptr, n - x - 1, MassTerm{});
  const bool ok = before.ok && after.ok && valid_probability(p[x]);
  const double a = p[x], rest = before.value + after.value;
  const double inf = std::numeric_limits<double>::infinity();
  const double ln2 = 0.693147180559945309417232121458;
  double v = 0.0;
  switch (d) {
    case Divergence::kl_target_draft:  // p log(p/0) = inf off x
      v = rest > 0.0 ? inf : (a > 0.0 ? a * std::log(a) : 0.0);
      break;
    case Divergence::kl_draft_target:
      v = -std::log(a);
      break;
    case Divergence::js:  // double logs: their rounding is far below float's
      v = 0.5 * (rest * ln2 + (a > 0.0 ? a * std::log(2.0 * a / (a + 1.0)) : 0.0) +
                 std::log(2.0 / (a + 1.0)));
      break;
    case Divergence::js_fsd:  // m log(m/0) = inf off x, and at x when a = 0
      v = rest > 0.0 || !(a > 0.0) ? inf : 0.25 * (a + 1.0) * std::log((a + 1.0) * (a + 1.0) / (4.0 * a));
      break;
    case Divergence::tv:
      v = 0.5 * (std::abs(a - 1.0) + rest);
      break;
  }
  return {static_cast<float>(v), ok};
}

}  // namespace detail

/// H(p) = -sum p log p, with 0 log 0 = 0.
template <class Arch = DefaultArch>
Checked<float> row_entropy(const float* p, std::int32_t n) {
  return detail::scaled(detail::sum_terms<Arch>(p, nullptr, n, detail::EntropyTerm{}), 1.0);
}

/// D(p, q) of the given kind; q == nullptr is a one-hot draft at x (x in [0, n), else ok = false).
template <class Arch = DefaultArch>
Checked<float> row_divergence(Divergence d, const float* p, const float* q, std::int32_t x,
                              std::int32_t n) {
  if (!q) return detail::one_hot_divergence<Arch>(d, p, x, n);
  switch (d) {
    case Divergence::kl_target_draft:
      return detail::scaled(detail::sum_terms<Arch>(p, q, n, detail::KlTerm{}), 1.0);
    case Divergence::kl_draft_target:
      return detail::scaled(detail::sum_terms<Arch>(q, p, n, detail::KlTerm{}), 1.0);
    case Divergence::js:
      return detail::scaled(detail::sum_terms<Arch>(p, q, n, detail::JsTerm{}), 0.5);
    case Divergence::js_fsd:
      return detail::scaled(detail::sum_terms<Arch>(p, q, n, detail::JsFsdTerm{}), 0.25);
    case Divergence::tv:
      return detail::scaled(detail::sum_terms<Arch>(p, q, n, detail::TvTerm{}), 0.5);
  }
  return {std::numeric_limits<float>::quiet_NaN(), false};  // not a Divergence
}

}  // namespace specverify::cpu
