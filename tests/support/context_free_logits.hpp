// Context-free logits rows for the joint rules' logits tests: every row is the same logits, so the
// target's sequence is i.i.d. p (the processed row) and the first 3 emitted tokens follow p x p x p.
#pragma once

#include <cstdint>
#include <vector>

#include "specverify/specverify.hpp"

namespace specverify::testing {

/// The processed distribution of one logits row, as the library computes it (values through a
/// one-row view).
inline std::vector<float> library_processed(const std::vector<float>& logits, const SamplingParams& params) {
  const auto V = static_cast<std::int32_t>(logits.size());
  core::LogitRow<float> row;
  row.logits = logits.data();
  row.n = V;
  row.params = params;
  std::vector<float> scratch(logits.size());
  const auto view = cpu::prepare(row, scratch.data());
  std::vector<float> p(logits.size());
  for (std::int32_t v = 0; v < V; ++v) p[std::size_t(v)] = core::probability(view, v);
  return p;
}

/// The exact law of 3 i.i.d. tokens from p, binned as Markov::joint bins prefixes.
inline std::vector<float> iid_joint3(const std::vector<float>& p) {
  const std::size_t V = p.size();
  std::vector<float> exact;
  for (std::size_t i = 0; i < V * V * V; ++i) exact.push_back(p[i / (V * V)] * p[i / V % V] * p[i % V]);
  return exact;
}

}  // namespace specverify::testing
