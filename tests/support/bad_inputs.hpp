// Malformed batches shared by the CPU and CUDA bad-input suites, so both backends are held to the
// same cases.
#pragma once

#include <limits>
#include <vector>

#include "support.hpp"

namespace specverify::testing {

inline std::vector<float> uniform_row(std::int32_t V) {
  return std::vector<float>(std::size_t(V), 1.0f / V);
}

/// Two valid sequences over uniform rows (drafts {1, 2} and {3}), for a test to break one thing in.
inline Chains two_sequences(std::int32_t V = 8) {
  Chains c(V);
  const auto p = uniform_row(V);
  c.add({1, 2}, {p, p, p}, {p, p});
  c.add({3}, {p, p}, {p});
  return c;
}

/// Sequence 1 is rejected at position 0 (p(2) = 0) and draws from a residual whose rows hold NaN:
/// either its target row is all NaN, or its draft row holds one NaN, at token 60.
inline Chains nan_in_residual_row(bool all_nan) {
  constexpr std::int32_t V = 100;
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> p(V, 0.0f), q(V, 0.0f), bad(V, kNaN);
  p[1] = 1.0f;
  q[2] = 1.0f;
  if (!all_nan) {
    bad = p;
    bad[60] = kNaN;
  }
  Chains c(V);
  c.add({5}, {p, p}, {q});
  c.add({2}, {all_nan ? bad : p, p}, {all_nan ? q : bad});
  return c;
}

}  // namespace specverify::testing
