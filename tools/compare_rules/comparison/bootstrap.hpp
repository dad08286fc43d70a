// Confidence intervals by the percentile bootstrap over independent units (prompts, or the fixed
// quality contexts): resample the units with replacement, recompute the statistic, take the
// (1 - level)/2 and (1 + level)/2 quantiles of the recomputed values.
//
// Why percentile, not BCa: the statistics are ratios of sums over prompts (tokens per call,
// speedup) and means over contexts (TV), smooth and close to symmetric at our sample sizes, where
// the percentile interval is already first-order accurate; it respects the statistic's range
// (tokens per call >= 1, TV >= 0) and transformations, and needs nothing but the resamples. BCa's
// correction is second order, and its acceleration comes from a jackknife over a few dozen prompts
// that is itself noisy. tools/compare_rules/test_comparison.cpp checks the coverage on a skewed known
// distribution. Deterministic: the resampled index sets come from one seeded mt19937_64 and
// uniform_int via rng() % n (no implementation-defined distribution), so a seed gives the same
// interval on every platform.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace specverify::comparison {

struct Interval {
  double lo = 0, hi = 0;
  bool contains(double x) const { return lo <= x && x <= hi; }
  bool above(double x) const { return lo > x; }  // the whole interval lies above x
  bool below(double x) const { return hi < x; }
};

struct BootstrapOptions {
  std::int32_t resamples = 2000;
  double level = 0.95;
  std::uint64_t seed = 1;
};

/// The multiplicity of each of n units in each of `resamples` resamples: [resamples][n]. Sharing
/// one draw between statistics of the same units (two rules run on the same prompts) makes their
/// intervals paired, so a difference or ratio of them gets its own interval.
inline std::vector<std::vector<std::int32_t>> bootstrap_draws(std::int32_t n, const BootstrapOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<std::int32_t>> draws(std::size_t(o.resamples), std::vector<std::int32_t>(std::size_t(n), 0));
  for (auto& d : draws)
    for (std::int32_t i = 0; i < n; ++i) ++d[std::size_t(rng() % std::uint64_t(n))];
  return draws;
}

/// Percentile interval of a statistic of the units' multiplicities, over the given draws.
template <class Statistic>
Interval percentile_interval(const std::vector<std::vector<std::int32_t>>& draws, Statistic statistic,
                             double level = 0.95) {
  std::vector<double> values;
  values.reserve(draws.size());
  for (const auto& d : draws) values.push_back(statistic(d));
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  // Linear interpolation between order statistics (type 7 quantiles).
  const auto quantile = [&](double q) {
    const double h = q * double(values.size() - 1);
    const std::size_t i = std::size_t(std::floor(h));
    const std::size_t j = std::min(i + 1, values.size() - 1);
    return values[i] + (h - double(i)) * (values[j] - values[i]);
  };
  return {quantile((1 - level) / 2), quantile((1 + level) / 2)};
}

/// Weighted sums for ratio statistics: sum_i m_i a_i / sum_i m_i b_i.
inline double weighted_ratio(const std::vector<std::int32_t>& m, const std::vector<double>& a,
                             const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    num += m[i] * a[i];
    den += m[i] * b[i];
  }
  return den > 0 ? num / den : 0.0;
}

/// Weighted mean: sum_i m_i a_i / sum_i m_i.
inline double weighted_mean(const std::vector<std::int32_t>& m, const std::vector<double>& a) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    num += m[i] * a[i];
    den += m[i];
  }
  return den > 0 ? num / den : 0.0;
}

}  // namespace specverify::comparison
