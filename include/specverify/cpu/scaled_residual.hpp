// CPU row work for a residual no sibling has changed yet (core::Residual::plain()): the mass and
// the draw of max(s p - q, 0), with s = Residual::p_scale (block verification's p_tau; 1 for a
// tree node's first sibling) and q one-hot on x where there is no draft row. The draw is
// cpu/draw.hpp's and the mass the same FixedSum, so both are the same for every SIMD width.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>

#include "specverify/core/fixed_sum.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/cpu/draw.hpp"
#include "specverify/cpu/fused.hpp"
#include "specverify/cpu/row_kernels.hpp"

namespace specverify::cpu {

/// Weights max(s p - q, 0) (core::scaled_residual_weight, one rounding); no q is the one-hot
/// draft e_x.
struct ScaledResidual {
  const float* p{};
  const float* q{};
  std::int32_t x = -1;
  double s = 1;
  std::int32_t n = 0;

  double at(std::int32_t i) const {
    if (q) return core::scaled_residual_weight(s, p[i], q[i]);
    return i == x ? core::scaled_residual_weight(s, p[i], 1.0) : s * p[i];
  }
  bool valid(std::int32_t i) const { return valid_probability(p[i]) && (!q || valid_probability(q[i])); }
};

namespace detail {

/// cpu::draw's functors over a ScaledResidual: the weights of 2W elements as double vectors (the
/// same bits as at()), the bits of every value read into `check`.
template <class Arch>
struct ScaledResidualLanes {
  using F = xsimd::batch<float, Arch>;
  using D = xsimd::batch<double, Arch>;
  static constexpr std::int32_t WF = F::size;

  const ScaledResidual& w;
  BitsMax<Arch> check;   // the bits of p | q: at or above +inf's when a value may be invalid
  BitsMax<Arch> p_bits;  // the largest p: a bound on the weights (s <= 1)

  SPECVERIFY_ALWAYS_INLINE void operator()(std::int32_t i, D& lo, D& hi) {
    const D s(w.s), zero(0.0);
    const F p = F::load_unaligned(w.p + i);
    if (w.q) {
      const F q = F::load_unaligned(w.q + i);
      check.add(p | q);
      p_bits.add(p);
      lo = lane_max(fused(s, widen_low(p), -widen_low(q)), zero);
      hi = lane_max(fused(s, widen_high(p), -widen_high(q)), zero);
      return;
    }
    p_bits.add(p);
    lo = s * widen_low(p);
    hi = s * widen_high(p);
    if (static_cast<std::uint32_t>(w.x - i) < static_cast<std::uint32_t>(WF)) {  // one-hot: w_x
      alignas(64) double lanes[WF];
      lo.store_aligned(lanes);
      hi.store_aligned(lanes + D::size);
      lanes[w.x - i] = w.at(w.x);
      lo = D::load_aligned(lanes);
      hi = D::load_aligned(lanes + D::size);
    }
  }

  /// Every value read valid, and a bound on the weights (s p <= p: s is at most 1), from the
  /// largest p over the whole row, as cpu::draw's probability rows.
  Checked<double> operator()() const {
    std::uint32_t largest = p_bits.value(), screen = w.q ? check.value() : largest;
    for (std::int32_t i = w.n - w.n % WF; i < w.n; ++i) {
      largest = std::max(largest, core::float_bits(w.p[i]));
      screen = std::max(screen, core::float_bits(w.p[i]) | (w.q ? core::float_bits(w.q[i]) : 0u));
    }
    if (screen >= BitsMax<Arch>::kInfBits) {
      for (std::int32_t i = 0; i < w.n; ++i) {
        if (!w.valid(i)) return {0.0, false};
      }
    }
    return {bound_from_bits(largest), true};
  }
};

}  // namespace detail

/// sum_v max(s p(v) - q(v), 0), and whether every value read is a valid probability.
template <class Arch = DefaultArch>
Checked<double> scaled_residual_mass(const ScaledResidual& w) {
  detail::ScaledResidualLanes<Arch> lanes{w, {}, {}};
  const auto one = [&](std::int32_t i) { return w.at(i); };
  ChunkSums sums;
  sum_chunks<Arch>(lanes, one, w.n, 1.0, sums);
  const Checked<double> bound = lanes();
  if (!bound.ok) return {0.0, false};
  if (core::fixed_in_domain(bound.value, w.n)) return {sums.total.value(), true};
  const double scale = core::fixed_scale(bound.value, w.n);
  sum_chunks<Arch>(lanes, one, w.n, scale, sums);
  return {sums.total.value() / scale, true};
}

/// The smallest i with w_0 + ... + w_i > u * sum(w) (cpu::draw); -1 when there is no mass.
template <class Arch = DefaultArch>
Checked<std::int32_t> scaled_residual_draw(const ScaledResidual& w, float u) {
  detail::ScaledResidualLanes<Arch> lanes{w, {}, {}};
  return cpu::draw<Arch>([&](std::int32_t i, auto& lo, auto& hi) SPECVERIFY_LAMBDA_INLINE { lanes(i, lo, hi); },
                         [&](std::int32_t i) { return w.at(i); }, [&] { return lanes(); }, w.n, u);
}

}  // namespace specverify::cpu
