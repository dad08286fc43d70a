// The test-side statistics (statistics.hpp) against published values, so the soak's verdicts rest
// on a checked chi-square p-value and KS test.
#include "statistics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace specverify::testing {
namespace {

TEST(Statistics, ChiSquarePValuesMatchTables) {
  // Upper 5%, 1% and 0.1% points of chi-square (Abramowitz and Stegun, table 26.8).
  const struct {
    double x;
    int df;
    double p;
  } table[] = {{3.841459, 1, 0.05}, {6.634897, 1, 0.01}, {10.827566, 1, 0.001},
               {18.307038, 10, 0.05}, {23.209251, 10, 0.01}, {29.588298, 10, 0.001},
               {124.342113, 100, 0.05}, {135.806723, 100, 0.01}, {149.449252, 100, 0.001},
               {1074.679449, 1000, 0.05}};
  for (const auto& t : table) EXPECT_NEAR(chi_square_p_value(t.x, t.df), t.p, t.p * 1e-5) << t.df;
  // df = 2 is exponential: Q(1, x/2) = exp(-x/2), deep into the tail too.
  for (const double x : {0.1, 1.0, 10.0, 100.0, 1000.0}) {
    EXPECT_NEAR(chi_square_p_value(x, 2), std::exp(-x / 2), std::exp(-x / 2) * 1e-12) << x;
  }
  EXPECT_EQ(chi_square_p_value(0.0, 5), 1.0);
  // The median of chi-square(df) is about df (1 - 2/(9 df))^3.
  EXPECT_NEAR(chi_square_p_value(50 * std::pow(1 - 2.0 / 450, 3), 50), 0.5, 2e-3);
}

TEST(Statistics, KolmogorovSmirnovAcceptsUniformAndRejectsSkewed) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> uniform(2000), skewed(2000);
  for (std::size_t i = 0; i < uniform.size(); ++i) {
    uniform[i] = u(rng);
    skewed[i] = std::pow(u(rng), 1.2);  // mass moved towards 0
  }
  EXPECT_GT(ks_uniform(uniform).p_value, 0.01);
  EXPECT_LT(ks_uniform(skewed).p_value, 1e-6);
  // The Kolmogorov distribution's upper 5%, 1% and 0.1% points.
  EXPECT_NEAR(kolmogorov_survival(1.3581), 0.05, 1e-4);
  EXPECT_NEAR(kolmogorov_survival(1.6276), 0.01, 1e-4);
  EXPECT_NEAR(kolmogorov_survival(1.9495), 0.001, 1e-5);
  EXPECT_NEAR(ks_uniform({0.5}).statistic, 0.5, 1e-15);
  std::vector<double> grid;
  for (int i = 0; i < 100; ++i) grid.push_back((i + 0.5) / 100);  // as even as can be: D = 0.005
  EXPECT_NEAR(ks_uniform(grid).statistic, 0.005, 1e-12);
  EXPECT_EQ(ks_uniform(grid).p_value, 1.0);
}

}  // namespace
}  // namespace specverify::testing
