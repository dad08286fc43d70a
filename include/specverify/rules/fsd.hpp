// Fuzzy Speculative Decoding (Holsman et al.): accept while the target and draft distributions
// are close, D(p, q) <= threshold; and its reducible form, which adds the lossless test.
#pragma once

#include "specverify/rule.hpp"

namespace specverify {

/// FSD's parameters: a divergence the enum names (a cast from an integer may name none) and a
/// threshold in [0, FLT_MAX].
inline Problem check_fsd(Divergence divergence, float threshold) {
  const auto kind = static_cast<int>(divergence);
  if (const Problem p = Problem::unless_within("divergence", kind, 0, static_cast<int>(Divergence::tv))) return p;
  return Problem::unless_within("threshold", threshold, 0.0, 3.4e38);
}

template <class Visit>
void fsd_parameters(Divergence divergence, float threshold, Visit&& visit) {
  visit("divergence", static_cast<double>(static_cast<int>(divergence)));
  visit("threshold", threshold);
}

/// Accept x iff p(x) > 0 and D(p, q) <= threshold (inclusive, as the authors' code); a
/// deterministic decision. On rejection the extra token comes from p. The FSD release computes D
/// on temperature-1 distributions while sampling from the warped p: pass the rows you want D on.
struct Fsd {
  Divergence divergence = Divergence::js;
  float threshold = 0;

  static constexpr Draw on_reject = Draw::target;
  SPECVERIFY_HD RowStats stats() const { return RowStats::of_divergence(divergence); }
  SPECVERIFY_HD Decision decide(const Position& at) const {
    const bool close = at.p_x > 0.0f && at.divergence <= threshold;
    return {close, close, true};
  }
  Problem check() const { return check_fsd(divergence, threshold); }
  template <class Visit>
  void parameters(Visit&& visit) const {
    fsd_parameters(divergence, threshold, visit);
  }
};

/// rFSD: accept x iff (p(x) > 0 and D(p, q) < threshold) or the Standard test passes; on
/// rejection draw from the residual. Threshold 0 is exactly Standard.
struct ReducibleFsd {
  Divergence divergence = Divergence::js;
  float threshold = 0;

  static constexpr Draw on_reject = Draw::residual;
  SPECVERIFY_HD RowStats stats() const { return RowStats::of_divergence(divergence); }
  SPECVERIFY_HD Decision decide(const Position& at) const {
    if (Decision::standard_test(at)) return Decision::exact(true);
    // threshold > 0: a divergence computed below 0 (rounding, or rows that are not normalised)
    // must not make threshold 0 accept more than Standard.
    const bool close = at.p_x > 0.0f && threshold > 0.0f && at.divergence < threshold;
    return {close, close, true};
  }
  Problem check() const { return check_fsd(divergence, threshold); }
  template <class Visit>
  void parameters(Visit&& visit) const {
    fsd_parameters(divergence, threshold, visit);
  }
};

}  // namespace specverify
