// Sequence-level exactness: small Markov target and draft models, the exact joint distribution
// of the first n tokens a decode emits, and a chi-square of a decode loop's emitted prefixes
// against it. Rules that decide a whole chain or tree (trees, Block) are lossless only if the
// emitted *sequence* follows p; a per-position marginal can hide a bias that this test sees.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "support.hpp"

namespace specverify::testing {

/// A first-order Markov model over V tokens: row(prev) is the next-token distribution after
/// token prev, row(-1) the one at the start.
struct Markov {
  std::int32_t V = 0;
  std::vector<std::vector<float>> rows;  // V + 1 rows: start, then one per previous token

  const std::vector<float>& row(std::int32_t prev) const { return rows[std::size_t(prev + 1)]; }

  static Markov random(std::int32_t V, std::mt19937_64& rng, double scale = 1.5) {
    Markov m{V, {}};
    for (std::int32_t i = 0; i <= V; ++i) m.rows.push_back(softmax(random_logits(V, rng, scale)));
    return m;
  }
  /// Each row reversed: the draft puts its mass where the target puts least (adversarial).
  Markov reversed() const {
    Markov m = *this;
    for (auto& r : m.rows) std::reverse(r.begin(), r.end());
    return m;
  }

  /// The exact probability of each prefix of n tokens, indexed t_0 * V^(n-1) + ... + t_{n-1}.
  std::vector<float> joint(std::int32_t n) const {
    std::vector<double> j{1.0};
    std::vector<std::int32_t> last{-1};
    for (std::int32_t step = 0; step < n; ++step) {
      std::vector<double> next;
      std::vector<std::int32_t> next_last;
      for (std::size_t i = 0; i < j.size(); ++i) {
        for (std::int32_t t = 0; t < V; ++t) {
          next.push_back(j[i] * row(last[i])[std::size_t(t)]);
          next_last.push_back(t);
        }
      }
      j.swap(next);
      last.swap(next_last);
    }
    return std::vector<float>(j.begin(), j.end());
  }
};

/// Runs `decode` `trials` times; each call gets the tokens emitted so far and returns the tokens
/// one speculative step emits, and is called until n tokens exist. The first n tokens of each
/// trial are binned as Markov::joint bins them; returns the chi-square against `exact`.
inline ChiSquare prefix_chi_square(
    std::int32_t V, std::int32_t n, std::int64_t trials, const std::vector<float>& exact,
    const std::function<std::vector<std::int32_t>(const std::vector<std::int32_t>&, std::int64_t)>& decode) {
  std::vector<std::int64_t> counts(exact.size(), 0);
  std::vector<std::int32_t> emitted;
  for (std::int64_t trial = 0; trial < trials; ++trial) {
    emitted.clear();
    for (std::int64_t step = 0; std::int32_t(emitted.size()) < n; ++step) {
      const auto tokens = decode(emitted, trial * 64 + step);
      emitted.insert(emitted.end(), tokens.begin(), tokens.end());
    }
    std::int64_t bin = 0;
    for (std::int32_t i = 0; i < n; ++i) bin = bin * V + emitted[std::size_t(i)];
    ++counts[std::size_t(bin)];
  }
  return chi_square(counts, exact);
}

}  // namespace specverify::testing
