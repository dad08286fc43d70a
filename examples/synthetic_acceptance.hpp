// A rule for benchmarking engines, written outside the library: accept the draft at chain
// position j with a configured conditional rate rate[j], whatever p and q say, as inference
// engines offer to measure throughput at a chosen acceptance profile without a matching draft
// model. Not a sampling rule: its output follows neither p nor q.
//
// Deterministic given the acceptance uniform: accept iff u < rate[j], with u the walk's own
// uniform (Philox, or the caller's accept_uniforms), so a seed reproduces the chain lengths and
// P(accept at j | reached j) = rate[j] exactly. Positions past the configured ones use the last
// rate. The extra token on rejection is drawn from p (Draw::target), not from the residual
// max(p - q, 0): the residual corrects for a likelihood-ratio test, and none was made here, so a
// draw from p keeps the emitted token the target's own (and the walk never meets an empty
// residual). The bonus token is drawn from p too. Accepting regardless of p(x) means a draft with
// p(x) = 0 can be kept: do not use it where masks (top-k, top-p, grammars) must hold.
#pragma once

#include <cstdint>

#include <specverify/rule.hpp>

struct SyntheticAcceptance {
  const float* rates = nullptr;  // rates[j]: P(accept position j | positions < j accepted), in [0, 1]
  std::int32_t count = 0;        // entries in rates; position j >= count uses rates[count - 1]

  static constexpr specverify::Draw on_reject = specverify::Draw::target;

  SPECVERIFY_HD float rate(std::int32_t j) const { return rates[j < count ? j : count - 1]; }

  SPECVERIFY_HD specverify::Decision decide(const specverify::Position& at) const {
    const bool accepted = at.u < rate(at.index);
    // target_checked = false: the decision never read p.
    return {accepted, accepted && !specverify::Decision::standard_test(at), false};
  }

  specverify::Problem check() const {
    if (rates == nullptr) return specverify::Problem::missing("rates");
    if (count < 1) return {"rates count", double(count)};
    for (std::int32_t j = 0; j < count; ++j)
      if (auto p = specverify::Problem::unless_within("rates", rates[j], 0.0, 1.0)) return p;
    return {};
  }
};

/// Expected generated tokens per target call for chains of k drafts at these rates:
/// 1 + sum_{j<k} prod_{i<=j} rate(i) (every call yields the accepted drafts and one more token).
inline double expected_tokens_per_call(const SyntheticAcceptance& rule, std::int32_t k) {
  double tokens = 1, reach = 1;
  for (std::int32_t j = 0; j < k; ++j) {
    reach *= rule.rate(j);
    tokens += reach;
  }
  return tokens;
}
