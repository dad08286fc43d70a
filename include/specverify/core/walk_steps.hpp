// What every walk shares (walk.hpp's per-draft walk, block_walk.hpp, traversal_walk.hpp): the
// outcome of a sequence's walk (WalkResult, Fault), the uniforms keyed by sequence and position,
// and the steps that record a fault, a token or a logprob, and read a node's row statistics.
#pragma once

#include <cmath>
#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/philox.hpp"
#include "specverify/rule.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

/// Bad data found while walking (a value the rule read). `column` is -1 when a row pass only
/// knows the row is bad; the host then scans it to name the value.
enum class FaultKind : std::uint8_t {
  none,
  bad_value,         // NaN, infinite or negative probability (or NaN / +inf logit) in a row read
  bad_row_max,       // target_row_max entry that is NaN, infinite or negative
  target_no_mass,    // a target row to draw from (or take the argmax of) has no mass
  draft_no_mass,     // a draft row the walk reads keeps no token (a logits row whose every logit is masked)
  too_many_children, // more rejected siblings at one node than fixed rows hold (column: their room)
  too_deep,          // a path deeper than a joint walk keeps (column: its frames)
};

struct Fault {
  FaultKind kind = FaultKind::none;
  std::int32_t position = 0;      // depth of the row read (a chain's position)
  std::int32_t node = -1;         // the node under test, or for the bonus row the last one (-1: root)
  std::int64_t target_row = -1;   // row of the target rows involved
  std::int64_t draft_row = -1;    // row of the draft rows involved, -1 if none
  std::int32_t column = -1;       // vocabulary index, -1 if not known
  float value = 0;
};

/// The outcome of one sequence: n_b, the last accepted node (-1: none), the extra token, and the
/// sequence's share of VerifyStats.
struct WalkResult {
  std::int32_t accepted = 0;
  std::int32_t last_node = -1;
  std::int32_t extra = kNoToken;
  std::int32_t drafted = 0;
  std::int32_t relaxed = 0;
  std::int32_t target_checked = 0;
  Fault fault;
};

/// Acceptance uniform of node j (sequence-local) of sequence b, global draft index g.
/// With per-sequence seeds the counter omits b, so a sequence's draws ignore the rest of the batch.
SPECVERIFY_HD inline float accept_uniform(const Randomness& r, std::int32_t b, std::int32_t j,
                                          std::int32_t g) {
  if (r.accept_uniforms) return r.accept_uniforms[g];
  return r.sequence_seeds
             ? philox_uniform(r.sequence_seeds[b], r.offset, 0, Stream::accept, std::uint32_t(j))
             : philox_uniform(r.seed, r.offset, std::uint32_t(b), Stream::accept, std::uint32_t(j));
}

/// The uniform for sequence b's one extra token, from a stream independent of acceptance.
SPECVERIFY_HD inline float sample_uniform(const Randomness& r, std::int32_t b) {
  if (r.sample_uniforms) return r.sample_uniforms[b];
  return r.sequence_seeds ? philox_uniform(r.sequence_seeds[b], r.offset, 0, Stream::sample, 0)
                          : philox_uniform(r.seed, r.offset, std::uint32_t(b), Stream::sample, 0);
}

SPECVERIFY_HD inline bool valid_probability_value(float v) {
  return v >= 0.0f && v <= 3.402823466e+38f;
}

/// Whether a row's pre-pass read only valid values; a probability row is checked as it is read.
/// (A logits view says so itself: core/logit_rows.hpp.)
template <class T>
SPECVERIFY_HD bool view_ok(const T*) {
  return true;
}

/// Whether a row keeps some token: probability rows are taken as given (their values are checked
/// as read); a logits view says so itself (core/logit_rows.hpp).
template <class T>
SPECVERIFY_HD bool view_has_mass(const T*) {
  return true;
}

/// The seed and position that key sequence b's coupled sample at depth j (docs/api.md "Coupled").
SPECVERIFY_HD inline std::uint64_t coupled_seed(const Randomness& r, std::int32_t b) {
  return r.sequence_seeds ? r.sequence_seeds[b] : r.seed;
}
SPECVERIFY_HD inline std::int64_t coupled_position(const Randomness& r, std::int32_t b, std::int32_t depth) {
  return r.positions[b] + depth;
}

namespace detail {

SPECVERIFY_HD inline WalkResult& fail(WalkResult& r, FaultKind kind, std::int32_t depth,
                                      std::int32_t node, std::int64_t target, std::int64_t draft,
                                      std::int32_t column = -1, float value = 0) {
  r.fault = Fault{kind, depth, node, target, draft, column, value};
  return r;
}

/// Records the extra token of a draw, or why there is none.
template <class Token>
SPECVERIFY_HD WalkResult& take(WalkResult& r, const Token& token, std::int32_t depth,
                               std::int32_t node, std::int64_t target, std::int64_t draft) {
  if (!token.ok) return fail(r, FaultKind::bad_value, depth, node, target, draft);
  if (token.value < 0) return fail(r, FaultKind::target_no_mass, depth, node, target, -1);
  r.extra = token.value;
  return r;
}

SPECVERIFY_HD_TEMPLATE
template <class Rows, class View>
SPECVERIFY_HD float log_p(Rows& rows, const View& p, std::int32_t v) {
  return static_cast<float>(::log(static_cast<double>(rows.value(p, v))));
}

/// The row statistics a rule asks for, of the node's p (and q) and the first child's token in
/// `at`; what went wrong otherwise (a bad target_row_max entry leaves its value in at.p_max).
SPECVERIFY_HD_TEMPLATE
template <class Rows, class Source, class View>
SPECVERIFY_HD FaultKind node_stats(Rows& rows, const Source& source, const RowStats& need,
                                   const View& p, const View* q, std::int64_t p_row, Position& at) {
  if (need.max) {
    if (const float* known = source.known_max(p_row)) {
      at.p_max = *known;
      if (!valid_probability_value(at.p_max)) return FaultKind::bad_row_max;
    } else {
      const auto m = rows.max(p);
      if (!m.ok) return FaultKind::bad_value;
      at.p_max = m.value;
    }
  }
  if (need.argmax) {
    const auto a = rows.argmax(p);
    if (!a.ok) return FaultKind::bad_value;
    if (a.value < 0) return FaultKind::target_no_mass;
    at.p_argmax = a.value;
  }
  if (need.entropy) {
    const auto h = rows.entropy(p);
    if (!h.ok) return FaultKind::bad_value;
    at.entropy = h.value;
  }
  if (need.divergence) {
    const auto d = rows.divergence(need.kind, p, q, at.token);
    if (!d.ok) return FaultKind::bad_value;
    at.divergence = d.value;
  }
  return FaultKind::none;
}

}  // namespace detail

}  // namespace specverify::core
