// Statistical soak (ctest label `soak`, not in the default runs: `ctest --preset soak`).
//
// Standard is lossless: the first emitted token follows p_0, and the token after an accepted first
// draft follows p_1, whatever q is. Over many seeds, vocabularies (2 to 1000), chain lengths and
// kinds of draft (independent, reversed target, nearly equal, one-hot), each of those gets a
// chi-square test against p, and its p-value (regularized incomplete gamma, statistics.hpp) is
// collected. If verify is exact the p-values are U(0, 1): a Kolmogorov-Smirnov test says whether
// they are. A control rule that accepts slightly too often must fail the same test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "statistics.hpp"
#include "support.hpp"

namespace specverify {
namespace {

/// Accepts iff u q(x) < 1.1 p(x): a lossy rule, for the soak's control.
struct TooLenient {
  static constexpr Draw on_reject = Draw::residual;
  Decision decide(const Position& at) const { return Decision::exact(at.u * at.q_x < 1.1f * at.p_x); }
};

/// Chi-square p-value of counts against weights p, or NaN when p leaves nothing to test. Bins are
/// pooled, smallest expectation first, into groups expecting at least 100: the statistic is then
/// close to chi-square at any V, and its p-value close to continuous (with small expected counts
/// the p-values are lumpy, which a KS test over hundreds of them notices). A p with (nearly) all
/// its mass on one token gives a single group: no test, and no p-value, since counting it as
/// p = 1 would bias the set the KS test looks at.
double p_value(const std::vector<std::int64_t>& counts, const std::vector<float>& p) {
  const double total_p = std::accumulate(p.begin(), p.end(), 0.0);
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}));
  std::vector<std::size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] < p[b]; });
  std::vector<std::pair<double, double>> groups;  // (expected, observed)
  double e = 0, o = 0;
  for (const std::size_t i : order) {
    e += n * p[i] / total_p;
    o += static_cast<double>(counts[i]);
    if (e >= 100) {
      groups.emplace_back(e, o);
      e = o = 0;
    }
  }
  if (e > 0 || o > 0) {  // a remainder too small to stand alone joins the last group
    if (groups.empty()) return std::numeric_limits<double>::quiet_NaN();
    groups.back().first += e;
    groups.back().second += o;
  }
  if (groups.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  double statistic = 0;
  for (const auto& [expected, observed] : groups) {
    statistic += (observed - expected) * (observed - expected) / expected;
  }
  return testing::chi_square_p_value(statistic, static_cast<int>(groups.size()) - 1);
}

struct SoakResult {
  std::vector<double> p_values;
  int untestable = 0;  // p with one dominant token: a single pooled group, nothing to test
  testing::KolmogorovSmirnov ks;
};

template <class Rule>
SoakResult soak(const Rule& rule, int trials, std::int64_t samples, std::uint64_t seed) {
  constexpr std::int32_t kPerCall = 500;
  const std::int32_t vocabularies[] = {2, 3, 8, 16, 50, 200, 1000};
  SoakResult result;
  for (int trial = 0; trial < trials; ++trial) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(trial));
    const std::int32_t V = vocabularies[rng() % 7];
    const std::int32_t K = 1 + static_cast<std::int32_t>(rng() % 4);
    const int draft_kind = static_cast<int>(rng() % 4);
    const double scale = 0.5 + 2.0 * std::uniform_real_distribution<double>(0, 1)(rng);
    std::vector<std::vector<float>> ps, qs;
    for (std::int32_t j = 0; j <= K; ++j) ps.push_back(testing::random_distribution(V, rng, scale));
    for (std::int32_t j = 0; j < K; ++j) {
      std::vector<float> q;
      switch (draft_kind) {
        case 0: q = testing::random_distribution(V, rng, scale); break;
        case 1: q.assign(ps[j].rbegin(), ps[j].rend()); break;  // LESSONS: ~73% rejections
        case 2: {  // close to p: mostly accepted, a thin residual
          auto logits = testing::random_logits(V, rng, 0.2);
          std::vector<double> lp(V);
          for (std::int32_t v = 0; v < V; ++v) lp[v] = std::log(std::max(ps[j][v], 1e-30f)) + logits[v];
          q = testing::softmax(lp);
          break;
        }
        default: q.assign(static_cast<std::size_t>(V), 0.0f); q[rng() % V] = 1.0f;  // one-hot
      }
      qs.push_back(q);
    }
    const bool one_hot = draft_kind == 3;
    testing::Chains chains(V, one_hot);
    std::vector<std::int32_t> xs(static_cast<std::size_t>(K));
    for (std::int32_t b = 0; b < kPerCall; ++b) chains.add(xs, ps, qs);
    std::vector<std::discrete_distribution<std::int32_t>> draft_dist;
    for (const auto& q : qs) draft_dist.emplace_back(q.begin(), q.end());

    std::vector<std::int64_t> first(static_cast<std::size_t>(V)), second(static_cast<std::size_t>(V));
    for (std::int64_t call = 0; call * kPerCall < samples; ++call) {
      for (std::int32_t b = 0; b < kPerCall; ++b) {
        for (std::int32_t j = 0; j < K; ++j) chains.tokens[b * K + j] = draft_dist[j](rng);
      }
      ChainOutput out = chains.output();
      verify(rule, chains.batch(), {seed + static_cast<std::uint64_t>(trial), static_cast<std::uint64_t>(call)}, out);
      for (std::int32_t b = 0; b < kPerCall; ++b) {
        ++first[chains.token(b, 0)];
        if (chains.accepted[b] >= 1) ++second[chains.token(b, 1)];
      }
    }
    const auto keep = [&](double p) {
      if (std::isnan(p)) ++result.untestable; else result.p_values.push_back(p);
    };
    keep(p_value(first, ps[0]));
    if (std::accumulate(second.begin(), second.end(), std::int64_t{0}) >= 1000) keep(p_value(second, ps[1]));
  }
  result.ks = testing::ks_uniform(result.p_values);
  return result;
}

TEST(Soak, StandardChiSquarePValuesAreUniform) {
  const SoakResult r = soak(Standard{}, 3000, 20000, 1);
  const double smallest = *std::min_element(r.p_values.begin(), r.p_values.end());
  std::printf("Standard: %zu chi-square p-values (%d untestable), KS D = %.4f, KS p = %.4f, "
              "smallest p = %.2e\n", r.p_values.size(), r.untestable, r.ks.statistic, r.ks.p_value, smallest);
  RecordProperty("ks_statistic", std::to_string(r.ks.statistic));
  RecordProperty("ks_p_value", std::to_string(r.ks.p_value));
  EXPECT_GT(r.p_values.size(), 4000u);
  EXPECT_GT(r.ks.p_value, 1e-3);
  // With ~4400 p-values, one below 1e-7 happens by chance with probability < 1e-3.
  EXPECT_GT(smallest, 1e-7);
}

TEST(Soak, ControlRuleThatAcceptsTooOftenFails) {
  const SoakResult r = soak(TooLenient{}, 60, 20000, 2);
  std::printf("TooLenient control: %zu p-values, KS D = %.4f, KS p = %.2e\n", r.p_values.size(),
              r.ks.statistic, r.ks.p_value);
  EXPECT_LT(r.ks.p_value, 1e-3);
}

}  // namespace
}  // namespace specverify
