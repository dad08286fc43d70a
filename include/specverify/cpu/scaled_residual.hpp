// CPU row work for a residual no sibling has changed yet (core::Residual::plain()): the mass and
// the draw of max(s p - q, 0), with s = Residual::p_scale (block verification's p_tau; 1 for a
// tree node's first sibling) and q one-hot on x where there is no draft row. Vectorised like
// cpu::draw: weights summed in double lanes per chunk, the crossing chunk rescanned in order.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>

#include "specverify/core/row_math.hpp"
#include "specverify/cpu/row_kernels.hpp"

namespace specverify::cpu {

/// Weights max(s p - q, 0); no q is the one-hot draft e_x.
struct ScaledResidual {
  const float* p{};
  const float* q{};
  std::int32_t x = -1;
  double s = 1;
  std::int32_t n = 0;

  double at(std::int32_t i) const {
    const double sp = s * p[i];
    if (q) return core::residual_weight(sp, q[i]);
    return i == x ? core::residual_weight(sp, 1.0) : sp;
  }
  bool valid(std::int32_t i) const { return valid_probability(p[i]) && (!q || valid_probability(q[i])); }
};

namespace detail {

/// Sum of the weights in [begin, end); the bits of every vector read go into `check` and the
/// tail's validity into `ok_tail` (the caller decides validity once, after all chunks).
template <class Arch>
double scaled_chunk_sum(const ScaledResidual& w, std::int32_t begin, std::int32_t end, BitsMax<Arch>& check,
                        bool& ok_tail) {
  using F = xsimd::batch<float, Arch>;
  using D = xsimd::batch<double, Arch>;
  constexpr std::int32_t WF = F::size, W = D::size;
  const D zero(0.0), s(w.s);
  D lo(0.0), hi(0.0);
  std::int32_t i = begin;
  if (w.q) {
    for (; i + WF <= end; i += WF) {
      check.add(F::load_unaligned(w.p + i) | F::load_unaligned(w.q + i));
      lo += lane_max(s * D::load_unaligned(w.p + i) - D::load_unaligned(w.q + i), zero);
      hi += lane_max(s * D::load_unaligned(w.p + i + W) - D::load_unaligned(w.q + i + W), zero);
    }
  } else {
    for (; i + WF <= end; i += WF) {
      check.add(F::load_unaligned(w.p + i));
      lo += s * D::load_unaligned(w.p + i);
      hi += s * D::load_unaligned(w.p + i + W);
    }
  }
  const std::int32_t body_end = i;
  double sum = lane_sum(lo + hi);
  for (; i < end; ++i) {
    ok_tail = ok_tail && w.valid(i);
    sum += w.at(i);
  }
  if (!w.q && w.x >= begin && w.x < body_end && valid_probability(w.p[w.x])) {
    sum += w.at(w.x) - w.s * w.p[w.x];  // the vector body summed s p_x: its weight replaces it
    sum = sum > 0.0 ? sum : 0.0;
  }
  return sum;
}

}  // namespace detail

/// sum_v max(s p(v) - q(v), 0), and whether every value read is a valid probability.
template <class Arch = DefaultArch>
Checked<double> scaled_residual_mass(const ScaledResidual& w) {
  const std::int32_t chunk = core::chunk_length(w.n);
  BitsMax<Arch> check;
  bool ok_tail = true;
  double total = 0.0;
  for (std::int32_t begin = 0; begin < w.n; begin += chunk) {
    total += detail::scaled_chunk_sum<Arch>(w, begin, w.n - begin > chunk ? begin + chunk : w.n, check, ok_tail);
  }
  if (!ok_tail || check.value() >= BitsMax<Arch>::kInfBits) {
    for (std::int32_t i = 0; i < w.n; ++i) {
      if (!w.valid(i)) return {0.0, false};
    }
  }
  return {total, true};
}

/// The smallest i with w_0 + ... + w_i > u * sum(w) (cpu::draw's definition and chunking); -1
/// when there is no mass.
template <class Arch = DefaultArch>
Checked<std::int32_t> scaled_residual_draw(const ScaledResidual& w, float u) {
  const std::int32_t chunk = core::chunk_length(w.n);
  double sums[kMaxChunks];
  BitsMax<Arch> check;
  bool ok_tail = true;
  double total = 0.0;
  std::int32_t chunks = 0;
  for (std::int32_t begin = 0; begin < w.n; begin += chunk, ++chunks) {
    sums[chunks] = detail::scaled_chunk_sum<Arch>(w, begin, w.n - begin > chunk ? begin + chunk : w.n, check, ok_tail);
    total += sums[chunks];
  }
  if (!ok_tail || check.value() >= BitsMax<Arch>::kInfBits) {
    for (std::int32_t i = 0; i < w.n; ++i) {
      if (!w.valid(i)) return {-1, false};
    }
  }
  if (!(total > 0.0)) return {-1, true};

  const double threshold = static_cast<double>(u) * total;
  double before = 0.0;
  std::int32_t c = 0;
  while (c + 1 < chunks && !(before + sums[c] > threshold)) before += sums[c++];
  const std::int32_t begin = c * chunk, end = begin + chunk < w.n ? begin + chunk : w.n;
  std::int32_t last_positive = -1;
  for (std::int32_t i = begin; i < end; ++i) {
    const double wi = w.at(i);
    if (wi > 0.0) {
      before += wi;
      last_positive = i;
      if (before > threshold) return {i, true};
    }
  }
  // Rounding between the lane sums and this ordered rescan: the crossing is the last positive
  // weight, in this chunk or before it.
  for (std::int32_t i = begin - 1; last_positive < 0 && i >= 0; --i) {
    if (w.at(i) > 0.0) last_positive = i;
  }
  return {last_positive, true};
}

}  // namespace specverify::cpu
