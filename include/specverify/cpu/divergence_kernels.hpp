// Row statistics for the relaxed rules: the entropy H(p) and the divergences D(p, q) of
// API.md "Divergence", natural log. One fused pass reads each row pair once, computes the whole
// statistic and validates every value it reads (NaN, inf or negative: ok = false, value
// unspecified). Each divergence is a per-element term summed by one loop template.
//
// Conventions: 0 log(0/.) = 0; positive mass against zero mass makes a KL-type term +inf, and the
// result is then +inf. Rows are taken as given (no normalisation); a one-hot draft (q == nullptr)
// is q = e_x, handled in closed form from p(x) and the mass of p off x.
//
// Accuracy. Logs of a ratio come from log_split (fast_log.hpp): the k and f parts of the two
// logs cancel exactly, so a term a log(a/b) carries an absolute error of at most 2 x 1.04e-8
// times its weight a (the y parts), plus float roundings relative to the term itself. The
// rounding of m = (p + q)/2 is corrected to first order (TwoSum). Terms are summed in float lanes
// for kChunkVectors vectors, then in double. With S the sum of the magnitudes of the terms D adds
// up (scaled like D; S = D when no term is negative), this gives
//     |D - D_exact| <= kDivergenceMassError * sum(p + q) + kDivergenceTermError * S,
// 5e-8 and 5e-7 (about 8 roundings of 2^-24). For rows that sum to 1, S <= D + 2 for every
// divergence here (a negative term a log(a/b) is at least a - b; those add up to at most the
// total variation). So for a threshold T,
//     `D <= T` agrees with exact arithmetic whenever |D_exact - T| > decision_margin(T),
//     decision_margin(T) = kDecisionRelMargin * T + kDecisionAbsMargin = 5e-7 T + 1.1e-6.
// The bound is a worst case: errors measured on random rows are below 1% of it.
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

inline constexpr double kDivergenceMassError = 5e-8;
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
B weight(const B& a) {
  return xsimd::select(a < B(FLT_MIN), B(FLT_MIN), a);
}

// Per-element terms t(p, q); the statistic is a constant times sum t. Every term is 0 at
// p = q = 0, so a zero-padded tail adds nothing.
struct MassTerm {
  static constexpr bool reads_q = false;
  template <class B>
  B operator()(const B& p, const B&) const { return p; }
};

struct EntropyTerm {  // -p log p
  static constexpr bool reads_q = false;
  template <class B>
  B operator()(const B& p, const B&) const {
    return xsimd::select(p > B(0.0f), -weight(p) * fast_log(p), B(0.0f));
  }
};

struct TvTerm {  // |p - q|, times 1/2
  static constexpr bool reads_q = true;
  template <class B>
  B operator()(const B& p, const B& q) const { return xsimd::abs(p - q); }
};

struct KlTerm {  // p log(p/q); KL(q||p) swaps the rows
  static constexpr bool reads_q = true;
  template <class B>
  B operator()(const B& p, const B& q) const {
    return xsimd::select(p > B(0.0f), weight(p) * log_difference(log_split(p), log_split(q)),
                         B(0.0f));
  }
};

/// p + q - s exactly, for s = fl(p + q) (Knuth's TwoSum).
template <class B>
B sum_error(const B& p, const B& q, const B& s) {
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

  MixtureSplits(const B& pv, const B& qv)
      : s(pv + qv), err(sum_error(pv, qv, s)), p(log_split(pv)), q(log_split(qv)), m(log_split(s)) {
    m.k = m.k - B(1.0f);
  }
};

struct JsTerm {  // p log(p/m) + q log(q/m), times 1/2
  static constexpr bool reads_q = true;
  template <class B>
  B operator()(const B& p, const B& q) const {
    const MixtureSplits<B> l(p, q);
    const B zero(0.0f);
    // d/dm of the term is -(p + q)/m = -2, and m is err/2 short: subtract err.
    return xsimd::select(p > zero, weight(p) * log_difference(l.p, l.m), zero) +
           xsimd::select(q > zero, weight(q) * log_difference(l.q, l.m), zero) - l.err;
  }
};

struct JsFsdTerm {  // (p + q) (log(m/p) + log(m/q)), times 1/4
  static constexpr bool reads_q = true;
  template <class B>
  B operator()(const B& p, const B& q) const {
    const MixtureSplits<B> l(p, q);
    const B zero(0.0f);
    const B x = log_difference(l.m, l.p) + log_difference(l.m, l.q);
    // d/ds of s x is x + 2. err is 0 whenever p or q is 0 (where x = inf).
    const B correction = xsimd::select(l.err != zero, l.err * (x + B(2.0f)), zero);
    return xsimd::select(l.s > zero, xsimd::fma(weight(l.s), x, correction), zero);
  }
};

/// sum_i t(p_i, q_i) over n elements in one pass, validating every value read.
template <class Arch, class Term>
Checked<double> sum_terms(const float* p, const float* q, std::int32_t n, Term term) {
  using B = xsimd::batch<float, Arch>;
  using D = xsimd::batch<double, Arch>;
  constexpr std::int32_t W = B::size;
  auto ok = B(0.0f) == B(0.0f);
  D total(0.0);
  alignas(64) float lanes[W];
  const auto widen = [&](const B& v) {  // the float lanes, converted and added to the double ones
    v.store_aligned(lanes);
    total += D::load_aligned(lanes) + D::load_aligned(lanes + W / 2);
  };
  const auto at = [&](const float* pi, const float* qi, auto load) {
    const B pv = load(pi);
    ok = ok & valid_probability(pv);
    if constexpr (Term::reads_q) {
      const B qv = load(qi);
      ok = ok & valid_probability(qv);
      return term(pv, qv);
    } else {
      return term(pv, pv);
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
