// A user's own rule, written outside the library: Medusa's typical acceptance (Cai et al. 2024).
// It is one struct that models specverify's rule concept (include/specverify/rule.hpp); the
// library's walk, randomness, validation and backends take it as they take the built-in rules.
#pragma once

#include <cmath>

#include <specverify/rule.hpp>

/// Accept x iff p(x) > min(epsilon, delta * exp(-H(p))): a token is typical when the target gives
/// it more than a floor that shrinks as the target grows uncertain. Argmax p on rejection.
struct TypicalAcceptance {
  float epsilon = 0.09f;
  float delta = 0.3f;

  static constexpr specverify::Draw on_reject = specverify::Draw::argmax;

  SPECVERIFY_HD specverify::RowStats stats() const { return specverify::RowStats::of_entropy(); }
  SPECVERIFY_HD specverify::Decision decide(const specverify::Position& at) const {
    const float floor = std::fmin(epsilon, delta * std::exp(-at.entropy));
    const bool typical = at.p_x > floor;
    return {typical, typical && !specverify::Decision::standard_test(at), true};
  }
  specverify::Problem check() const {
    if (auto p = specverify::Problem::unless_within("epsilon", epsilon, 0.0, 1.0)) return p;
    return specverify::Problem::unless_within("delta", delta, 0.0, 3.4e38);
  }
};
