// Host-side validation: everything that can be checked before any row is read, and the messages
// for what the walk finds in the rows. All of it runs before any output is written.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "specverify/core/chain_layout.hpp"
#include "specverify/core/tree_layout.hpp"

#include "specverify/core/prob_source.hpp"
#include "specverify/core/walk.hpp"
#include "specverify/rule.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

namespace detail {

template <class... Parts>
[[noreturn]] void reject(const Parts&... parts) {
  std::ostringstream message;
  message << "specverify::verify: ";
  (message << ... << parts);
  throw invalid_input(message.str());
}

SPECVERIFY_HD inline bool is_uniform(float u) { return u >= 0.0f && u < 1.0f; }

/// Locates the sequence and chain position of draft index g (offsets are validated first).
inline void locate(const std::int32_t* offsets, std::int32_t batch_size, std::int32_t g,
                   std::int32_t& b, std::int32_t& j) {
  std::int32_t lo = 0, hi = batch_size;  // first b with offsets[b + 1] > g
  while (lo < hi) {
    const std::int32_t mid = lo + (hi - lo) / 2;
    if (offsets[mid + 1] > g) hi = mid; else lo = mid + 1;
  }
  b = lo;
  j = g - offsets[lo];
}

template <class Batch>
void check_stride(const char* name, std::int64_t stride, std::int64_t rows, const Batch& batch) {
  if (stride != 0 && stride < batch.vocab_size) {
    reject(name, " = ", stride, " must be 0 or at least vocab_size = ", batch.vocab_size);
  }
  const std::int64_t s = stride ? stride : batch.vocab_size;
  if (rows > 0 && s > (std::numeric_limits<std::int64_t>::max() - batch.vocab_size) / rows) {
    reject(name, " = ", s, " times ", rows, " rows overflows the address range");
  }
}

}  // namespace detail

/// Throws invalid_input for what is wrong without reading any array: sizes, the rule's
/// parameters, required pointers (those a batch of B > 0 needs whatever its offsets say).
/// Backends whose arrays the host cannot read (CUDA) check the rest where the data lives.
template <class Rule, class Prob>
void validate_shape(const Rule& rule, const ChainBatch<Prob>& batch, const ChainOutput& out) {
  using detail::reject;
  if (batch.batch_size < 0) reject("batch_size = ", batch.batch_size, " must be >= 0");
  if (batch.vocab_size < 1) reject("vocab_size = ", batch.vocab_size, " must be >= 1");
  if (const Problem problem = rule_traits<Rule>::check(rule)) {
    if (problem.has_value) reject("rule parameter ", problem.what, " = ", problem.value, " is out of range");
    reject("rule parameter ", problem.what, " is null");
  }
  if (batch.batch_size == 0) return;
  if (!batch.draft_offsets) reject("draft_offsets is null");
  if (!batch.target_probs) reject("target_probs is null");
  if (!out.tokens) reject("output tokens is null");
  if (!out.num_accepted) reject("output num_accepted is null");
}

/// Throws invalid_input for anything wrong with the batch's shape, pointers, offsets, tokens,
/// caller uniforms, the output's shape, or the rule's parameters and per-draft inputs.
template <class Rule, class Prob>
void validate(const Rule& rule, const ChainBatch<Prob>& batch, const Randomness& randomness,
              const ChainOutput& out) {
  using detail::reject;
  validate_shape(rule, batch, out);
  const std::int32_t B = batch.batch_size;
  if (B == 0) return;
  if (batch.draft_offsets[0] != 0) reject("draft_offsets[0] = ", batch.draft_offsets[0], " must be 0");
  std::int32_t longest = 0;
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int64_t k = std::int64_t{batch.draft_offsets[b + 1]} - batch.draft_offsets[b];
    if (k < 0) {
      reject("sequence ", b, ": draft_offsets decrease (", batch.draft_offsets[b], " then ",
             batch.draft_offsets[b + 1], ")");
    }
    longest = std::max<std::int32_t>(longest, static_cast<std::int32_t>(k));
  }
  if (out.row_width < std::int64_t{longest} + 1) {
    reject("row_width = ", out.row_width, " must be at least the longest chain + 1 = ",
           std::int64_t{longest} + 1);
  }
  const std::int32_t drafts = batch.draft_offsets[B];
  if (drafts > std::numeric_limits<std::int32_t>::max() - B) {
    reject("draft_offsets[B] + B = ", std::int64_t{drafts} + B, " target rows overflow int32");
  }
  detail::check_stride("target_stride", batch.target_stride, std::int64_t{drafts} + B, batch);
  detail::check_stride("draft_stride", batch.draft_stride, drafts, batch);
  if (drafts > 0 && !batch.draft_tokens) reject("draft_tokens is null");
  if (randomness.sample_uniforms) {
    for (std::int32_t b = 0; b < B; ++b) {
      if (!detail::is_uniform(randomness.sample_uniforms[b])) {
        reject("sequence ", b, ": sample uniform ", randomness.sample_uniforms[b],
               " is outside [0, 1)");
      }
    }
  }
  for (std::int32_t g = 0; g < drafts; ++g) {
    const std::int32_t x = batch.draft_tokens[g];
    const bool bad_token = x < 0 || x >= batch.vocab_size;
    const bool bad_u = randomness.accept_uniforms && !detail::is_uniform(randomness.accept_uniforms[g]);
    const Problem problem = rule_traits<Rule>::check_draft(rule, g);
    if (!bad_token && !bad_u && !problem) continue;
    std::int32_t b, j;
    detail::locate(batch.draft_offsets, B, g, b, j);
    if (bad_token) {
      reject("sequence ", b, ", position ", j, ": draft token ", x, " is outside [0, ",
             batch.vocab_size, ")");
    }
    if (bad_u) {
      reject("sequence ", b, ", position ", j, ": accept uniform ", randomness.accept_uniforms[g],
             " is outside [0, 1)");
    }
    reject("sequence ", b, ", position ", j, ": ", problem.what, " = ", problem.value,
           " is out of range");
  }
}

/// Throws invalid_input for anything wrong with a tree batch: sizes, pointers, offsets, parent
/// links (a parent must come before its child, within its sequence), tokens, caller uniforms,
/// the output's width against the deepest path, and the rule's parameters and per-node inputs.
template <class Rule, class Prob>
void validate(const Rule& rule, const TreeBatch<Prob>& batch, const Randomness& randomness,
              const TreeOutput& out) {
  using detail::reject;
  if (batch.batch_size < 0) reject("batch_size = ", batch.batch_size, " must be >= 0");
  if (batch.vocab_size < 1) reject("vocab_size = ", batch.vocab_size, " must be >= 1");
  if (const Problem problem = rule_traits<Rule>::check(rule)) {
    if (problem.has_value) reject("rule parameter ", problem.what, " = ", problem.value, " is out of range");
    reject("rule parameter ", problem.what, " is null");
  }
  const std::int32_t B = batch.batch_size;
  if (B == 0) return;
  if (!batch.node_offsets) reject("node_offsets is null");
  if (!batch.target_probs) reject("target_probs is null");
  if (!out.tokens) reject("output tokens is null");
  if (!out.num_accepted) reject("output num_accepted is null");
  if (batch.drafted != Drafted::deterministic && !batch.draft_probs) {
    reject("draft_probs is null, but children drafted by sampling need q (Drafted::deterministic does not)");
  }
  if (batch.node_offsets[0] != 0) reject("node_offsets[0] = ", batch.node_offsets[0], " must be 0");
  for (std::int32_t b = 0; b < B; ++b) {
    if (batch.node_offsets[b + 1] < batch.node_offsets[b]) {
      reject("sequence ", b, ": node_offsets decrease (", batch.node_offsets[b], " then ",
             batch.node_offsets[b + 1], ")");
    }
  }
  const std::int32_t nodes = batch.node_offsets[B];
  if (nodes > std::numeric_limits<std::int32_t>::max() - B) {
    reject("node_offsets[B] + B = ", std::int64_t{nodes} + B, " rows overflow int32");
  }
  detail::check_stride("target_stride", batch.target_stride, std::int64_t{nodes} + B, batch);
  detail::check_stride("draft_stride", batch.draft_stride, std::int64_t{nodes} + B, batch);
  if (nodes > 0 && !batch.parents) reject("parents is null");
  if (nodes > 0 && !batch.draft_tokens) reject("draft_tokens is null");
  if (randomness.sample_uniforms) {
    for (std::int32_t b = 0; b < B; ++b) {
      if (!detail::is_uniform(randomness.sample_uniforms[b])) {
        reject("sequence ", b, ": sample uniform ", randomness.sample_uniforms[b], " is outside [0, 1)");
      }
    }
  }
  std::vector<std::int32_t> depth;  // path length to each node, for the output width
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t first = batch.node_offsets[b], n = batch.node_offsets[b + 1] - first;
    depth.assign(static_cast<std::size_t>(n), 0);
    std::int32_t deepest = 0;
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int32_t g = first + i, parent = batch.parents[g], x = batch.draft_tokens[g];
      if (parent < -1 || parent >= i) {
        reject("sequence ", b, ", node ", i, ": parent ", parent,
               " must be -1 (the root) or a node before it, in [0, ", i, ")");
      }
      if (x < 0 || x >= batch.vocab_size) {
        reject("sequence ", b, ", node ", i, ": draft token ", x, " is outside [0, ", batch.vocab_size, ")");
      }
      if (randomness.accept_uniforms && !detail::is_uniform(randomness.accept_uniforms[g])) {
        reject("sequence ", b, ", node ", i, ": accept uniform ", randomness.accept_uniforms[g],
               " is outside [0, 1)");
      }
      if (const Problem problem = rule_traits<Rule>::check_draft(rule, g)) {
        reject("sequence ", b, ", node ", i, ": ", problem.what, " = ", problem.value, " is out of range");
      }
      depth[i] = parent < 0 ? 1 : depth[parent] + 1;
      deepest = std::max(deepest, depth[i]);
    }
    if (out.row_width < std::int64_t{deepest} + 1) {
      reject("sequence ", b, ": row_width = ", out.row_width, " must be at least the deepest path + 1 = ",
             std::int64_t{deepest} + 1);
    }
  }
}

/// The first invalid value of a row that a row pass found bad: its column, or -1.
template <class Prob>
std::int32_t first_invalid(const Prob* row, std::int32_t n, float& value) {
  for (std::int32_t v = 0; v < n; ++v) {
    if (!valid_probability_value(static_cast<float>(row[v]))) {
      value = static_cast<float>(row[v]);
      return v;
    }
  }
  return -1;
}

/// Throws the invalid_input describing what walking sequence b found. `Layout` words the place:
/// a chain's position, or a tree's node.
template <class Layout, class Batch>
[[noreturn]] void report(const Fault& fault, std::int32_t b, const Batch& batch) {
  using detail::reject;
  Fault f = fault;
  const char* row_name = "target row";
  std::int64_t row = f.target_row;
  if (f.kind == FaultKind::bad_value && f.column < 0) {
    // A row pass only knows its rows hold a bad value: find the first one to name it.
    const auto source = ProbSource<std::remove_cv_t<std::remove_pointer_t<decltype(batch.target_probs)>>>::of(batch);
    if (f.target_row >= 0) f.column = first_invalid(source.target_row(b, f.target_row), batch.vocab_size, f.value);
    if (f.column < 0 && f.draft_row >= 0) {
      f.column = first_invalid(source.draft_row(b, f.draft_row), batch.vocab_size, f.value);
      row_name = "draft row";
      row = f.draft_row;
    }
  } else if (f.target_row < 0) {
    row_name = "draft row";
    row = f.draft_row;
  }
  std::ostringstream where;
  where << "sequence " << b << ", ";
  if (std::is_same_v<Layout, ChainLayout> || f.node >= 0) {
    where << Layout::kNodeName << " " << (std::is_same_v<Layout, ChainLayout> ? f.position : f.node);
  } else {
    where << "root";
  }
  switch (f.kind) {
    case FaultKind::bad_row_max:
      reject(where.str(), ": target_row_max[", row, "] = ", f.value, " must be finite and >= 0");
    case FaultKind::target_no_mass:
      reject(where.str(), ": ", row_name, " ", row, " has no mass to draw from (all zero)");
    case FaultKind::too_many_children:
      reject(where.str(), ": more than ", kMaxSiblings, " children rejected at one node");
    default:
      reject(where.str(), ": ", row_name, " ", row, " holds ", f.value, " at token ", f.column,
             " (probabilities must be finite and >= 0)");
  }
}

}  // namespace specverify::core
