// Row entropy and divergences (scalar placeholder until the fused xsimd kernels land).
#pragma once

#include <cmath>
#include <limits>

#include "specverify/cpu/row_kernels.hpp"
#include "specverify/rule.hpp"

namespace specverify::cpu {

template <class Arch = DefaultArch>
Checked<float> row_entropy(const float* p, std::int32_t n) {
  Checked<float> r;
  double h = 0;
  for (std::int32_t i = 0; i < n; ++i) {
    r.ok = r.ok && valid_probability(p[i]);
    if (p[i] > 0) h -= double(p[i]) * std::log(double(p[i]));
  }
  r.value = float(h);
  return r;
}

template <class Arch = DefaultArch>
Checked<float> row_divergence(Divergence d, const float* p, const float* q, std::int32_t x,
                              std::int32_t n) {
  Checked<float> r;
  const auto kl = [](double a, double b) {
    if (a <= 0) return 0.0;
    if (b <= 0) return std::numeric_limits<double>::infinity();
    return a * std::log(a / b);
  };
  double s = 0;
  for (std::int32_t i = 0; i < n; ++i) {
    const double pi = p[i], qi = q ? q[i] : (i == x ? 1.0 : 0.0);
    r.ok = r.ok && valid_probability(p[i]) && (!q || valid_probability(q[i]));
    const double m = 0.5 * (pi + qi);
    switch (d) {
      case Divergence::kl_target_draft: s += kl(pi, qi); break;
      case Divergence::kl_draft_target: s += kl(qi, pi); break;
      case Divergence::js: s += 0.5 * (kl(pi, m) + kl(qi, m)); break;
      case Divergence::js_fsd: s += 0.5 * (kl(m, pi) + kl(m, qi)); break;
      case Divergence::tv: s += 0.5 * std::fabs(pi - qi); break;
    }
  }
  r.value = float(s);
  return r;
}

}  // namespace specverify::cpu
