// The lossless rules: Standard rejection sampling (Leviathan et al. 2023) and Greedy.
#pragma once

#include "specverify/rule.hpp"

namespace specverify {

/// Accept x iff u * q(x) < p(x); on rejection draw from max(p - q, 0). The emitted tokens follow p
/// exactly, whatever q is.
struct Standard {
  static constexpr Draw on_reject = Draw::residual;
  SPECVERIFY_HD Decision decide(const Position& at) const {
    return Decision::exact(Decision::standard_test(at));
  }
};

/// Accept x iff it is the target's argmax (lowest index on ties); argmax on rejection and as bonus.
struct Greedy {
  static constexpr Draw on_reject = Draw::argmax;
  static constexpr Draw on_bonus = Draw::argmax;
  SPECVERIFY_HD RowStats stats() const { return RowStats::of_argmax(); }
  SPECVERIFY_HD Decision decide(const Position& at) const {
    return Decision::exact(at.token == at.p_argmax);
  }
};

}  // namespace specverify
