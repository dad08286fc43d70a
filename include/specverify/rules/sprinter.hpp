// SPRINTER (Zhong et al.): a small learned verifier lets drafts pass without the target's test.
#pragma once

#include <cstdint>

#include "specverify/rule.hpp"

namespace specverify {

/// Accept x without the target test iff p(x) > 0 and verifier_scores[draft] >= eta; a draft the
/// verifier flags gets the Standard test, and the residual on rejection. `verifier_scores` is
/// indexed like draft_tokens (LinearVerifier::scores in <specverify/heads.hpp> computes them).
struct Sprinter {
  float eta = 0.5f;
  const float* verifier_scores{};

  static constexpr Draw on_reject = Draw::residual;
  SPECVERIFY_HD Decision decide(const Position& at) const {
    if (at.p_x > 0.0f && verifier_scores[at.draft] >= eta) return {true, true, false};
    return Decision::exact(Decision::standard_test(at));
  }
  Problem check() const {
    if (!verifier_scores) return Problem::missing("verifier_scores");
    return Problem::unless_within("eta", eta, 0.0, 1.0);
  }
  SPECVERIFY_HD Problem check_draft(std::int32_t draft) const {
    return Problem::unless_within("verifier score", verifier_scores[draft], 0.0, 1.0);
  }
  template <class Visit>
  void parameters(Visit&& visit) const {
    visit("eta", eta);
    visit("verifier_scores", verifier_scores);
  }
};

}  // namespace specverify
