// The cost model (Leviathan et al.) and the quality metric: how far a rule's emitted-token
// distribution is from the target's own, measured over many trials on fixed contexts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
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

/// The widest one-level tree the quality trials draft.
constexpr std::int32_t kMaxQualityWidth = 4;

/// One fixed context for quality trials, with what every rule's trials share, built once.
struct QualityContext {
  std::int32_t V = 0;
  std::vector<float> p;  // [1 + kMaxQualityWidth][V]: p, then copies (rows after a draft: the first token never reads them)
  std::vector<float> q;  // [1 + kMaxQualityWidth][V]: q, then zeros (a one-level tree's leaves: never read)
  std::vector<double> cdf_p, cdf_q;
  BinnedTv metric;

  /// p and q after the context (V entries each); `top`: the TV metric's bins.
  QualityContext(const float* p_row, const float* q_row, std::int32_t vocab, std::int32_t top)
      : V(vocab), p(std::size_t(1 + kMaxQualityWidth) * std::size_t(vocab)),
        q(p.size(), 0.0f), cdf_p(std::size_t(vocab)), cdf_q(std::size_t(vocab)), metric(p_row, vocab, top) {
    for (std::int32_t i = 0; i <= kMaxQualityWidth; ++i) std::copy_n(p_row, V, p.begin() + std::ptrdiff_t(i) * V);
    std::copy_n(q_row, V, q.begin());
    std::partial_sum(q_row, q_row + V, cdf_q.begin(), [](double a, float b) { return a + b; });
    std::partial_sum(p_row, p_row + V, cdf_p.begin(), [](double a, float b) { return a + b; });
  }
};

struct Quality {
  double tv = 0;          // mean binned TV of the first emitted token's distribution from p
  double noise_floor = 0; // the same for as many draws straight from p
  std::vector<double> tv_each, floor_each;  // per context: the units the intervals resample
};

/// `trials` trials per context, each recording the first emitted token: a one-draft chain (x ~ q,
/// verify), or for a tree policy a one-level tree of the policy's first width, its children
/// drafted as declared (top-k of q; i.i.d. from q; from q without the earlier siblings, by
/// redrawing a repeat, which is exactly that distribution).
template <class MakeRule>
Quality measure_quality(const std::vector<QualityContext>& contexts, std::int32_t trials, const DraftPolicy& policy,
                        Heads* heads, MakeRule make_rule, std::uint64_t seed) {
  using Rule = decltype(make_rule(static_cast<const float*>(nullptr)));
  Quality out;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<float> f(DraftFeatures::kDim);
  const bool tree = policy.kind == Drafting::tree;
  const std::int32_t width = tree ? policy.tree.branching.at(0) : 1;
  if (width > kMaxQualityWidth) throw std::logic_error("quality trials draft at most kMaxQualityWidth children");
  std::vector<std::int32_t> children, top, parents(std::size_t(width), -1);
  for (const QualityContext& c : contexts) {
    const std::int32_t V = c.V;
    std::vector<std::int64_t> emitted(c.metric.bins(), 0), direct(c.metric.bins(), 0);
    const DraftFeatures features(c.q.data(), V);
    const auto draw = [&](const std::vector<double>& cdf) {
      const double u = uniform(rng) * cdf.back();
      return static_cast<std::int32_t>(std::min<std::ptrdiff_t>(
          std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin(), V - 1));
    };
    if (tree && policy.drafted == Drafted::deterministic) {
      std::vector<float> q(c.q.begin(), c.q.begin() + V);
      draft_children(q.data(), V, width, Drafted::deterministic, rng, top);
    }
    for (std::int32_t t = 0; t < trials; ++t) {
      std::int32_t token[2], accepted = 0;
      if (!tree) {
        std::int32_t x = draw(c.cdf_q);
        const std::int32_t offsets[2] = {0, 1};
        features.write(c.q.data(), x, 0, f.data());
        const float score = draft_score(policy, heads, f.data());
        const ChainBatch<float> batch{1, V, offsets, &x, c.p.data(), c.q.data()};
        verify(make_rule(&score), batch, Randomness{seed, std::uint64_t(t)}, ChainOutput{token, 2, &accepted},
               CpuOptions{1});
      } else if constexpr (kTreeRule<Rule>) {
        if (policy.drafted == Drafted::deterministic) {
          children = top;
        } else {
          children.clear();
          double left = c.cdf_q.back();
          while (std::int32_t(children.size()) < width && left > 1e-9 * c.cdf_q.back()) {
            const std::int32_t x = draw(c.cdf_q);
            if (policy.drafted == Drafted::sampled_without_replacement) {
              if (std::find(children.begin(), children.end(), x) != children.end()) continue;
              left -= c.q[std::size_t(x)];
            }
            children.push_back(x);
          }
        }
        const std::int32_t offsets[2] = {0, std::int32_t(children.size())};
        TreeBatch<float> batch;
        batch.batch_size = 1;
        batch.vocab_size = V;
        batch.node_offsets = offsets;
        batch.parents = parents.data();
        batch.draft_tokens = children.data();
        batch.target_probs = c.p.data();
        batch.draft_probs = policy.drafted == Drafted::deterministic ? nullptr : c.q.data();
        batch.drafted = policy.drafted;
        verify(make_rule(nullptr), batch, Randomness{seed, std::uint64_t(t)}, TreeOutput{token, 2, &accepted},
               CpuOptions{1});
      } else {
        throw std::logic_error("the comparison drafts trees only for Standard, Greedy and Traversal");
      }
      ++emitted[std::size_t(c.metric.bin(token[0]))];
      ++direct[std::size_t(c.metric.bin(draw(c.cdf_p)))];
    }
    out.tv_each.push_back(c.metric.tv(emitted));
    out.floor_each.push_back(c.metric.tv(direct));
    out.tv += out.tv_each.back() / double(contexts.size());
    out.noise_floor += out.floor_each.back() / double(contexts.size());
  }
  return out;
}

}  // namespace specverify::comparison
