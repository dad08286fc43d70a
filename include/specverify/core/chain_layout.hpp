// The chain layout: what the walk visits for a ChainBatch. A chain is the tree whose node j has
// the one child j + 1, so the walk that serves trees serves chains unchanged.
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

struct ChainLayout {
  const std::int32_t* offsets{};
  const std::int32_t* tokens{};

  static constexpr const char* kNodeName = "position";

  template <class Batch>
  SPECVERIFY_HD static ChainLayout of(const Batch& batch) {
    return {batch.draft_offsets, batch.draft_tokens};
  }

  /// Drafts of a chain are tested like sampled children (one-hot drafts: the source has no q).
  SPECVERIFY_HD Drafted drafted() const { return Drafted::sampled; }
  /// Global index of sequence b's node 0 (the index into draft_tokens and per-draft inputs).
  SPECVERIFY_HD std::int32_t first(std::int32_t b) const { return offsets[b]; }
  SPECVERIFY_HD std::int32_t count(std::int32_t b) const { return offsets[b + 1] - offsets[b]; }
  SPECVERIFY_HD std::int32_t token(std::int32_t b, std::int32_t node) const {
    return tokens[offsets[b] + node];
  }
  SPECVERIFY_HD std::int32_t parent(std::int32_t, std::int32_t node) const { return node - 1; }
  /// The first child of `node` (-1: the root) with an index above `after`; -1 when there is none.
  SPECVERIFY_HD std::int32_t child(std::int32_t b, std::int32_t node, std::int32_t after) const {
    const std::int32_t next = node + 1;
    return next > after && next < count(b) ? next : -1;
  }
  /// Row of p after `node` (-1: at the root) in target_probs.
  SPECVERIFY_HD std::int64_t target_row(std::int32_t b, std::int32_t node) const {
    return std::int64_t{offsets[b]} + b + node + 1;
  }
  /// Row of the q that `child` was drafted from, in draft_probs (chains: one per draft).
  SPECVERIFY_HD std::int64_t draft_row(std::int32_t b, std::int32_t child) const {
    return std::int64_t{offsets[b]} + child;
  }
};

}  // namespace specverify::core
