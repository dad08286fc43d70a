// The cost model (Leviathan et al.) and the quality metric: how far a rule's emitted-token
// distribution is from the target's own, measured over many trials on fixed contexts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "comparison/decode_loop.hpp"

namespace specverify::comparison {

/// Leviathan et al. (2023), eq. for the expected walltime improvement with acceptance rate alpha,
/// gamma drafts per step and draft/target cost ratio c: (1 - a^(g+1)) / ((1 - a)(g c + 1)).
inline double leviathan_speedup(double alpha, double gamma, double c) {
  const double tokens = alpha >= 1.0 ? gamma + 1.0 : (1.0 - std::pow(alpha, gamma + 1.0)) / (1.0 - alpha);
  return tokens / (gamma * c + 1.0);
}

/// The same cost model from measured counts: every target call costs 1, every drafted token c,
/// plain decoding costs 1 per token. Verifier and head costs are taken as free.
inline double measured_speedup(std::int64_t generated, std::int64_t target_calls, std::int64_t drafted, double c) {
  const double cost = double(target_calls) + c * double(drafted);
  return cost > 0 ? double(generated) / cost : 0.0;
}

/// Total variation between an empirical distribution (counts over n draws) and p, over bins:
/// the top `top` tokens of p one by one and all others as one bin. Binning keeps the noise floor
/// of n draws low on a heavy tail; it can only underestimate the full TV.
class BinnedTv {
 public:
  BinnedTv(const float* p, std::int32_t V, std::int32_t top) : bin_(static_cast<std::size_t>(V), top) {
    std::vector<std::int32_t> order(static_cast<std::size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    top = std::min(top, V);
    std::partial_sort(order.begin(), order.begin() + top, order.end(),
                      [&](std::int32_t a, std::int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    mass_.assign(static_cast<std::size_t>(top) + 1, 0.0);
    for (std::int32_t i = 0; i < top; ++i) bin_[std::size_t(order[std::size_t(i)])] = i;
    double total = 0;
    for (std::int32_t v = 0; v < V; ++v) total += p[v];
    for (std::int32_t v = 0; v < V; ++v) mass_[std::size_t(bin_[std::size_t(v)])] += p[v] / total;
  }
  std::size_t bins() const { return mass_.size(); }
  std::int32_t bin(std::int32_t token) const { return bin_[std::size_t(token)]; }
  double tv(const std::vector<std::int64_t>& counts) const {
    const double n = double(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}));
    double d = 0;
    for (std::size_t i = 0; i < mass_.size(); ++i) d += std::abs(double(counts[i]) / n - mass_[i]);
    return d / 2;
  }

 private:
  std::vector<std::int32_t> bin_;
  std::vector<double> mass_;
};

/// One fixed context for quality trials: p and q after it, each trial a one-draft chain.
struct QualityContext {
  std::vector<float> p;  // [2][V]: p, then the bonus row (a copy; the first token never reads it)
  std::vector<float> q;  // [V]
};

struct Quality {
  double tv = 0;          // mean binned TV of the first emitted token's distribution from p
  double noise_floor = 0; // the same for as many draws straight from p
  std::vector<double> tv_each, floor_each;  // per context: the units the intervals resample
};

/// `trials` one-draft chains per context: x ~ q, verify, record the first emitted token.
template <class MakeRule>
Quality measure_quality(const std::vector<QualityContext>& contexts, std::int32_t V, std::int32_t trials,
                        std::int32_t top, const DraftPolicy& policy, Heads* heads, MakeRule make_rule,
                        std::uint64_t seed) {
  Quality out;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<float> f(DraftFeatures::kDim);
  for (const QualityContext& c : contexts) {
    const BinnedTv metric(c.p.data(), V, top);
    std::vector<std::int64_t> emitted(metric.bins(), 0), direct(metric.bins(), 0);
    const DraftFeatures features(c.q.data(), V);
    std::vector<double> cdf_q(static_cast<std::size_t>(V)), cdf_p(static_cast<std::size_t>(V));
    std::partial_sum(c.q.begin(), c.q.end(), cdf_q.begin(), [](double a, float b) { return a + b; });
    std::partial_sum(c.p.begin(), c.p.begin() + V, cdf_p.begin(), [](double a, float b) { return a + b; });
    const auto draw = [&](const std::vector<double>& cdf) {
      const double u = uniform(rng) * cdf.back();
      return static_cast<std::int32_t>(std::min<std::ptrdiff_t>(
          std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin(), V - 1));
    };
    const std::int32_t offsets[2] = {0, 1};
    for (std::int32_t t = 0; t < trials; ++t) {
      std::int32_t x = draw(cdf_q), token[2], accepted = 0;
      features.write(c.q.data(), x, 0, f.data());
      const float score = draft_score(policy, heads, f.data());
      const ChainBatch<float> batch{1, V, offsets, &x, c.p.data(), c.q.data()};
      verify(make_rule(&score), batch, Randomness{seed, std::uint64_t(t)}, ChainOutput{token, 2, &accepted},
             CpuOptions{1});
      ++emitted[std::size_t(metric.bin(token[0]))];
      ++direct[std::size_t(metric.bin(draw(cdf_p)))];
    }
    out.tv_each.push_back(metric.tv(emitted));
    out.floor_each.push_back(metric.tv(direct));
    out.tv += out.tv_each.back() / double(contexts.size());
    out.noise_floor += out.floor_each.back() / double(contexts.size());
  }
  return out;
}

}  // namespace specverify::comparison
