// Traversal verification (Weng et al. 2025, arXiv 2505.12398; docs/api.md "Traversal"): the joint
// walk that decides a tree from the leaves up. core::walk takes it for rules whose
// rule_traits::joint is Joint::traversal; it reads rows only through the backend's row operations.
//
// Every node a carries R_a, a sub-distribution of mass |R_a| <= 1: R_root = P_root, and a child c
// of a with token x gets R_c = w_c P_c, w_c = min(R_a(x) / Q_a(x), 1), from a's R when c's turn
// comes. Nodes are visited in post order, children in index order. A child whose subtree failed
// is absorbed by its parent, R_a <- max(R_a - Q_a, 0) / (Z + 1 - |R_a|) with
// Z = sum_v max(R_a(v) - Q_a(v), 0) (R_a kept where the divisor is 0); a node with no child left
// passes iff u_a < |R_a| (the root always does). The first node to pass is the accepted one; the
// extra token is drawn from its R (a leaf's R is w P: from P, as a bonus token).
//
// R_a is a core::Residual: p_scale = w_a, one step per absorbed child with 1 / (Z + 1 - |R|) as its
// inv_mass. So the backends' residual passes give Z and draw from R unchanged, and the weights are
// the same element by element on every backend and instruction set.
//
// Cost: a child's weight reads two values of its parent's rows. A Z pass over a node's rows is
// made for each child that fails before a later sibling, and for the last only where the value
// cannot decide the node's own test: |R| after it is Z / (Z + 1 - |R|) <= |R|, so u >= |R| fails
// and |R| = 1 passes without one. On a chain these are block verification's passes
// (core/block_walk.hpp). A subtree of weight 0 fails without reading a row. A backend's views may
// live in scratch that the next open() reuses, so a node's rows are opened again when the walk
// comes back to it (free for probability rows; a pre-pass for logits).
#pragma once

#include <cstdint>
#include <utility>

#include "specverify/config.hpp"
#include "specverify/core/block_walk.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/rule.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

/// The deepest path the traversal keeps, in nodes: a frame for the root and for each node on the
/// path that has children, in a fixed array so that a CUDA thread can hold it. Deeper trees are
/// invalid_input; chains that long are Block's.
inline constexpr std::int32_t kTraversalDepth = 64;

namespace detail {

/// What the traversal keeps of a node on the path from the root to the node under visit.
struct TraversalFrame {
  std::int32_t node = -1;   // -1: the root
  std::int32_t child = -1;  // the child visited last, -1 before the first
  double w = 1;             // R = w P before any child is absorbed
  double mass = 1;          // |R|
  double a = 1;             // R_parent(x) (w = min(a / q, 1)): the node's own test, multiplied out
  float q = 1;              // Q_parent(x)
  std::int32_t steps = 0;   // children absorbed
  StepSums sums{};          // R's collapse over them (Residual::sums)
  std::int32_t room = 0;    // first of its slots in the sequence's sibling room
  std::int32_t slots = 0;   // its slots: its children but the last (the last is never absorbed)
};

/// The path from the root to the node under visit: a frame per node, the sibling room they share,
/// and the rows last opened (a backend's views may live in scratch the next open() reuses).
template <class Layout, class Source, class Rows>
struct TraversalPath {
  using View = decltype(std::declval<Rows&>().open(std::declval<const Source&>().target_row(0, 0)));
  const Layout& layout;
  const Source& source;
  Rows& rows;
  std::int32_t b;
  WalkResult& r;
  TraversalFrame frames[kTraversalDepth];  // [0]: the root
  std::int32_t top = 0;
  Siblings room{};  // the sequence's sibling room, handed out to the frames on the path
  std::int32_t used = 0;
  View p{}, q{};
  std::int32_t open = -1;  // the frame whose P and Q `p` and `q` hold, -1: none

  SPECVERIFY_HD TraversalPath(const Layout& l, const Source& s, Rows& rw, std::int32_t sequence, WalkResult& result)
      : layout(l), source(s), rows(rw), b(sequence), r(result) {}

  SPECVERIFY_HD_TEMPLATE
  SPECVERIFY_HD std::int32_t children(std::int32_t node) const {
    std::int32_t n = 0;
    for (std::int32_t c = layout.child(b, node, -1); c >= 0; c = layout.child(b, node, c)) ++n;
    return n;
  }

  /// Gives the frame on top slots for `children` - 1 absorbed children (the last never is).
  SPECVERIFY_HD_TEMPLATE
  SPECVERIFY_HD bool give_room(std::int32_t children, std::int32_t depth, std::int32_t node) {
    TraversalFrame& f = frames[top];
    f.room = used;
    f.slots = children > 0 ? children - 1 : 0;
    if (f.slots > 0 && room.capacity == 0) room = rows.siblings(r.drafted);
    if (used + f.slots > room.capacity) {
      detail::fail(r, FaultKind::too_many_children, depth, node, -1, -1, room.capacity);
      return false;
    }
    used += f.slots;
    return true;
  }

  /// Pushes node c, of weight w = min(a / q_x, 1): false on a fault.
  SPECVERIFY_HD_TEMPLATE
  SPECVERIFY_HD bool push(std::int32_t c, double w, double a, float q_x) {
    if (top + 1 == kTraversalDepth) {  // c's children would lie deeper: name the first
      detail::fail(r, FaultKind::too_deep, top + 1, layout.child(b, c, -1), -1, -1, kTraversalDepth);
      return false;
    }
    frames[++top] = TraversalFrame{c, -1, w, w, a, q_x, 0, {}, 0, 0};
    return give_room(children(c), top, c);
  }

  SPECVERIFY_HD void pop() {
    used -= frames[top].slots;
    --top;
  }

  /// Opens frame i's rows (P of its node, the Q its children were drafted from): false on a fault.
  SPECVERIFY_HD_TEMPLATE
  SPECVERIFY_HD bool open_rows(std::int32_t i, std::int32_t some_child) {
    if (open == i) return true;
    const std::int64_t p_row = layout.target_row(b, frames[i].node), q_row = layout.draft_row(b, some_child);
    p = rows.open(source.target_row(b, p_row));
    q = rows.open(source.draft_row(b, q_row));
    open = -1;
    if (!view_ok(p)) return detail::fail(r, FaultKind::bad_value, i, some_child, p_row, -1), false;
    if (!view_ok(q)) return detail::fail(r, FaultKind::bad_value, i, some_child, -1, q_row), false;
    if (!view_has_mass(q)) return detail::fail(r, FaultKind::draft_no_mass, i, some_child, -1, q_row), false;
    open = i;
    return true;
  }

  /// R of frame f over the rows open now.
  SPECVERIFY_HD Residual<View> residual(const TraversalFrame& f) const {
    Residual<View> res;
    res.p = p;
    res.q = q;
    res.has_q = true;
    res.p_scale = f.w;
    res.steps = f.steps;
    res.sums = f.sums;
    // Q is sampled with replacement: no sibling is tracked (Residual::tracked), so the frames share
    // only the rows of the steps.
    res.siblings = {f.slots, room.token + f.room, room.scale + f.room, room.inv_mass + f.room};
    return res;
  }
};

}  // namespace detail

SPECVERIFY_HD_TEMPLATE
template <class Rule, class Layout, class Source, class Rows>
SPECVERIFY_HD WalkResult traversal_walk(const Rule&, const Layout& layout, const Source& source,
                                        const Randomness& randomness, std::int32_t b, Rows& rows,
                                        float* logprobs) {
  using View = decltype(rows.open(source.target_row(b, 0)));
  WalkResult r;
  const std::int32_t first = layout.first(b);
  r.drafted = layout.count(b);
  detail::TraversalPath<Layout, Source, Rows> path(layout, source, rows, b, r);
  if (!path.give_room(path.children(-1), 0, -1)) return r;
  View& p = path.p;
  View& q = path.q;

  // The decision: the accepted node (-1: the root), and how its extra token is drawn.
  std::int32_t accepted = -1;
  std::int32_t after = kNoToken;  // the residual draw's rejected child (kNoToken: R itself)
  bool from_p = true;             // draw from P of the accepted node (a leaf, or a node with R = P)
  std::int32_t failed = -1;       // the child of frames[top] whose subtree just failed
  for (;;) {
    detail::TraversalFrame& f = path.frames[path.top];
    if (failed < 0) {
      const std::int32_t c = layout.child(b, f.node, f.child);
      if (c < 0) break;  // only the root of an empty tree: its bonus token
      f.child = c;
      if (!path.open_rows(path.top, c)) return r;
      const std::int32_t x = layout.token(b, c);
      const float p_x = rows.value(p, x), q_x = rows.value(q, x);
      if (!valid_probability_value(p_x)) {
        return detail::fail(r, FaultKind::bad_value, path.top, c, layout.target_row(b, f.node), -1, x, p_x);
      }
      if (!valid_probability_value(q_x)) {
        return detail::fail(r, FaultKind::bad_value, path.top, c, -1, layout.draft_row(b, c), x, q_x);
      }
      const double a = path.residual(f).at(rows, x);
      const double w = detail::block_weight(a, q_x);
      ++r.target_checked;
      if (w > 0.0 && layout.child(b, c, -1) >= 0) {
        if (!path.push(c, w, a, q_x)) return r;
        continue;
      }
      // A leaf passes iff u < w, written as block verification's last test.
      if (w > 0.0 && static_cast<double>(accept_uniform(randomness, b, c, first + c) * q_x) < a) {
        accepted = c;
        break;
      }
      failed = c;
      continue;
    }

    // Child `failed` of f failed: absorb it, or, after the last child, f's own test.
    const std::int32_t x = layout.token(b, failed);
    const bool last = layout.child(b, f.node, failed) < 0;
    const float u = f.node >= 0 ? accept_uniform(randomness, b, f.node, first + f.node) : 0.0f;
    bool pass = last && (f.node < 0 || f.mass >= 1.0);  // |R| = 1 stays 1: the root, nodes of weight 1
    bool decided = pass;
    if (last && !decided) {  // u >= |R| >= the mass after absorbing fails without Z
      decided = f.steps == 0 ? !(static_cast<double>(u * f.q) < f.a) : !(static_cast<double>(u) < f.mass);
    }
    if (!decided || !last) {
      if (!path.open_rows(path.top, failed)) return r;
      Residual<View> res = path.residual(f);
      const auto z = rows.mass(res, x);
      if (!z.ok) return detail::fail(r, FaultKind::bad_value, path.top, failed, layout.target_row(b, f.node), layout.draft_row(b, failed));
      // > 0 unless the failure had probability 0; 1 - |R| first, so that |R| = 1 stays exactly 1
      const double divisor = z.value + (1.0 - f.mass);
      if (!last) {
        if (divisor > 0.0) {
          res.absorb(rows, x, divisor);
          f.steps = res.steps;
          f.sums = res.sums;
          f.mass = z.value / divisor;
        }
        failed = -1;
        continue;
      }
      pass = divisor > 0.0 && static_cast<double>(u) * divisor < z.value;
    }
    if (pass) {
      accepted = f.node;
      after = x;
      from_p = false;
      break;
    }
    failed = f.node;
    path.pop();
  }

  // The extra token: from P of an accepted leaf (or of an empty tree's root), else from what is
  // left of the accepted node's R after its last child (from R itself where that has no mass).
  std::int32_t depth = 0;
  for (std::int32_t n = accepted; n >= 0; n = layout.parent(b, n)) ++depth;
  r.accepted = depth;
  r.last_node = accepted;
  const float u = sample_uniform(randomness, b);
  const std::int64_t p_row = layout.target_row(b, accepted);
  if (from_p) {
    p = rows.open(source.target_row(b, p_row));
    path.open = -1;
    if (!view_ok(p)) return detail::fail(r, FaultKind::bad_value, depth, accepted, p_row, -1);
    detail::take(r, rows.draw_target(p, u), depth, accepted, p_row, -1);
  } else {
    const detail::TraversalFrame& f = path.frames[path.top];
    if (!path.open_rows(path.top, layout.child(b, f.node, -1))) return r;
    const Residual<View> res = path.residual(f);
    // Weight 1 and nothing absorbed: the plain residual max(P - Q, 0), as the per-draft walk draws it.
    auto token = res.plain() && f.w == 1.0 ? rows.draw_residual(p, &q, after, u) : rows.draw(res, after, u);
    if (token.ok && token.value < 0) token = res.plain() ? rows.draw_target(p, u) : rows.draw(res, kNoToken, u);
    detail::take(r, token, depth, accepted, p_row, layout.draft_row(b, layout.child(b, f.node, -1)));
  }
  if (!logprobs || r.fault.kind != FaultKind::none) return r;
  logprobs[depth] = detail::log_p(rows, p, r.extra);
  for (std::int32_t n = accepted, j = depth - 1; n >= 0; n = layout.parent(b, n), --j) {
    const View parent = rows.open(source.target_row(b, layout.target_row(b, layout.parent(b, n))));
    logprobs[j] = detail::log_p(rows, parent, layout.token(b, n));
  }
  return r;
}

}  // namespace specverify::core
