// SpecDec++ (Huang et al.): a learned acceptance head decides where a chain stops; the positions
// kept are then verified by an inner rule.
#pragma once

#include <cstdint>

#include "specverify/rule.hpp"

namespace specverify {

/// SpecDec++'s stop test, shared by the rule's cut and the SpecDecPPStop controller so both end a
/// chain at the same token: stop once the predicted chance of a rejection so far,
/// 1 - prod accept_probs (a float running product), exceeds the threshold, strictly.
SPECVERIFY_HD inline bool specdecpp_stops(float all_accepted, float threshold) {
  return 1.0f - all_accepted > threshold;
}

/// Cuts each chain after the first j with 1 - prod_{i<=j} accept_probs[i] > threshold (strict, as
/// released; the token that tipped it is kept), then verifies what is left with `inner`. When all
/// kept drafts pass, the bonus comes from the target row after the cut. `accept_probs` is indexed
/// like draft_tokens (AcceptanceHead::accept_probs in <specverify/heads.hpp>).
template <class Inner>
struct SpecDecPP {
  float threshold = 0.5f;
  const float* accept_probs{};
  Inner inner{};

  static constexpr Draw on_reject = rule_traits<Inner>::on_reject;
  static constexpr Draw on_bonus = rule_traits<Inner>::on_bonus;

  SPECVERIFY_HD std::int32_t cut(std::int32_t first_draft, std::int32_t k) const {
    float all_accepted = 1.0f;
    for (std::int32_t j = 0; j < k; ++j) {
      all_accepted *= accept_probs[first_draft + j];
      if (specdecpp_stops(all_accepted, threshold)) return j + 1;
    }
    return k;
  }
  SPECVERIFY_HD RowStats stats() const { return rule_traits<Inner>::stats(inner); }
  SPECVERIFY_HD Decision decide(const Position& at) const { return inner.decide(at); }
  Problem check() const {
    if (!accept_probs) return Problem::missing("accept_probs");
    if (const Problem p = Problem::unless_within("threshold", threshold, 0.0, 1.0)) return p;
    return rule_traits<Inner>::check(inner);
  }
  SPECVERIFY_HD Problem check_draft(std::int32_t draft) const {
    if (const Problem p = Problem::unless_within("accept prob", accept_probs[draft], 0.0, 1.0)) return p;
    return rule_traits<Inner>::check_draft(inner, draft);
  }
  template <class Visit>
  void parameters(Visit&& visit) const {
    visit("threshold", threshold);
    visit("accept_probs", accept_probs);
    rule_traits<Inner>::parameters(inner, visit);
  }
};

}  // namespace specverify
