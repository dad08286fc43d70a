// Test support: owned batches, random distributions, chi-square goodness of fit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "specverify/specverify.hpp"

namespace specverify::testing {

/// softmax(logits / temperature) in float, normalised in double.
inline std::vector<float> softmax(const std::vector<double>& logits, double temperature = 1.0) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> e(logits.size());
  double sum = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) sum += e[i] = std::exp((logits[i] - top) / temperature);
  std::vector<float> p(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) p[i] = static_cast<float>(e[i] / sum);
  return p;
}

/// LLM-like logits: Gaussian with a heavy (Student-t, 3 dof) tail.
inline std::vector<double> random_logits(std::int32_t V, std::mt19937_64& rng, double scale = 2.0) {
  std::student_t_distribution<double> t(3.0);
  std::vector<double> logits(static_cast<std::size_t>(V));
  for (auto& l : logits) l = scale * t(rng);
  return logits;
}

inline std::vector<float> random_distribution(std::int32_t V, std::mt19937_64& rng,
                                              double scale = 2.0) {
  return softmax(random_logits(V, rng, scale));
}

/// A token drawn from weights w with a test-side generator (independent of the library).
inline std::int32_t sample(const std::vector<float>& w, std::mt19937_64& rng) {
  std::discrete_distribution<std::int32_t> d(w.begin(), w.end());
  return d(rng);
}

/// sum_v min(p, q): the probability that Standard accepts a draft x ~ q.
inline double overlap(const std::vector<float>& p, const std::vector<float>& q) {
  double s = 0;
  for (std::size_t i = 0; i < p.size(); ++i) s += std::min(p[i], q[i]);
  return s;
}

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;  // g++ -fsanitize=address
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;  // clang++ -fsanitize=address
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/// How often a test repeats a path it checks: n, or n / 8 under AddressSanitizer (the debug
/// preset), where unoptimised, instrumented draws over 128k rows run 100-200x slower than in the
/// release build. The sanitizers look for bad memory accesses and undefined behaviour, which the
/// first repetitions of a path meet as well as the last; the release build (the README's test
/// command) runs every loop at n and so checks the distributions at full power. Fewer draws cost
/// a chi-square power, never a chance failure: `fits`' bound holds at every n, and `chi_square`
/// pools the bins that expect fewer than 5.
constexpr std::int64_t repeats(std::int64_t n) { return kSanitized ? std::max<std::int64_t>(n / 8, 1) : n; }

/// The row lengths a test runs at: all of them, or under AddressSanitizer the first, for the
/// reason above. Only for tests whose first length walks every path the longer ones do (the
/// release build runs them all).
inline std::vector<std::int32_t> row_lengths(std::initializer_list<std::int32_t> n) {
  if (kSanitized) return {*n.begin()};
  return n;
}

struct ChiSquare {
  double statistic = 0;
  int df = 0;
  /// A bound the statistic exceeds by chance with negligible probability: df + 10 sqrt(2 df).
  bool fits() const { return statistic < df + 10.0 * std::sqrt(2.0 * df); }
};

/// Pearson's chi-square of counts against probabilities p (normalised here); bins expecting
/// fewer than 5 are pooled so the statistic stays chi-square distributed.
inline ChiSquare chi_square(const std::vector<std::int64_t>& counts, const std::vector<float>& p) {
  double total_p = 0;
  for (float v : p) total_p += v;
  std::int64_t n = 0;
  for (auto c : counts) n += c;
  ChiSquare r;
  double pooled_expected = 0, pooled_count = 0;
  int bins = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double expected = n * p[i] / total_p;
    if (expected < 5) {
      pooled_expected += expected;
      pooled_count += counts[i];
      continue;
    }
    r.statistic += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++bins;
  }
  if (pooled_expected > 0) {
    r.statistic += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) /
                   std::max(pooled_expected, 1e-300);
    ++bins;
  }
  r.df = bins - 1;
  return r;
}

/// A batch of B chains with owned storage. Chains share one set of per-position rows: sequence b
/// position j sees p_rows[j], q_rows[j]; the bonus row is p_rows[k_b].
struct Chains {
  std::int32_t V = 0;
  std::vector<std::int32_t> offsets{0};
  std::vector<std::int32_t> tokens;
  std::vector<float> p, q;
  bool one_hot = false;
  std::int32_t width = 1;
  std::vector<std::int32_t> out_tokens, accepted;

  explicit Chains(std::int32_t vocab, bool one_hot_drafts = false) : V(vocab), one_hot(one_hot_drafts) {}

  /// Appends a sequence with drafts xs, target rows ps (xs.size() + 1 of them) and draft rows qs.
  void add(const std::vector<std::int32_t>& xs, const std::vector<std::vector<float>>& ps,
           const std::vector<std::vector<float>>& qs = {}) {
    offsets.push_back(offsets.back() + static_cast<std::int32_t>(xs.size()));
    tokens.insert(tokens.end(), xs.begin(), xs.end());
    for (std::size_t j = 0; j <= xs.size(); ++j) p.insert(p.end(), ps[j].begin(), ps[j].end());
    if (!one_hot) {
      for (std::size_t j = 0; j < xs.size(); ++j) q.insert(q.end(), qs[j].begin(), qs[j].end());
    }
    width = std::max<std::int32_t>(width, static_cast<std::int32_t>(xs.size()) + 1);
  }

  std::int32_t size() const { return static_cast<std::int32_t>(offsets.size()) - 1; }

  ChainBatch<float> batch() const {
    ChainBatch<float> b;
    b.batch_size = size();
    b.vocab_size = V;
    b.draft_offsets = offsets.data();
    b.draft_tokens = tokens.data();
    b.target_probs = p.data();
    b.draft_probs = one_hot ? nullptr : q.data();
    return b;
  }

  ChainOutput output() {
    out_tokens.assign(static_cast<std::size_t>(size()) * width, 12345);
    accepted.assign(static_cast<std::size_t>(size()), 12345);
    return ChainOutput{out_tokens.data(), width, accepted.data()};
  }

  std::int32_t token(std::int32_t b, std::int32_t i) const { return out_tokens[std::size_t(b) * width + i]; }
};

/// Appends a chain of k drafts whose draft rows are the target's logits plus N(0, noise^2), the
/// way a real draft model resembles its target; drafts are sampled from q.
inline void add_aligned_chain(Chains& c, std::int32_t k, double noise, std::mt19937_64& rng) {
  std::vector<std::vector<float>> ps, qs;
  std::vector<std::int32_t> xs;
  std::normal_distribution<double> misalignment(0.0, noise);
  for (std::int32_t j = 0; j <= k; ++j) {
    auto logits = random_logits(c.V, rng);
    ps.push_back(softmax(logits));
    if (j == k) break;
    for (auto& l : logits) l += misalignment(rng);
    qs.push_back(softmax(logits));
    xs.push_back(sample(qs.back(), rng));
  }
  c.add(xs, ps, qs);
}

}  // namespace specverify::testing
