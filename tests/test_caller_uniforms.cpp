// With caller-supplied uniforms, verify(Standard) matches a plain scalar reference written from
// the paper decision for decision, token for token.
#include <gtest/gtest.h>

#include "support.hpp"

namespace specverify {
namespace {

/// Smallest i with w_0 + ... + w_i > u * sum(w), accumulated in long double.
std::int32_t reference_draw(const std::vector<long double>& w, float u) {
  long double total = 0;
  for (auto v : w) total += v;
  const long double threshold = u * total;
  long double running = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    running += w[i];
    if (w[i] > 0 && running > threshold) return static_cast<std::int32_t>(i);
  }
  return -1;
}

/// Leviathan et al., one chain: accept x_j iff u_j q(x_j) < p(x_j); else draw from max(p - q, 0).
std::pair<std::int32_t, std::int32_t> reference_chain(const testing::Chains& c, std::int32_t b,
                                                      const float* accept, float sample) {
  const std::int32_t V = c.V, first = c.offsets[b], k = c.offsets[b + 1] - first;
  for (std::int32_t j = 0; j < k; ++j) {
    const float* p = c.p.data() + std::int64_t(first + b + j) * V;
    const float* q = c.q.data() + std::int64_t(first + j) * V;
    const std::int32_t x = c.tokens[first + j];
    if (accept[first + j] * q[x] < p[x]) continue;
    std::vector<long double> w(V);
    for (std::int32_t v = 0; v < V; ++v) w[v] = std::max(0.0f, p[v] - q[v]);
    std::int32_t t = reference_draw(w, sample);
    if (t < 0) t = reference_draw(std::vector<long double>(p, p + V), sample);
    return {j, t};
  }
  const float* bonus = c.p.data() + std::int64_t(first + b + k) * V;
  return {k, reference_draw(std::vector<long double>(bonus, bonus + V), sample)};
}

TEST(CallerUniforms, StandardMatchesScalarReferenceDecisionForDecision) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (const std::int32_t V : {3, 64, 5000}) {
    testing::Chains c(V);
    for (std::int32_t b = 0; b < 300; ++b) testing::add_aligned_chain(c, b % 6, 1.0, rng);
    std::vector<float> accept(c.tokens.size()), sample(static_cast<std::size_t>(c.size()));
    for (auto& u : accept) u = std::min(unit(rng), 0x1.fffffep-1f);
    for (auto& u : sample) u = std::min(unit(rng), 0x1.fffffep-1f);
    Randomness r;
    r.accept_uniforms = accept.data();
    r.sample_uniforms = sample.data();
    ChainOutput out = c.output();
    verify(Standard{}, c.batch(), r, out);
    std::int32_t rejections = 0;
    for (std::int32_t b = 0; b < c.size(); ++b) {
      const auto [n, token] = reference_chain(c, b, accept.data(), sample[b]);
      ASSERT_EQ(c.accepted[b], n) << "V " << V << " sequence " << b;
      ASSERT_EQ(c.token(b, n), token) << "V " << V << " sequence " << b;
      rejections += n < c.offsets[b + 1] - c.offsets[b];
    }
    EXPECT_GT(rejections, 30) << "the residual path must be exercised";
  }
}

}  // namespace
}  // namespace specverify
