// A node's residual over logits views (core/residual.hpp): the rows read through the views
// (cpu/logit_kernels.hpp's probs, p lane by lane with core::probability's bits), so a logits
// tree's rejected siblings and block verification over logits take the vector passes of
// cpu/residual_kernels.hpp, with the mass and the token of the scalar definition.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>

#include "specverify/core/logit_rows.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/cpu/logit_kernels.hpp"
#include "specverify/cpu/residual_kernels.hpp"

namespace specverify::cpu {

/// Logits views: the pre-pass validated every value, and p's largest value is 1 / norm (the max
/// weighs exactly 1; 1 on a greedy row, 0 on a row without mass), as LogitRows::max says.
template <class Arch, class Logit>
struct ResidualReader<Arch, core::LogitView<Logit>> {
  using View = core::LogitView<Logit>;
  using F = xsimd::batch<float, Arch>;

  float value(const View& view, std::int32_t v) const { return logits_detail::probability(view, v); }
  SPECVERIFY_ALWAYS_INLINE void read(const core::Residual<View>& r, std::int32_t i, F& p, F& q) const {
    p = logits_detail::probs<Arch>(r.p, i);
    q = r.has_q ? logits_detail::probs<Arch>(r.q, i) : F(0.0f);
  }
  Checked<float> largest_p(const core::Residual<View>& r, std::int32_t) const {
    const View& p = r.p;
    return {p.has_mass() ? (p.greedy ? 1.0f : p.inv_norm) : 0.0f, true};
  }
};

}  // namespace specverify::cpu
