// The one output writer, host and device: a sequence's accepted path, its extra token and the
// kNoToken padding, the accepted count, and the optional accepted nodes and logprobs. Backends
// call it only once the whole batch is known to be valid.
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

/// ChainOutput and TreeOutput seen alike (a chain has no accepted_nodes).
struct OutputRows {
  std::int32_t* tokens{};
  std::int32_t row_width = 0;
  std::int32_t* num_accepted{};
  std::int32_t* accepted_nodes{};
  float* logprobs{};

  SPECVERIFY_HD static OutputRows of(const ChainOutput& o) { return {o.tokens, o.row_width, o.num_accepted, nullptr, o.logprobs}; }
  SPECVERIFY_HD static OutputRows of(const TreeOutput& o) {
    return {o.tokens, o.row_width, o.num_accepted, o.accepted_nodes, o.logprobs};
  }
};

/// Writes sequence b's outcome. `staged` (nullable) holds the walk's logprobs, row_width floats.
template <class Layout>
SPECVERIFY_HD void write_sequence(const Layout& layout, std::int32_t b, const WalkResult& r,
                                  const OutputRows& out, const float* staged) {
  const std::int64_t at = std::int64_t{b} * out.row_width;
  std::int32_t* tokens = out.tokens + at;
  std::int32_t* nodes = out.accepted_nodes ? out.accepted_nodes + at : nullptr;
  // The accepted path, from its last node up through the parents.
  for (std::int32_t i = r.accepted - 1, node = r.last_node; i >= 0; --i, node = layout.parent(b, node)) {
    tokens[i] = layout.token(b, node);
    if (nodes) nodes[i] = node;
  }
  tokens[r.accepted] = r.extra;
  for (std::int32_t i = r.accepted + 1; i < out.row_width; ++i) tokens[i] = kNoToken;
  if (nodes) {
    for (std::int32_t i = r.accepted; i < out.row_width; ++i) nodes[i] = kNoToken;
  }
  if (out.logprobs && staged) {
    for (std::int32_t i = 0; i <= r.accepted; ++i) out.logprobs[at + i] = staged[i];
  }
  out.num_accepted[b] = r.accepted;
}

SPECVERIFY_HD inline void add_stats(VerifyStats& total, const WalkResult& r) {
  total.drafted += r.drafted;
  total.accepted += r.accepted;
  total.relaxed += r.relaxed;
  total.target_checked += r.target_checked;
}

}  // namespace specverify::core
