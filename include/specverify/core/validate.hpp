// Host-side validation: runs the one validator (core/checks.hpp) over a batch before any row is
// read and throws its first finding; words every finding, the device's included, in one function.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "specverify/core/checks.hpp"
#include "specverify/core/chain_layout.hpp"
#include "specverify/core/prob_source.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

/// The invalid_input message of a finding, for every backend alike.
inline std::string message(const Finding& f) {
  std::ostringstream m;
  m << "specverify::verify: ";
  if (f.place != Place::batch) m << "sequence " << f.sequence;
  switch (f.place) {
    case Place::position: m << ", position " << f.item; break;
    case Place::node: m << ", node " << f.item; break;
    case Place::root: m << ", root"; break;
    default: break;
  }
  if (f.place != Place::batch) m << ": ";
  const char* name = f.name;
  switch (f.check) {
    case Check::none: m << "no fault"; break;
    case Check::batch_size: m << "batch_size = " << f.a << " must be >= 0"; break;
    case Check::vocab_size: m << "vocab_size = " << f.a << " must be >= 1"; break;
    case Check::rule_parameter: m << "rule parameter " << name << " = " << f.value << " is out of range"; break;
    case Check::rule_pointer: m << "rule parameter " << name << " is null"; break;
    case Check::null_pointer: m << name << " is null"; break;
    case Check::q_needed:
      m << "draft_probs is null, but children drafted by sampling need q (Drafted::deterministic does not)";
      break;
    case Check::stride_too_small:
      m << name << " = " << f.a << " must be 0 or at least vocab_size = " << f.c;
      break;
    case Check::workspace: m << "workspace holds " << f.a << " bytes, workspace_bytes() = " << f.c; break;
    case Check::offsets_start: m << name << "[0] = " << f.a << " must be 0"; break;
    case Check::offsets_decrease: m << name << " decrease (" << f.a << " then " << f.c << ")"; break;
    case Check::rows_overflow: m << name << "[B] + B = " << f.a << " target rows overflow int32"; break;
    case Check::stride_overflow:
      m << name << " = " << f.a << " times " << f.c << " rows overflows the address range";
      break;
    case Check::sample_uniform: m << "sample uniform " << f.value << " is outside [0, 1)"; break;
    case Check::parent:
      m << "parent " << f.a << " must be -1 (the root) or a node before it, in [0, " << f.c << ")";
      break;
    case Check::draft_token: m << "draft token " << f.a << " is outside [0, " << f.c << ")"; break;
    case Check::accept_uniform: m << "accept uniform " << f.value << " is outside [0, 1)"; break;
    case Check::rule_input: m << name << " = " << f.value << " is out of range"; break;
    case Check::row_width:
      m << "row_width = " << f.a << " must be at least " << name << " + 1";
      if (f.place == Place::node) {
        m << ", and the path to this node with the token after it needs " << f.c;
      } else {
        m << " = " << f.c;
      }
      break;
    case Check::row_value:
      m << name << " " << f.a << " holds " << f.value << " at token " << f.c
        << " (probabilities must be finite and >= 0)";
      break;
    case Check::row_max: m << "target_row_max[" << f.a << "] = " << f.value << " must be finite and >= 0"; break;
    case Check::no_mass: m << name << " " << f.a << " has no mass to draw from (all zero)"; break;
    case Check::too_many_children:
      m << "more than " << f.a << " rejected children kept at once (at one node; for Traversal, along one path)";
      break;
    case Check::too_deep:
      m << "a path deeper than " << f.a << " nodes (Traversal verification keeps one frame per level, "
        << f.a << " at most)";
      break;
    case Check::iid_drafts_needed:
      m << "Traversal verification needs children drafted i.i.d. from q (Drafted::sampled, with draft rows); this "
           "batch has "
        << (f.a < 0 ? "no draft rows (one-hot drafts)"
                    : f.a == static_cast<int>(Drafted::sampled_without_replacement) ? "Drafted::sampled_without_replacement"
                                                                                     : "Drafted::deterministic");
      break;
    case Check::logit_value:
      m << name << " " << f.a << " holds " << f.value << " at index " << f.c
        << " (logits must not be NaN or +inf, nor guidance overflow)";
      break;
    case Check::no_kept_token:
      m << name << " " << f.a << " keeps no token (every logit masked or -inf) but must be read";
      break;
    case Check::draft_map_range:
      m << "draft_to_target[" << f.a << "] = " << f.c << ": draft_to_target entry outside the target vocabulary";
      break;
    case Check::draft_map_twice:
      m << "draft_to_target[" << f.a << "] = " << f.c << ": draft_to_target maps two draft ids to one target id";
      break;
    case Check::guidance_row: m << "unconditional_first_row = " << f.a << " must be -1 or a row"; break;
    case Check::guidance_scale: m << "guidance_scale = " << f.value << " must be finite"; break;
    case Check::drafted:
      m << "drafted = " << f.a << " is not a Drafted value (sampled, sampled_without_replacement, deterministic)";
      break;
    case Check::guided_logit:
      m << "guidance gives " << f.value << " at index " << f.c << " of target logits row " << f.a
        << " (u + s (l - u) with guidance_scale s = " << f.other << " must stay finite)";
      break;
    case Check::list_token:
      m << name << "[" << f.a << "] = " << f.c << " is outside [0, " << f.value << ")";
      break;
    case Check::history_order:
      m << "history_tokens[" << f.a << "] = " << f.c << " follows " << f.value
        << " (a sequence's history must be ascending and unique)";
      break;
    case Check::history_count: m << "history_counts[" << f.a << "] = " << f.c << " must be >= 0"; break;
    case Check::bias_twice:
      m << "bias_tokens[" << f.a << "] = " << f.c << " is biased twice (also bias_tokens[" << f.value << "])";
      break;
    case Check::bias_value: m << "bias_values[" << f.a << "] = " << f.value << " must be finite"; break;
    case Check::penalised_logit:
      m << "bias and penalties give " << f.value << " at index " << f.c << " of " << name << " " << f.a
        << " (logit " << f.other << ": a finite logit must stay finite)";
      break;
    case Check::draft_count: m << "num_draft_tokens = " << f.a << " must be in [0, " << f.c << "] (its draft slots)"; break;
    case Check::guidance_overflow:
      m << "unconditional_first_row = " << f.a << " with its rows at unconditional_stride = " << f.c
        << " overflows the address range";
      break;
  }
  return m.str();
}

[[noreturn]] inline void raise(const Finding& finding) { throw invalid_input(message(finding)); }

inline void raise_if(const Finding& finding) {
  if (finding) raise(finding);
}

/// Runs a sequence's per-item checks one after another (the host's side of check_sequence).
class SerialItems {
 public:
  template <class Bad>
  std::int32_t first(std::int32_t n, const Bad& bad) {
    for (std::int32_t i = 0; i < n; ++i) {
      if (bad(i)) return i;
    }
    return -1;
  }
  /// The first node at depth >= `depth` (a child of the root is at depth 1), or -1; parents are
  /// known to come before their children.
  std::int32_t first_deeper(std::int32_t n, const std::int32_t* parents, std::int32_t depth) {
    depth_.assign(static_cast<std::size_t>(n), 0);
    for (std::int32_t i = 0; i < n; ++i) {
      depth_[i] = parents[i] < 0 ? 1 : depth_[parents[i]] + 1;
      if (depth_[i] >= depth) return i;
    }
    return -1;
  }

 private:
  std::vector<std::int32_t> depth_;
};

namespace detail {

/// Throws invalid_input with the library's prefix and the parts streamed in order.
template <class... Parts>
[[noreturn]] void reject(const Parts&... parts) {
  std::ostringstream message;
  message << "specverify::verify: ";
  (message << ... << parts);
  throw invalid_input(message.str());
}

}  // namespace detail

/// A batch that holds a slice of the vocabulary (VocabShard) needs the other ranks: the verify
/// overloads without a communicator refuse it.
template <class Batch>
void reject_sharded(const Batch& batch) {
  const VocabShard& s = batch.shard;
  if (!s.whole()) {
    detail::reject("batch.shard is rank ", s.rank, " of ", s.ranks, " (vocab_start ", s.vocab_start,
                   ", local_vocab_size ", s.local_vocab_size,
                   "): a sharded batch needs verify(rule, batch, randomness, out, comm)");
  }
}

/// Throws invalid_input for what the host can judge without reading any array (sizes, the rule's
/// parameters, required pointers, strides). Backends whose arrays the host cannot read (CUDA)
/// check the rest with check_sequence where the data lives.
template <class Rule, class Batch, class Output>
void validate_shape(const Rule& rule, const Batch& batch, const Output& out) {
  reject_sharded(batch);
  raise_if(check_shape(rule, batch, out));
}

/// Throws invalid_input for the first thing wrong with the batch (core/checks.hpp gives the
/// order), before any row is read.
template <class Rule, class Batch, class Output>
void validate(const Rule& rule, const Batch& batch, const Randomness& randomness, const Output& out) {
  validate_shape(rule, batch, out);
  Finding first;
  SerialItems items;
  for (std::int32_t b = 0; b < batch.batch_size; ++b) {
    bool walkable = false;
    const Finding f = check_sequence(rule, batch, randomness, out.row_width, b, items, walkable);
    if (f && (!first || f.rank() < first.rank())) first = f;
    if (first && first.stage == Stage::start) break;  // nothing ranks before it
  }
  raise_if(first);
}

/// Rules that draw the coupled sample key it by Randomness::positions: a null pointer is invalid
/// for them on every backend and row source.
template <class Rule>
void check_positions(const Randomness& randomness) {
  if (rule_traits<Rule>::on_reject == Draw::coupled && !randomness.positions) {
    throw invalid_input("specverify::verify: randomness.positions is null (Coupled keys its samples by position)");
  }
}

/// The first invalid value of a row, its column, or -1.
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

/// Throws the invalid_input describing what walking sequence b found, scanning the rows on the
/// host to name a bad value. `Layout` words the place: a chain's position, or a tree's node.
template <class Layout, class Batch>
[[noreturn]] void report(const Fault& fault, std::int32_t b, const Batch& batch) {
  using Prob = std::remove_cv_t<std::remove_pointer_t<decltype(batch.target_probs)>>;
  Fault f = fault;
  name_bad_value(f, b, ProbSource<Prob>::of(batch), [&](const Prob* row, float& value) {
    return first_invalid(row, batch.vocab_size, value);
  });
  raise(from_fault(f, b, std::is_same_v<Layout, ChainLayout> ? Place::position : Place::node));
}

}  // namespace specverify::core
