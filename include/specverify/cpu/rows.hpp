// The CPU backend's row operations for the core's walk (float rows, xsimd kernels).
#pragma once

#include <cstdint>

#include "specverify/cpu/divergence_kernels.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/rule.hpp"

namespace specverify::cpu {

/// Row operations over rows of `n` floats, as core::walk_chain expects them.
template <class Arch = DefaultArch>
struct Rows {
  std::int32_t n;

  float value(const float* row, std::int32_t v) const { return row[v]; }
  Checked<float> max(const float* p) const { return row_max<Arch>(p, n); }
  Checked<std::int32_t> argmax(const float* p) const { return row_argmax<Arch>(p, n); }
  Checked<float> entropy(const float* p) const { return row_entropy<Arch>(p, n); }
  Checked<float> divergence(Divergence d, const float* p, const float* q, std::int32_t x) const {
    return row_divergence<Arch>(d, p, q, x, n);
  }
  Checked<std::int32_t> draw_residual(const float* p, const float* q, std::int32_t x,
                                      float u) const {
    return draw<Arch>(Weights::residual(p, q, x, n), u);
  }
  Checked<std::int32_t> draw_target(const float* p, float u) const {
    return draw<Arch>(Weights::target(p, n), u);
  }
};

}  // namespace specverify::cpu
