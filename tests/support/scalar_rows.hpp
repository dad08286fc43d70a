// A plain scalar backend for the core: the same walk, with every row operation a simple
// loop (std::log, double sums, no SIMD). bench/bench_rules.cpp times the SIMD row work against it
// (its x_scalar counter: "the plain scalar implementation").
#pragma once

#include <cmath>
#include <cstdint>

#include "reference_divergence.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/cpu/rows.hpp"

namespace specverify::testing {

struct ScalarRows {
  std::int32_t n;
  cpu::SiblingRoom room{};

  using Index = cpu::Checked<std::int32_t>;
  using Value = cpu::Checked<float>;
  using View = const float*;

  View open(View row) const { return row; }
  float value(const float* row, std::int32_t v) const { return row[v]; }
  Value max(const float* p) const {
    Value r{0.0f, true};
    for (std::int32_t i = 0; i < n; ++i) {
      r.ok = r.ok && cpu::valid_probability(p[i]);
      if (p[i] > r.value) r.value = p[i];
    }
    return r;
  }
  Index argmax(const float* p) const {
    const Value m = max(p);
    if (!m.ok || !(m.value > 0)) return {-1, m.ok};
    std::int32_t i = 0;
    while (p[i] != m.value) ++i;
    return {i, true};
  }
  Value entropy(const float* p) const {
    Value r;
    double h = 0;
    for (std::int32_t i = 0; i < n; ++i) {
      r.ok = r.ok && cpu::valid_probability(p[i]);
      if (p[i] > 0) h -= p[i] * std::log(p[i]);
    }
    r.value = static_cast<float>(h);
    return r;
  }
  Value divergence(Divergence d, const float* p, const View* q, std::int32_t) const {
    return {reference::divergence_scalar(d, p, q ? *q : nullptr, n), true};
  }
  Index draw_residual(const float* p, const View* q, std::int32_t x, float u) const {
    return draw(cpu::Weights::residual(p, q ? *q : nullptr, x, n), u);
  }
  cpu::Checked<double> mass(const core::Residual<View>& r, std::int32_t x) const {
    const auto m = core::residual_mass(*this, r, x);
    return {m.value, m.ok};
  }
  Index draw(const core::Residual<View>& r, std::int32_t x, float u) const {
    const auto t = core::residual_draw(*this, r, x, u);
    return {t.value, t.ok};
  }
  Index draw_target(const float* p, float u) const { return draw(cpu::Weights::target(p, n), u); }
  core::Siblings siblings(std::int32_t count) { return room.siblings(count); }

 private:
  Index draw(const cpu::Weights& w, float u) const {
    double total = 0;
    for (std::int32_t i = 0; i < n; ++i) total += w.at(i);
    if (!(total > 0)) return {-1, true};
    double running = 0;
    std::int32_t last = -1;
    for (std::int32_t i = 0; i < n; ++i) {
      const double wi = w.at(i);
      if (wi > 0) last = i;
      running += wi;
      if (wi > 0 && running > u * total) return {i, true};
    }
    return {last, true};
  }
};

}  // namespace specverify::testing
