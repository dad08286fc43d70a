// Row statistics for the relaxed rules: the entropy H(p) and the divergences D(p, q) of
// docs/api.md "Divergence", natural log. One fused pass reads each row pair once, computes the whole
// statistic and validates every value it reads (NaN, inf or negative: ok = false, value
// unspecified). Each divergence is a per-element term summed by one loop template.
//
// Conventions: 0 log(0/.) = 0; positive mass against zero mass makes a KL-type term +inf, and the
// result is then +inf. Rows are taken as given (no normalisation); a one-hot draft (q == nullptr)
// is q = e_x, handled in closed form from p(x) and the mass of p off x.
//
// One answer everywhere: each element's term is computed by the same float operations whatever
// the vector width (the form is chosen lane by lane, fused multiply-adds are fused on every
// instruction set, the ratio is a correctly rounded divide), and the terms are summed as a
// core::FixedSum on its coarse grid (each term rounded to a multiple of 2^-40: one fused
// multiply-add and one integer addition per term; the fine grid's exact remainders cost three
// times that, and made FSD-KL 1.3x and FSD-JS 1.2x slower in bench_verify). So a statistic has
// the same bits in SSE2, AVX2 and AVX-512 builds.
//
// Accuracy. Each term takes one of two forms (the term functors below).
//   Fast form, for elements whose values are +-0 or positive normal floats: one log of a
//   ratio. With u = 2^-24, the ratio is rounded within u and fast_log adds at most
//   u |log| + 2.45e-8 (fast_log.hpp), so per unit weight the log is off by at most
//   u + 2.45e-8 = 8.41e-8 plus roundings relative to the term itself:
//     KL    p log r, r = p/q:                        8.41e-8 p.
//     FSD   (a + b) x, x = -log(r (2 - r)): r (2u through a + b and the ratio, times
//           |dx/dr| r <= 1), 2 - r and the product (u each), the log: (4u + 2.45e-8)(a + b),
//           times 1/4:                               6.57e-8 (p + q).
//   JS    the split form below in both forms (see JsTerm); the fast one only skips the clamping
//         of subnormal weights and the per-value validation, so its values are the same.
//   Careful form, for JS and for an element with a subnormal, invalid value or out-of-range ratio: logs of
//   the split form (fast_log.hpp), whose k and f parts cancel exactly, so a term a log(a/b)
//   carries 2 x 1.04e-8 times its weight; m = (p + q)/2 is corrected to first order (TwoSum).
// Terms are widened to double and summed on the coarse grid: each moves by at most 2^-41
// (kDivergenceGridError) at scale 1, which holds every row whose terms stay below 2^10 and sum
// below 2^22 (every row of probabilities; rows beyond are summed at a smaller power of two,
// core::fixed_scale, and their terms move by 2^-41 / scale); with the roundings relative to each
// term (the log's, the products', the final float) at most 8u.
// With S the sum of the magnitudes of the terms D adds up (scaled like D; S = D when no term is
// negative) and n the row length, this gives
//     |D - D_exact| <= kDivergenceMassError * sum(p + q) + kDivergenceTermError * S
//                      + kDivergenceGridError * n,
// 8.5e-8 (the KL figure above, the largest), 5e-7 (8u = 4.77e-7) and 2^-41 = 4.55e-13 (5.8e-8 at
// n = 128256, 4.8e-7 at n = 2^20; D's factor, at most 1, only shrinks it). For rows that sum to 1,
// S <= D + 2 for every divergence here (a negative term a log(a/b) is at least a - b; those add
// up to at most the total variation). So for a threshold T,
//     `D <= T` agrees with exact arithmetic whenever |D_exact - T| > decision_margin(T, n),
//     decision_margin(T, n) = kDecisionRelMargin * T + kDecisionAbsMargin + kDivergenceGridError * n
//                           = 5e-7 T + 1.17e-6 + 4.55e-13 n.
// The bound is a worst case: errors measured on random rows are well below it.
// tests/test_divergence_kernels.cpp checks the bound at V = 128256 and the decision near T.
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "specverify/core/fixed_sum.hpp"
#include "specverify/cpu/fast_log.hpp"
#include "specverify/cpu/fixed_lanes.hpp"
#include "specverify/cpu/fused.hpp"
#include "specverify/cpu/lanes.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/rule.hpp"

namespace specverify::cpu {

inline constexpr double kDivergenceMassError = 8.5e-8;
inline constexpr double kDivergenceTermError = 5e-7;
inline constexpr double kDecisionRelMargin = kDivergenceTermError;
inline constexpr double kDecisionAbsMargin = 2 * kDivergenceMassError + 2 * kDivergenceTermError;
inline constexpr double kDivergenceGridError = 0x1p-41;  // per element: the coarse grid's rounding

inline double decision_margin(double threshold, std::int64_t n) {
  return kDecisionRelMargin * threshold + kDecisionAbsMargin + kDivergenceGridError * static_cast<double>(n);
}

namespace detail {

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
  return kernel::not_zero_or_normal(x, Arch{});
}

/// Lanes where r is not a positive normal float.
template <class T, class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<T, Arch> not_normal(const xsimd::batch<T, Arch>& r) {
  return kernel::not_normal(r, Arch{});
}

/// p / q, correctly rounded on every instruction set. (An AVX-512 reciprocal with a Newton step
/// and a corrected quotient ran faster, but its roundings differ from the divider's, and a build's
/// instruction set must not change a statistic.)
template <class B>
SPECVERIFY_ALWAYS_INLINE B ratio(const B& p, const B& q) {
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
  // A one-ratio form (a log r + b log(2 - r), r = 2a/(a + b)) ran 1.3x faster but missed docs/api.md's
  // worked value 0.021901 by 1.4e-6 relative: its terms cancel ~5x and float logs near ln 2 carry
  // 2.5e-8. JS keeps the split form, whose TwoSum-corrected mixture is within 1e-6.
  static constexpr bool has_fast_form = true;
  template <class B>
  SPECVERIFY_ALWAYS_INLINE B operator()(const B& p, const B& q) const {
    return split_form(p, q, weight(p), weight(q));
  }
  /// The same split form for +-0 and positive normal values: their weights need no clamping, and
  /// the loop screens the values by class instead of validating each one (8% faster).
  template <class B, class M>
  SPECVERIFY_ALWAYS_INLINE B fast(const B& p, const B& q, M&) const {
    return split_form(p, q, p, q);
  }
  /// The term with p and q weighted by wp and wq.
  template <class B>
  SPECVERIFY_ALWAYS_INLINE static B split_form(const B& p, const B& q, const B& wp, const B& wq) {
    const MixtureSplits<B> l(p, q);
    const B zero(0.0f);
    // d/dm of the term is -(p + q)/m = -2, and m is err/2 short: subtract err.
    return xsimd::select(p > zero, wp * log_difference(l.p, l.m), zero) +
           xsimd::select(q > zero, wq * log_difference(l.q, l.m), zero) - l.err;
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
    return xsimd::select(l.s > zero, fused(weight(l.s), x, correction), zero);
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

/// sum_i t(p_i, q_i) as a core::FixedSum on its coarse grid (the same bits for every SIMD width
/// and split), whether a term was +inf (the sum is then +inf), and whether every value read was
/// valid.
struct TermSum {
  core::FixedSum sum;
  double scale = 1.0;     // the terms were summed times this power of two (unnormalised rows)
  double max_term = 0.0;  // the largest finite |term| (unscaled): whether any term is nonzero
  bool infinite = false;
  bool ok = true;

  void merge(const TermSum& other) {  // slices summed at the same scale
    sum.merge(other.sum);
    max_term = std::max(max_term, other.max_term);
    infinite = infinite || other.infinite;
    ok = ok && other.ok;
  }
  double value() const { return infinite ? HUGE_VAL : sum.value() / scale; }
};

/// One pass over n elements at `scale`, validating every value read. Each lane takes the fast
/// form unless its own values need the careful one: the choice is per element, so the term of
/// element i is the same whatever vector it falls in.
template <class Arch, class Term>
SPECVERIFY_FLATTEN TermSum sum_terms_at(const float* p, const float* q, std::int32_t n, Term term, double scale) {
  using B = xsimd::batch<float, Arch>;
  constexpr std::int32_t W = B::size;
  auto ok = B(0.0f) == B(0.0f);
  auto infinite = B(0.0f) != B(0.0f);
  FixedLanes<Arch> lanes(scale);
  // The largest |term|, kept on the float terms (widening is exact): a third of the instructions
  // of a max over the double lanes. NaN lanes fail the compare: the caller validates.
  B largest(0.0f);
  const auto add = [&](const float* pi, const float* qi, auto load) {
    const B pv = load(pi);
    B qv = pv;
    auto rare = unusual(pv);
    if constexpr (Term::reads_q) {
      qv = load(qi);
      rare = rare | unusual(qv);
    }
    B t;
    if constexpr (!Term::has_fast_form) {
      ok = ok & valid_probability(pv) & valid_probability(qv);
      t = term(pv, qv);
    } else {
      t = term.fast(pv, qv, rare);
      if (xsimd::any(rare)) {  // an invalid value, a subnormal or a ratio the fast form cannot take
        ok = ok & valid_probability(pv) & valid_probability(qv);
        t = xsimd::select(rare, term(pv, qv), t);
      }
    }
    const auto inf = t == B(std::numeric_limits<float>::infinity());
    infinite = infinite | inf;
    t = xsimd::select(inf, B(0.0f), t);
    const B m = xsimd::abs(t);
    largest = xsimd::select(m > largest, m, largest);
    lanes.add_coarse(widen_low(t));
    lanes.add_coarse(widen_high(t));
  };
  const auto unaligned = [](const float* v) { return B::load_unaligned(v); };
  const auto aligned = [](const float* v) { return B::load_aligned(v); };

  const std::int32_t body = n / W * W;
  // q + i only when q is read: q may be nullptr for one-row terms.
  for (std::int32_t i = 0; i < body; i += W) add(p + i, Term::reads_q ? q + i : nullptr, unaligned);
  if (body < n) {
    alignas(64) float tail_p[W] = {}, tail_q[W] = {};
    std::copy(p + body, p + n, tail_p);
    if constexpr (Term::reads_q) std::copy(q + body, q + n, tail_q);
    add(tail_p, tail_q, aligned);
  }
  TermSum r;
  r.scale = scale;
  lanes.flush(r.sum);
  r.infinite = xsimd::any(infinite);
  r.ok = xsimd::all(ok);
  alignas(64) float maxima[W];
  largest.store_aligned(maxima);
  for (const float m : maxima) r.max_term = std::max(r.max_term, static_cast<double>(m));
  return r;
}

/// sum_at(scale), a row of n terms summed at a scale: at 1, or again at core::fixed_scale where
/// the terms leave FixedSum's domain (rows far from normalised). The choice is made from the row's
/// largest term alone, so a row summed in parts (sum_at merging them) chooses as the whole row.
template <class SumAt>
TermSum at_row_scale(std::int64_t n, SumAt sum_at) {
  TermSum r = sum_at(1.0);
  if (r.ok && !core::fixed_fits(r.max_term, n)) r = sum_at(core::fixed_scale(r.max_term, n));
  return r;
}

/// sum_terms_at at the row's scale (at_row_scale).
template <class Arch, class Term>
TermSum sum_terms(const float* p, const float* q, std::int32_t n, Term term) {
  return at_row_scale(n, [&](double scale) { return sum_terms_at<Arch>(p, q, n, term, scale); });
}

inline Checked<float> scaled(const TermSum& sum, double factor) {
  return {static_cast<float>(factor * sum.value()), sum.ok};
}

/// D(p, e_x) from a = p(x), the mass `rest` of p off x, and whether p has mass off x.
inline float one_hot_value(Divergence d, double a, double rest, bool off_x) {
  const double inf = std::numeric_limits<double>::infinity();
  const double ln2 = 0.693147180559945309417232121458;
  double v = 0.0;
  switch (d) {
    case Divergence::kl_target_draft:  // p log(p/0) = inf off x
      v = off_x ? inf : (a > 0.0 ? a * std::log(a) : 0.0);
      break;
    case Divergence::kl_draft_target:
      v = -std::log(a);
      break;
    case Divergence::js:  // double logs: their rounding is far below float's
      v = 0.5 * (rest * ln2 + (a > 0.0 ? a * std::log(2.0 * a / (a + 1.0)) : 0.0) +
                 std::log(2.0 / (a + 1.0)));
      break;
    case Divergence::js_fsd:  // m log(m/0) = inf off x, and at x when a = 0
      v = off_x || !(a > 0.0) ? inf : 0.25 * (a + 1.0) * std::log((a + 1.0) * (a + 1.0) / (4.0 * a));
      break;
    case Divergence::tv:
      v = 0.5 * (std::abs(a - 1.0) + rest);
      break;
  }
  return static_cast<float>(v);
}

/// D(p, e_x): only a = p(x) and the mass R of p off x enter (m = p/2 off x, (a + 1)/2 at x).
template <class Arch>
Checked<float> one_hot_divergence(Divergence d, const float* p, std::int32_t x, std::int32_t n) {
  if (x < 0 || x >= n) return {std::numeric_limits<float>::quiet_NaN(), false};
  TermSum off = sum_terms<Arch>(p, nullptr, x, MassTerm{});
  const TermSum after = sum_terms<Arch>(p + x + 1, nullptr, n - x - 1, MassTerm{});
  const bool ok = off.ok && after.ok && valid_probability(p[x]);
  const double a = p[x];
  // The two slices' masses merge exactly where both are at scale 1 (rows of probabilities).
  // Whether p has mass off x is asked of its values, not of the sum (whose terms round to
  // multiples of 2^-40).
  const bool off_x = off.max_term > 0.0 || after.max_term > 0.0;
  double rest;
  if (off.scale == after.scale) {
    off.merge(after);
    rest = off.value();
  } else {
    rest = off.value() + after.value();
  }
  return {one_hot_value(d, a, rest, off_x), ok};
}

}  // namespace detail

/// H(p) = -sum p log p, with 0 log 0 = 0.
template <class Arch = DefaultArch>
Checked<float> row_entropy(const float* p, std::int32_t n) {
  return detail::scaled(detail::sum_terms<Arch>(p, nullptr, n, detail::EntropyTerm{}), 1.0);
}

namespace detail {

/// Calls fn(term, swapped) with divergence d's term (swapped: the term reads q as p, KL(q||p)),
/// setting the factor D = factor * sum; 0 and fn's default for a value that is not a Divergence.
/// D = factor * sum t for divergence d's term; 0 for a value that is not a Divergence.
inline double divergence_factor(Divergence d) {
  switch (d) {
    case Divergence::kl_target_draft:
    case Divergence::kl_draft_target: return 1.0;
    case Divergence::js:
    case Divergence::tv: return 0.5;
    case Divergence::js_fsd: return 0.25;
  }
  return 0.0;
}

template <class Fn>
auto with_divergence_term(Divergence d, double& factor, Fn fn) -> decltype(fn(TvTerm{}, false)) {
  factor = divergence_factor(d);
  switch (d) {
    case Divergence::kl_target_draft: return fn(KlTerm{}, false);
    case Divergence::kl_draft_target: return fn(KlTerm{}, true);
    case Divergence::js: return fn(JsTerm{}, false);
    case Divergence::js_fsd: return fn(JsFsdTerm{}, false);
    case Divergence::tv: return fn(TvTerm{}, false);
  }
  return {};
}

/// sum t(p, q) for divergence d, summed by sum(a, b, term) (a, b: p, q, or q, p for a term that
/// reads the rows swapped), and the factor D = factor * sum (0 for a value that is not a
/// Divergence: ok is then false).
template <class Sum>
TermSum divergence_sum_by(Divergence d, const float* p, const float* q, double& factor, Sum sum) {
  TermSum invalid;
  invalid.ok = false;
  TermSum r = with_divergence_term(d, factor, [&](auto term, bool swapped) { return swapped ? sum(q, p, term) : sum(p, q, term); });
  return factor == 0.0 ? invalid : r;
}

/// divergence_sum_by over the whole rows.
template <class Arch>
TermSum divergence_sum(Divergence d, const float* p, const float* q, std::int32_t n, double& factor) {
  return divergence_sum_by(d, p, q, factor, [&](const float* a, const float* b, auto term) { return sum_terms<Arch>(a, b, n, term); });
}

/// D = factor * sum, NaN and not ok where a value read (or d) was invalid.
inline Checked<float> divergence_value(const TermSum& sum, double factor) {
  if (!sum.ok) return {std::numeric_limits<float>::quiet_NaN(), false};
  return scaled(sum, factor);
}

}  // namespace detail

/// D(p, q) of the given kind; q == nullptr is a one-hot draft at x (x in [0, n), else ok = false).
template <class Arch = DefaultArch>
Checked<float> row_divergence(Divergence d, const float* p, const float* q, std::int32_t x,
                              std::int32_t n) {
  if (!q) return detail::one_hot_divergence<Arch>(d, p, x, n);
  double factor;
  const detail::TermSum sum = detail::divergence_sum<Arch>(d, p, q, n, factor);
  return detail::divergence_value(sum, factor);
}

}  // namespace specverify::cpu
