// Host drafting controllers: when to stop drafting (SpecDec++) and which drafts the target must
// check (SPRINTER). They take the heads' outputs but need no Eigen, so the core header carries them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "specverify/rules/specdecpp.hpp"
#include "specverify/types.hpp"

namespace specverify {

/// SpecDec++'s stopping rule. Feed the acceptance head's probability of each new draft token; after
/// token j (length j + 1) it says stop when 1 - prod_{i<=j} accept_prob_i > threshold (strict; the
/// token that tipped it stays in the draft), but not before min_length tokens, and always at
/// max_length. The test is specdecpp_stops, the SpecDecPP rule's own, so a controller and the rule
/// agree on where a chain ends.
///
///   specverify::SpecDecPPStop stop{0.7f, 2, 20};      // the paper's threshold and length bounds
///   do { draft_one_token(); } while (!stop.feed(accept_prob_of_last_token));
///   submit(stop.length());  stop.reset();
class SpecDecPPStop {
 public:
  SpecDecPPStop(float threshold, std::int32_t min_length, std::int32_t max_length)
      : threshold_(threshold), min_length_(min_length), max_length_(max_length) {
    if (!(threshold >= 0.0f && threshold <= 1.0f))
      throw invalid_input("SpecDecPPStop: threshold = " + std::to_string(threshold) +
                          " outside [0, 1]");
    if (max_length < 1)
      throw invalid_input("SpecDecPPStop: max_length = " + std::to_string(max_length) +
                          " must be >= 1");
    if (min_length < 0 || min_length > max_length)
      throw invalid_input("SpecDecPPStop: min_length = " + std::to_string(min_length) +
                          " outside [0, max_length = " + std::to_string(max_length) + "]");
  }

  /// Takes the next draft token's acceptance probability (in [0, 1]); returns true when drafting
  /// must stop after this token. Feeding again after a stop without reset() is an error.
  bool feed(float accept_prob) {
    if (stopped_)
      throw invalid_input("SpecDecPPStop: fed after it said stop at length " +
                          std::to_string(length_) + "; call reset() first");
    if (!(accept_prob >= 0.0f && accept_prob <= 1.0f))
      throw invalid_input("SpecDecPPStop: accept_prob " + std::to_string(accept_prob) +
                          " at position " + std::to_string(length_) + " outside [0, 1]");
    prod_ *= accept_prob;
    ++length_;
    stopped_ = length_ >= max_length_ || (length_ >= min_length_ && specdecpp_stops(prod_, threshold_));
    return stopped_;
  }

  /// Starts a new draft chain.
  void reset() {
    prod_ = 1.0f;
    length_ = 0;
    stopped_ = false;
  }

  std::int32_t length() const { return length_; }
  /// 1 - prod of the probabilities fed so far: the predicted chance of at least one rejection.
  float rejection_prob() const { return 1.0f - prod_; }
  float threshold() const { return threshold_; }
  std::int32_t min_length() const { return min_length_; }
  std::int32_t max_length() const { return max_length_; }

 private:
  float threshold_;
  std::int32_t min_length_;
  std::int32_t max_length_;
  float prod_ = 1.0f;
  std::int32_t length_ = 0;
  bool stopped_ = false;
};

/// SPRINTER's gate. A draft token whose verifier score is >= eta passes without the target; one
/// scored below eta must be checked by the target (the standard test against p), so the engine
/// stops drafting there and calls the target. The Sprinter rule applies the same `>= eta`.
///
///   specverify::SprinterGate gate{0.5f};
///   if (gate.must_check(verifier_score)) { run_target_and_verify(); }
class SprinterGate {
 public:
  explicit SprinterGate(float eta) : eta_(eta) {
    if (!(eta >= 0.0f && eta <= 1.0f))
      throw invalid_input("SprinterGate: eta = " + std::to_string(eta) + " outside [0, 1]");
  }

  /// Whether the target must check the token with this verifier score (in [0, 1]).
  bool must_check(float score) const {
    if (!(score >= 0.0f && score <= 1.0f))
      throw invalid_input("SprinterGate: verifier score " + std::to_string(score) +
                          " outside [0, 1]");
    return score < eta_;
  }

  float eta() const { return eta_; }

 private:
  float eta_;
};

}  // namespace specverify
