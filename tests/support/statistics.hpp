// p-values for the statistical tests: chi-square through the regularized upper incomplete gamma
// function, and the one-sample Kolmogorov-Smirnov test against U(0, 1).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace specverify::testing {

/// Q(a, x) = Gamma(a, x) / Gamma(a), a > 0, x >= 0. The series for P = 1 - Q where it converges
/// fast (x < a + 1), else the Lentz continued fraction for Q (Numerical Recipes 6.2); relative
/// accuracy about 1e-14 either way, so tiny p-values are not lost to 1 - P cancellation.
inline double regularized_gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefactor = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && std::fabs(term) > std::fabs(sum) * 1e-16; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_prefactor));
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

/// P(X >= statistic) for X chi-square with df degrees of freedom.
inline double chi_square_p_value(double statistic, int df) {
  return regularized_gamma_q(0.5 * df, 0.5 * statistic);
}

/// P(K > lambda) for the Kolmogorov distribution: 2 sum_k (-1)^(k-1) exp(-2 k^2 lambda^2).
inline double kolmogorov_survival(double lambda) {
  if (lambda < 0.2) return 1.0;  // the series converges slowly there, and the answer is 1 to 1e-9
  double sum = 0;
  for (int k = 1; k <= 100; ++k) {
    const double term = std::exp(-2.0 * k * k * lambda * lambda);
    sum += (k % 2 ? 2.0 : -2.0) * term;
    if (term < 1e-17) break;
  }
  return std::min(1.0, std::max(0.0, sum));
}

struct KolmogorovSmirnov {
  double statistic = 0;  // sup |F_n(x) - x|
  double p_value = 1;
};

/// One-sample KS test of `values` against U(0, 1). The p-value uses the asymptotic Kolmogorov
/// distribution with Stephens' small-sample correction (accurate to ~1% for n >= 5).
inline KolmogorovSmirnov ks_uniform(std::vector<double> values) {
  KolmogorovSmirnov r;
  const std::size_t n = values.size();
  if (n == 0) return r;
  std::sort(values.begin(), values.end());
  for (std::size_t i = 0; i < n; ++i) {
    const double v = std::min(1.0, std::max(0.0, values[i]));
    r.statistic = std::max({r.statistic, (i + 1.0) / n - v, v - static_cast<double>(i) / n});
  }
  const double sn = std::sqrt(static_cast<double>(n));
  r.p_value = kolmogorov_survival((sn + 0.12 + 0.11 / sn) * r.statistic);
  return r;
}

}  // namespace specverify::testing
