// Block verification (Sun et al. 2024, arXiv 2403.10444, Algorithm 2): the joint walk that
// decides a whole chain at once. core::walk takes it for rules whose rule_traits::joint is
// Joint::block; it reads rows only through the backend's row operations, like the per-draft walk.
//
// Chain x_1 .. x_k, P_j the target row after j drafts (P_k the bonus row), Q_j the draft row
// x_{j+1} was drawn from (one-hot drafts: Q_j = e_{x_{j+1}}):
//   p_0 = 1,  p_i = min(p_{i-1} P_{i-1}(x_i) / Q_{i-1}(x_i), 1)
//   h_i = Z_i / (Z_i + 1 - p_i) for i < k (1 when the denominator is 0),  h_k = p_k,
//     Z_i = sum_v max(p_i P_i(v) - Q_i(v), 0)   (one-hot drafts: p_i (1 - P_i(x_{i+1})))
//   tau = the largest i with u_i < h_i (0 if none); emit x_1 .. x_tau, then the bonus token from
//   P_k if tau = k, else a draw from max(p_tau P_tau - Q_tau, 0) (from P_tau if it has no mass).
// The emitted sequence follows the target exactly, and tau is at least the per-draft walk's n_b
// in expectation.
//
// Cost: the values P_{i-1}(x_i), Q_{i-1}(x_i) of every position are read first (p_k needs them
// all). Then i = k, k-1, ... is tested lazily, stopping at the first pass, and a Z pass over a
// row is made only where the value cannot decide: h_i <= p_i (Z_i <= p_i for distributions), so
// u_i >= p_i fails and p_i = 1 passes without one; one-hot drafts never need one. An all-accepted
// chain costs what the per-draft walk's does. Rows are read as distributions (each sums to 1): the
// closed form and the bound rely on it.
//
// For k <= 1 this is Standard bit for bit: the one test is u * Q(x) < P(x) in float, the draw the
// same residual draw. Every test is written multiplied out, so u = 0 never accepts P(x) = 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "specverify/config.hpp"
#include "specverify/core/chain_layout.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/rule.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

/// Positions whose p_i the walk keeps at once. Longer chains are tested in windows of this many
/// from the end, re-reading the values before each window (rows are re-opened, nothing stored).
inline constexpr std::int32_t kBlockWindow = 32;

namespace detail {

/// What the block walk keeps of position i (1-based) while testing it.
struct BlockStep {
  double p = 0;       // p_i
  float p_next = 0;   // P_i(x_{i+1}), for the one-hot closed form of Z_i
};

/// p_i from a = p_{i-1} P_{i-1}(x_i) and q = Q_{i-1}(x_i): min(a / q, 1), 0 when a is 0 (even if
/// q is: a token the target excludes ends every block through it).
SPECVERIFY_HD inline double block_weight(double a, float q) {
  return a <= 0.0 ? 0.0 : (a >= q ? 1.0 : a / q);
}

}  // namespace detail

SPECVERIFY_HD_TEMPLATE
template <class Rule, class Layout, class Source, class Rows>
SPECVERIFY_HD WalkResult block_walk(const Rule&, const Layout& layout, const Source& source,
                                    const Randomness& randomness, std::int32_t b, Rows& rows,
                                    float* logprobs) {
  // A chain layout: ChainLayout, or one that walks fewer of its drafts (python/src/verify_padded.cpp).
  static_assert(std::is_base_of<ChainLayout, Layout>::value,
                "Block verification decides a chain jointly and is defined on chains only "
                "(docs/api.md \"Block verification\"): verify it with a ChainBatch, not a TreeBatch");
  using View = decltype(rows.open(source.target_row(b, 0)));
  WalkResult r;
  const std::int32_t first = layout.first(b), k = layout.count(b);
  const bool has_q = source.has_draft();
  r.drafted = k;

  // tau: the largest passing i, searched window by window from the end.
  detail::BlockStep steps[kBlockWindow];
  double a_last = 0.0;  // p_{k-1} P_{k-1}(x_k): the last test, h_k = p_k, multiplied out
  float q_last = 1.0f;  // Q_{k-1}(x_k)
  std::int32_t tau = 0, lo = k;
  bool found = false;
  for (std::int32_t hi = k; hi > 0 && !found; hi = lo) {
    lo = hi > kBlockWindow ? hi - kBlockWindow : 0;
    // The values of positions 1 .. hi (+1 for P_hi(x_{hi+1})), carrying p_i; keep (lo, hi].
    const std::int32_t last = hi < k ? hi + 1 : k;
    double p = 1.0;
    for (std::int32_t i = 1; i <= last; ++i) {
      const std::int32_t node = i - 1, x = layout.token(b, node);
      const std::int64_t p_row = layout.target_row(b, node - 1);
      const View p_view = rows.open(source.target_row(b, p_row));
      if (!view_ok(p_view)) return detail::fail(r, FaultKind::bad_value, node, node, p_row, -1);
      const float p_x = rows.value(p_view, x);
      if (!valid_probability_value(p_x)) return detail::fail(r, FaultKind::bad_value, node, node, p_row, -1, x, p_x);
      float q_x = 1.0f;
      if (has_q) {
        const std::int64_t q_row = layout.draft_row(b, node);
        const View q_view = rows.open(source.draft_row(b, q_row));
        if (!view_ok(q_view)) return detail::fail(r, FaultKind::bad_value, node, node, -1, q_row);
        if (!view_has_mass(q_view)) return detail::fail(r, FaultKind::draft_no_mass, node, node, -1, q_row);
        q_x = rows.value(q_view, x);
        if (!valid_probability_value(q_x)) return detail::fail(r, FaultKind::bad_value, node, node, -1, q_row, x, q_x);
      }
      if (i - 1 > lo && i - 1 <= hi) steps[i - 2 - lo].p_next = p_x;
      const double a = p * static_cast<double>(p_x);
      if (i == k) {
        a_last = a;
        q_last = q_x;
      }
      p = detail::block_weight(a, q_x);
      if (i > lo && i <= hi) steps[i - 1 - lo].p = p;
    }

    for (std::int32_t i = hi; i > lo && !found; --i) {
      const float u = accept_uniform(randomness, b, i - 1, first + i - 1);
      bool pass;
      if (i == k) {
        // u < p_k as u Q < p_{k-1} P, with u Q rounded in float: for k = 1 Standard's own test.
        pass = static_cast<double>(u * q_last) < a_last;
      } else {
        const double p_i = steps[i - 1 - lo].p;
        if (p_i >= 1.0) {
          pass = true;  // h_i = 1
        } else if (!(u < p_i)) {
          pass = false;  // h_i <= p_i
        } else {
          double z;
          if (!has_q) {
            z = p_i * (1.0 - static_cast<double>(steps[i - 1 - lo].p_next));
            z = z > 0.0 ? z : 0.0;
          } else {
            const std::int64_t p_row = layout.target_row(b, i - 1), q_row = layout.draft_row(b, i);
            Residual<View> residual;
            residual.p = rows.open(source.target_row(b, p_row));
            residual.q = rows.open(source.draft_row(b, q_row));
            residual.has_q = true;
            residual.p_scale = p_i;
            const auto mass = rows.mass(residual, layout.token(b, i));
            if (!mass.ok) return detail::fail(r, FaultKind::bad_value, i, i, p_row, q_row);
            z = mass.value;
          }
          pass = static_cast<double>(u) * (z + 1.0 - p_i) < z;  // u < h_i; z > 0 here unless h_i = 0
        }
      }
      if (pass) {
        tau = i;
        found = true;
      }
    }
  }
  r.accepted = tau;
  r.last_node = tau - 1;
  r.target_checked = k;  // every position's p entered p_k
  for (std::int32_t j = 0; logprobs && j < tau; ++j) {  // only the emitted slots are written
    const View p = rows.open(source.target_row(b, layout.target_row(b, j - 1)));
    logprobs[j] = detail::log_p(rows, p, layout.token(b, j));
  }

  // The extra token, from row tau.
  const float u = sample_uniform(randomness, b);
  const std::int64_t p_row = layout.target_row(b, tau - 1);
  const View p = rows.open(source.target_row(b, p_row));
  if (!view_ok(p)) return detail::fail(r, FaultKind::bad_value, tau, tau - 1, p_row, -1);  // the bonus row, unread so far
  if (tau == k) {
    detail::take(r, rows.draw_target(p, u), tau, tau - 1, p_row, -1);
  } else {
    const std::int32_t x = layout.token(b, tau);
    const std::int64_t q_row = has_q ? layout.draft_row(b, tau) : -1;
    Residual<View> residual;
    residual.p = p;
    residual.has_q = has_q;
    residual.p_scale = tau > 0 ? steps[tau - 1 - lo].p : 1.0;
    if (has_q) residual.q = rows.open(source.draft_row(b, q_row));
    // Scale 1 is the per-draft walk's residual; one-hot drafts need no scale at all (P_tau
    // without x_{tau+1}, as p_tau P_tau(x_{tau+1}) <= 1).
    auto token = !has_q || residual.p_scale == 1.0
                     ? rows.draw_residual(p, has_q ? &residual.q : nullptr, x, u)
                     : rows.draw(residual, x, u);
    if (token.ok && token.value < 0) token = rows.draw_target(p, u);
    detail::take(r, token, tau, tau, p_row, q_row);
  }
  if (logprobs && r.extra >= 0) logprobs[tau] = detail::log_p(rows, p, r.extra);
  return r;
}

}  // namespace specverify::core
