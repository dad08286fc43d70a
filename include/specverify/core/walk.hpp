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

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/core/block_walk.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/core/traversal_walk.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/rule.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

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
