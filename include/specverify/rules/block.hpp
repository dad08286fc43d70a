// Block verification (Sun et al. 2024, "Block verification accelerates speculative decoding",
// arXiv 2403.10444, Algorithm 2).
#pragma once

#include "specverify/rule.hpp"

namespace specverify {

/// A lossless chain rule that decides the whole chain jointly: it accepts the longest prefix
/// whose joint test passes, so an early draft the per-draft test would reject can still be kept
/// when later drafts make up for it. Emitted sequences follow the target exactly; in expectation
/// it accepts at least as many drafts as Standard on the same rows, and for one draft it is
/// Standard bit for bit. Rows must be distributions (summing to 1). Chains only.
/// The walk is the core's (core/block_walk.hpp): there is no per-draft decide().
struct Block {
  static constexpr Joint joint = Joint::block;
  static constexpr Draw on_reject = Draw::residual;  // max(p_tau P_tau - Q_tau, 0): a scaled residual
};

}  // namespace specverify
