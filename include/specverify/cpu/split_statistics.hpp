// A probability row's statistics (max, argmax, entropy, divergences) with the row split over the
// row team (cpu/split_row.hpp), each part's summary merged in part order: the bits of the unsplit
// kernels for any number of parts, as the draws' are. A max is exact in any order; the lowest
// argmax is the first part's holding the max; entropy and divergences are FixedSums (exact
// merges) at a scale chosen from the whole row's largest term, as the unsplit sum_terms chooses it.
#pragma once

#include <cstdint>
#include <vector>

#include "specverify/cpu/divergence_kernels.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/cpu/split_row.hpp"

namespace specverify::cpu {

namespace detail {

/// sum_terms over the parts, merged, at the whole row's scale (at_row_scale).
template <class Arch, class Term>
TermSum split_sum_terms(const RowSplit& split, const float* p, const float* q, std::int32_t n, Term term) {
  return at_row_scale(n, [&](double scale) {
    TermSum r;
    for (const TermSum& part : split.per_part<TermSum>(n, [&](std::int32_t begin, std::int32_t end) {
           return sum_terms_at<Arch>(p + begin, Term::reads_q ? q + begin : nullptr, end - begin, term, scale);
         })) {
      r.merge(part);
    }
    r.scale = scale;
    return r;
  });
}

}  // namespace detail

/// row_max over the parts.
template <class Arch = DefaultArch>
Checked<float> split_row_max(const RowSplit& split, const float* p, std::int32_t n) {
  Checked<float> r;
  for (const Checked<float>& m : split.per_part<Checked<float>>(n, [&](std::int32_t begin, std::int32_t end) {
         return row_max<Arch>(p + begin, end - begin);
       })) {
    r.ok = r.ok && m.ok;
    r.value = std::max(r.value, m.value);
  }
  return r;
}

/// row_argmax over the parts: the first part whose argmax holds the largest value.
template <class Arch = DefaultArch>
Checked<std::int32_t> split_row_argmax(const RowSplit& split, const float* p, std::int32_t n) {
  Checked<std::int32_t> r{-1, true};
  for (const Checked<std::int32_t>& a : split.per_part<Checked<std::int32_t>>(n, [&](std::int32_t begin, std::int32_t end) {
         Checked<std::int32_t> part = row_argmax<Arch>(p + begin, end - begin);
         if (part.value >= 0) part.value += begin;
         return part;
       })) {
    r.ok = r.ok && a.ok;
    if (a.value >= 0 && (r.value < 0 || p[a.value] > p[r.value])) r.value = a.value;
  }
  if (!r.ok) r.value = -1;
  return r;
}

/// row_entropy over the parts.
template <class Arch = DefaultArch>
Checked<float> split_row_entropy(const RowSplit& split, const float* p, std::int32_t n) {
  return detail::scaled(detail::split_sum_terms<Arch>(split, p, nullptr, n, detail::EntropyTerm{}), 1.0);
}

/// row_divergence over the parts (a one-hot draft, q == nullptr, reads two sums of p's mass and
/// stays unsplit).
template <class Arch = DefaultArch>
Checked<float> split_row_divergence(const RowSplit& split, Divergence d, const float* p, const float* q,
                                    std::int32_t x, std::int32_t n) {
  if (!q) return row_divergence<Arch>(d, p, q, x, n);
  double factor;
  const detail::TermSum sum = detail::divergence_sum_by(d, p, q, factor, [&](const float* a, const float* b, auto term) {
    return detail::split_sum_terms<Arch>(split, a, b, n, term);
  });
  return detail::divergence_value(sum, factor);
}

}  // namespace specverify::cpu
