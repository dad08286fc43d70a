// The verify-and-resample core: one sequence's drafts, walked from the root.
//
// walk() is the only code that decides which drafts a sequence keeps and draws its one extra
// token. It is generic over three things and knows none of them in particular:
//   - the rule (rule.hpp): what to decide for one draft, what to draw on rejection;
//   - the layout (chain_layout.hpp, tree_layout.hpp): which nodes follow which, and which rows
//     hold their p and q. A chain is a tree whose nodes each have one child;
//   - the row source and the backend's rows: the source names a row, the backend opens it (for
//     logits, a pre-pass; for probabilities, nothing) and does the row work through the view:
//
//   struct Rows {                                  // what a backend provides (see cpu/rows.hpp)
//     View open(Source::Row);                      // the pre-pass of a row the walk reaches
//       (a View may live in the rows' scratch: the walk reads only the last p and q it opened)
//     float value(const View&, std::int32_t v);
//     R<float> max(const View& p);                 // R<T>: {T value; bool ok;}, ok == false when
//     R<std::int32_t> argmax(const View& p);       //   the pass read an invalid value
//     R<float> entropy(const View& p);
//     R<float> divergence(Divergence, const View& p, const View* q, std::int32_t x);
//     R<std::int32_t> draw_residual(const View& p, const View* q, std::int32_t x, float u);
//     R<std::int32_t> draw_target(const View& p, float u);   // value -1: no mass to draw from
//     R<double> mass(const Residual<View>&, std::int32_t x);  // after rejecting sibling x
//     R<std::int32_t> draw(const Residual<View>&, std::int32_t x, float u);
//     Siblings siblings(std::int32_t count);       // room for `count` absorbed siblings (or less,
//   };                                             //   if the rows cannot grow)
//
// Nothing is written but the optional logprob stage: the outcome is returned, so the host can
// validate a whole batch before any output changes.
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

/// The seed and position that key sequence b's coupled sample at depth j (API.md "Coupled").
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

/// The per-draft walk behind walk(): the rule's decide() at each draft.
SPECVERIFY_HD_TEMPLATE
template <class Rule, class Layout, class Source, class Rows>
SPECVERIFY_HD WalkResult walk_each(const Rule& rule, const Layout& layout, const Source& source,
                                   const Randomness& randomness, std::int32_t b, Rows& rows,
                                   float* logprobs) {
  using traits = rule_traits<Rule>;
  using View = decltype(rows.open(source.target_row(b, 0)));
  WalkResult r;
  const std::int32_t first = layout.first(b);
  r.drafted = layout.count(b);
  const std::int32_t limit = traits::cut(rule, first, r.drafted);  // nodes past it are not offered
  const RowStats need = traits::stats(rule);
  const Drafted drafted = layout.drafted();
  const bool has_q = source.has_draft() && drafted != Drafted::deterministic;
  constexpr bool kResidual = traits::on_reject == Draw::residual;
  constexpr bool kCoupled = traits::on_reject == Draw::coupled;

  std::int32_t node = -1;  // the root
  for (std::int32_t depth = 0;; ++depth) {
    const std::int64_t p_row = layout.target_row(b, node);
    const View p = rows.open(source.target_row(b, p_row));
    std::int32_t c = layout.child(b, node, -1);
    if (c >= limit) c = -1;
    if (!view_ok(p)) return detail::fail(r, FaultKind::bad_value, depth, c >= 0 ? c : node, p_row, -1);
    if (c < 0) {  // every draft on the path passed: the bonus token
      if constexpr (traits::on_bonus == Draw::coupled) {
        const auto token = rows.gumbel_argmax(p, coupled_seed(randomness, b), coupled_position(randomness, b, depth));
        detail::take(r, token, depth, node, p_row, -1);
      } else {
        const auto token = traits::on_bonus == Draw::argmax ? rows.argmax(p)
                                                             : rows.draw_target(p, sample_uniform(randomness, b));
        detail::take(r, token, depth, node, p_row, -1);
      }
      if (logprobs && r.extra >= 0) logprobs[depth] = detail::log_p(rows, p, r.extra);
      return r;
    }

    const std::int64_t q_row = has_q ? layout.draft_row(b, c) : -1;
    Residual<View> residual;
    residual.p = p;
    residual.has_q = has_q;
    residual.drafted = drafted;
    if (has_q) {
      residual.q = rows.open(source.draft_row(b, q_row));
      if (!view_ok(residual.q)) return detail::fail(r, FaultKind::bad_value, depth, c, -1, q_row);
      if (!view_has_mass(residual.q)) return detail::fail(r, FaultKind::draft_no_mass, depth, c, -1, q_row);
    }
    Position at;
    at.sequence = b;
    if constexpr (kCoupled) {  // the one sample of this row that every child is compared with
      const auto s = rows.gumbel_argmax(p, coupled_seed(randomness, b), coupled_position(randomness, b, depth));
      if (!s.ok) return detail::fail(r, FaultKind::bad_value, depth, c, p_row, -1);
      if (s.value < 0) return detail::fail(r, FaultKind::target_no_mass, depth, c, p_row, -1);
      at.coupled = s.value;
    }

    // The children, in index order, against what is left of p.
    bool accepted = false, stats_done = false;
    for (;;) {
      at.index = c;
      at.draft = first + c;
      at.token = layout.token(b, c);
      const float p_x = rows.value(p, at.token);
      if (!valid_probability_value(p_x)) {
        return detail::fail(r, FaultKind::bad_value, depth, c, p_row, -1, at.token, p_x);
      }
      const float q_x = has_q ? rows.value(residual.q, at.token) : 1.0f;
      if (!valid_probability_value(q_x)) {
        return detail::fail(r, FaultKind::bad_value, depth, c, -1, q_row, at.token, q_x);
      }
      at.p_x = residual.plain() ? p_x : static_cast<float>(residual.at(rows, at.token));
      at.q_x = residual.plain() ? q_x : static_cast<float>(residual.q_at(rows, residual.steps, at.token, at.token));
      at.u = accept_uniform(randomness, b, c, at.draft);
      if (need.any() && !stats_done) {  // once per node, for all its children
        stats_done = true;
        const FaultKind f = detail::node_stats(rows, source, need, p, has_q ? &residual.q : nullptr, p_row, at);
        if (f == FaultKind::bad_row_max) return detail::fail(r, f, depth, c, p_row, -1, -1, at.p_max);
        if (f != FaultKind::none) return detail::fail(r, f, depth, c, p_row, need.divergence ? q_row : -1);
      }

      const Decision decision = rule.decide(at);
      r.target_checked += decision.target_checked;
      if (decision.accepted) {
        r.relaxed += decision.relaxed;
        if (logprobs) logprobs[depth] = static_cast<float>(::log(static_cast<double>(p_x)));
        accepted = true;
        break;
      }
      std::int32_t next = layout.child(b, node, c);
      if (next >= limit) next = -1;
      if (next < 0 || !kResidual) {
        if (next >= 0) {  // the residual does not change: try the next sibling against p
          c = next;
          continue;
        }
        break;
      }
      // Residual rules: absorb the rejected sibling before testing the next one. A node has
      // fewer children than its sequence has nodes; only rows of fixed room can run out.
      if (residual.steps == 0) residual.siblings = rows.siblings(r.drafted);
      if (residual.steps == residual.siblings.capacity) {
        return detail::fail(r, FaultKind::too_many_children, depth, c, p_row, -1, residual.siblings.capacity);
      }
      const auto z = rows.mass(residual, at.token);
      if (!z.ok) return detail::fail(r, FaultKind::bad_value, depth, c, p_row, q_row);
      if (z.value > 0) residual.absorb(rows, at.token, z.value);  // no mass left: r_i = q_i, keep r_i
      c = next;
    }
    if (accepted) {
      ++r.accepted;
      r.last_node = c;
      node = c;
      continue;
    }

    // No child accepted: the extra token.
    const float u = sample_uniform(randomness, b);
    if (traits::on_reject == Draw::coupled) {
      r.extra = at.coupled;
    } else if (traits::on_reject == Draw::argmax && need.argmax) {
      r.extra = at.p_argmax;  // the statistic already read this row for it
    } else if (traits::on_reject == Draw::argmax) {
      detail::take(r, rows.argmax(p), depth, c, p_row, -1);
    } else if (traits::on_reject == Draw::target) {
      detail::take(r, rows.draw_target(p, u), depth, c, p_row, -1);
    } else {
      auto token = residual.plain() ? rows.draw_residual(p, has_q ? &residual.q : nullptr, at.token, u)
                                    : rows.draw(residual, at.token, u);
      // No mass left after the last sibling: draw from what was left before it.
      if (token.ok && token.value < 0) {
        token = residual.plain() ? rows.draw_target(p, u) : rows.draw(residual, kNoToken, u);
      }
      detail::take(r, token, depth, c, p_row, q_row);
    }
    if (logprobs && r.extra >= 0) logprobs[depth] = detail::log_p(rows, p, r.extra);
    return r;
  }
}

/// The joint walk of block verification (core/block_walk.hpp, included at the end of this file).
SPECVERIFY_HD_TEMPLATE
template <class Rule, class Layout, class Source, class Rows>
SPECVERIFY_HD WalkResult block_walk(const Rule& rule, const Layout& layout, const Source& source,
                                    const Randomness& randomness, std::int32_t b, Rows& rows,
                                    float* logprobs);

/// The joint walk of traversal verification (core/traversal_walk.hpp, included at the end).
SPECVERIFY_HD_TEMPLATE
template <class Rule, class Layout, class Source, class Rows>
SPECVERIFY_HD WalkResult traversal_walk(const Rule& rule, const Layout& layout, const Source& source,
                                        const Randomness& randomness, std::int32_t b, Rows& rows,
                                        float* logprobs);

/// Walks sequence b from the root: at each node, tests the children in index order with the rule
/// and follows the first accepted; where none is, draws the extra token as the rule says (from
/// what is left of p after the rejected siblings, for residual rules), and where the path ends,
/// the bonus token from the last row. Row statistics are computed only at nodes the walk reaches.
/// `logprobs` (nullable, row_width floats) receives log p of each emitted token.
/// Joint rules (rule_traits::joint) take their own walk instead.
SPECVERIFY_HD_TEMPLATE
template <class Rule, class Layout, class Source, class Rows>
SPECVERIFY_HD WalkResult walk(const Rule& rule, const Layout& layout, const Source& source,
                              const Randomness& randomness, std::int32_t b, Rows& rows,
                              float* logprobs = nullptr) {
  if constexpr (rule_traits<Rule>::joint == Joint::block) {
    return block_walk(rule, layout, source, randomness, b, rows, logprobs);
  } else if constexpr (rule_traits<Rule>::joint == Joint::traversal) {
    return traversal_walk(rule, layout, source, randomness, b, rows, logprobs);
  } else {
    return walk_each(rule, layout, source, randomness, b, rows, logprobs);
  }
}

}  // namespace specverify::core

#include "specverify/core/block_walk.hpp"
#include "specverify/core/traversal_walk.hpp"
