// EARS (Sun et al.): a tolerance that grows with the target's uncertainty, 1 - max_v p(v).
#pragma once

#include "specverify/rule.hpp"

namespace specverify {

/// Accept x iff p(x) > 0 and u < p(x)/q(x) + beta * (1 - max_v p(v)); on rejection draw from the
/// residual, as Standard. The test is evaluated multiplied out, u q(x) < p(x) + t q(x), so q(x) = 0
/// needs no division and beta = 0 gives Standard's decisions bit for bit. Requiring p(x) > 0 keeps
/// top-k, top-p and grammar masks intact (the published additive form can accept masked tokens).
struct Ears {
  float beta = 0;

  static constexpr Draw on_reject = Draw::residual;
  SPECVERIFY_HD RowStats stats() const { return RowStats::of_max(); }
  SPECVERIFY_HD Decision decide(const Position& at) const {
    if (Decision::standard_test(at)) return Decision::exact(true);
    const float tolerance = beta * (1.0f - at.p_max);
    const bool pardoned = at.p_x > 0.0f && at.u * at.q_x < at.p_x + tolerance * at.q_x;
    return {pardoned, pardoned, true};
  }
  Problem check() const { return Problem::unless_within("beta", beta, 0.0, 3.4e38); }
  template <class Visit>
  void parameters(Visit&& visit) const {
    visit("beta", beta);
  }
};

}  // namespace specverify
