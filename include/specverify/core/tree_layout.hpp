// The tree layout: what the walk visits for a TreeBatch (parent links, children in index order).
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

struct TreeLayout {
  const std::int32_t* offsets{};
  const std::int32_t* parents{};
  const std::int32_t* tokens{};
  Drafted how = Drafted::sampled;

  static constexpr const char* kNodeName = "node";

  template <class Batch>
  SPECVERIFY_HD static TreeLayout of(const Batch& batch) {
    return {batch.node_offsets, batch.parents, batch.draft_tokens, batch.drafted};
  }

  SPECVERIFY_HD Drafted drafted() const { return how; }
  SPECVERIFY_HD std::int32_t first(std::int32_t b) const { return offsets[b]; }
  SPECVERIFY_HD std::int32_t count(std::int32_t b) const { return offsets[b + 1] - offsets[b]; }
  SPECVERIFY_HD std::int32_t token(std::int32_t b, std::int32_t node) const {
    return tokens[offsets[b] + node];
  }
  SPECVERIFY_HD std::int32_t parent(std::int32_t b, std::int32_t node) const {
    return parents[offsets[b] + node];
  }
  /// The first child of `node` (-1: the root) with an index above `after`; -1 when there is none.
  /// Children follow their parent (parents[i] < i), so the scan starts past both.
  SPECVERIFY_HD std::int32_t child(std::int32_t b, std::int32_t node, std::int32_t after) const {
    const std::int32_t n = count(b);
    for (std::int32_t i = (after > node ? after : node) + 1; i < n; ++i) {
      if (parent(b, i) == node) return i;
    }
    return -1;
  }
  SPECVERIFY_HD std::int64_t target_row(std::int32_t b, std::int32_t node) const {
    return std::int64_t{offsets[b]} + b + node + 1;
  }
  /// Draft rows are laid out like target rows: the q the node's children were drafted from.
  SPECVERIFY_HD std::int64_t draft_row(std::int32_t b, std::int32_t child) const {
    return target_row(b, parent(b, child));
  }
};

}  // namespace specverify::core
