// The CPU backend's row operations for the core's walk over probability rows (float, xsimd).
#pragma once

#include <cstdint>

#include "specverify/core/residual.hpp"
#include "specverify/cpu/divergence_kernels.hpp"
#include "specverify/cpu/residual_kernels.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/rule.hpp"

namespace specverify::cpu {

/// Row operations over rows of `n` floats, as core::walk expects them. A probability row needs no
/// pre-pass: open() hands the pointer back.
template <class Arch = DefaultArch>
struct Rows {
  using View = const float*;
  std::int32_t n;

  View open(View row) const { return row; }
  float value(View row, std::int32_t v) const { return row[v]; }
  Checked<float> max(View p) const { return row_max<Arch>(p, n); }
  Checked<std::int32_t> argmax(View p) const { return row_argmax<Arch>(p, n); }
  Checked<float> entropy(View p) const { return row_entropy<Arch>(p, n); }
  Checked<float> divergence(Divergence d, View p, const View* q, std::int32_t x) const {
    return row_divergence<Arch>(d, p, q ? *q : nullptr, x, n);
  }
  Checked<std::int32_t> draw_residual(View p, const View* q, std::int32_t x, float u) const {
    return cpu::draw<Arch>(Weights::residual(p, q ? *q : nullptr, x, n), u);
  }
  Checked<std::int32_t> draw_target(View p, float u) const {
    return cpu::draw<Arch>(Weights::target(p, n), u);
  }

  // A tree node's residual after rejected siblings (cpu/residual_kernels.hpp): one vector pass,
  // the scalar definition's weights.
  Checked<double> mass(const core::Residual<View>& r, std::int32_t x) const {
    return residual_mass<Arch>(r, x, n);
  }
  Checked<std::int32_t> draw(const core::Residual<View>& r, std::int32_t x, float u) const {
    return residual_draw<Arch>(r, x, u, n);
  }
};

}  // namespace specverify::cpu
