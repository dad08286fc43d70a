// Coupled verification: speculative decoding that emits exactly the tokens of plain sampling.
#pragma once

#include "specverify/rule.hpp"

namespace specverify {

/// Accept draft j iff it equals the row's own sample, sample(target row j, params_b, seed_b,
/// positions[b] + j) (Gumbel-max with noise keyed by seed, position and token alone), and emit
/// that sample as the extra token. For a fixed seed the emitted text is then the same as plain
/// `sample` decoding, token for token, whatever the drafter proposed and whether speculation is
/// on. Lossless (each token is a sample of p). Needs Randomness::positions; ignores `offset` and
/// the uniforms. On probability rows the weights p are used as given.
struct Coupled {
  static constexpr Draw on_reject = Draw::coupled;
  static constexpr Draw on_bonus = Draw::coupled;
  SPECVERIFY_HD Decision decide(const Position& at) const { return Decision::exact(at.token == at.coupled); }
};

}  // namespace specverify
