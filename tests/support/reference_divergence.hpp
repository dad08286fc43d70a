// Plain long double references for the row statistics (tests and benchmarks only): one element at
// a time, straight from the definitions in docs/api.md "Divergence", with an explicit one-hot q where needed.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "specverify/rule.hpp"

namespace specverify::reference {

/// The statistic, and S: the sum of the magnitudes of the terms it adds up, scaled like it
/// (the error bound of divergence_kernels.hpp is stated in terms of S).
struct Value {
  long double value = 0;
  long double magnitude = 0;
};

inline Value entropy(const float* p, std::int64_t n) {
  Value v;
  for (std::int64_t i = 0; i < n; ++i) {
    if (p[i] > 0) {
      const long double t = -static_cast<long double>(p[i]) * std::log(static_cast<long double>(p[i]));
      v.value += t;
      v.magnitude += std::fabs(t);
    }
  }
  return v;
}

/// a log(a/b) with 0 log(0/b) = 0 and a log(a/0) = inf for a > 0.
inline long double xlogy_ratio(long double a, long double b) {
  if (a == 0) return 0;
  if (b == 0) return std::numeric_limits<long double>::infinity();
  return a * std::log(a / b);
}

inline Value divergence(Divergence d, const float* p, const float* q, std::int64_t n) {
  Value v;
  long double factor = 1;
  for (std::int64_t i = 0; i < n; ++i) {
    const long double pi = p[i], qi = q[i], mi = (pi + qi) / 2;
    long double t[2] = {0, 0};
    switch (d) {
      case Divergence::kl_target_draft:
        t[0] = xlogy_ratio(pi, qi);
        break;
      case Divergence::kl_draft_target:
        t[0] = xlogy_ratio(qi, pi);
        break;
      case Divergence::js:
        factor = 0.5L;
        t[0] = xlogy_ratio(pi, mi);
        t[1] = xlogy_ratio(qi, mi);
        break;
      case Divergence::js_fsd:
        factor = 0.5L;
        t[0] = xlogy_ratio(mi, pi);
        t[1] = xlogy_ratio(mi, qi);
        break;
      case Divergence::tv:
        factor = 0.5L;
        t[0] = std::fabs(pi - qi);
        break;
    }
    v.value += t[0] + t[1];
    v.magnitude += std::fabs(t[0]) + std::fabs(t[1]);
  }
  v.value *= factor;
  v.magnitude *= factor;
  return v;
}

/// The same statistic by a plain float loop with std::log, as an engine would write it without
/// SIMD (the benchmark's scalar baseline).
inline float divergence_scalar(Divergence d, const float* p, const float* q, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float pi = p[i], qi = q[i], mi = 0.5f * (pi + qi);
    switch (d) {
      case Divergence::kl_target_draft:
        if (pi > 0) sum += pi * std::log(pi / qi);
        break;
      case Divergence::kl_draft_target:
        if (qi > 0) sum += qi * std::log(qi / pi);
        break;
      case Divergence::js:
        if (pi > 0) sum += 0.5f * pi * std::log(pi / mi);
        if (qi > 0) sum += 0.5f * qi * std::log(qi / mi);
        break;
      case Divergence::js_fsd:
        if (mi > 0) sum += 0.5f * mi * (std::log(mi / pi) + std::log(mi / qi));
        break;
      case Divergence::tv:
        sum += 0.5f * std::fabs(pi - qi);
        break;
    }
  }
  return static_cast<float>(sum);
}

}  // namespace specverify::reference
