// Traversal verification (Weng et al. 2025, "Traversal Verification for Speculative Tree
// Decoding", arXiv 2505.12398, NeurIPS 2025).
#pragma once

#include "specverify/rule.hpp"

namespace specverify {

/// A lossless tree rule that decides the tree jointly, from the leaves towards the root: a path is
/// accepted with the joint ratio of its tokens, and a node whose subtree failed is still tested
/// with what is left of the target there. Over the i.i.d. drafting it accepts at least as many
/// tokens in expectation as Standard on the same tree (for one fixed tree it can accept fewer); on
/// a chain it is block verification in law. Emitted sequences follow the target exactly.
/// Needs children drafted i.i.d. from q: Drafted::sampled with draft rows (chains: draft rows),
/// anything else is invalid_input. Rows must be distributions (summing to 1). Paths of at most
/// core::kTraversalDepth (64) nodes. The walk is the core's (core/traversal_walk.hpp).
struct Traversal {
  static constexpr Joint joint = Joint::traversal;
  static constexpr Draw on_reject = Draw::residual;  // what is left of R at the accepted node
};

}  // namespace specverify
