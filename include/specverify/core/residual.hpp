// What is left of p at a tree node after some of its children were rejected (recursive rejection
// sampling, docs/api.md "Trees"). r_1 = p as given; rejecting child c_i with draft distribution q_i
// gives r_{i+1} = max(r_i - q_i, 0) / Z_i, Z_i = sum_v max(r_i(v) - q_i(v), 0), where q_i is
//   sampled:                      q
//   sampled_without_replacement:  q without c_1 .. c_{i-1}, renormalised (Jeon et al. 2024)
//   deterministic, one-hot draft: e_{c_i} (the target-only form: r(c_i) <- 0, renormalised)
// One-hot drafts are kept unnormalised, as the target-only form is stated: the weights are s p with
// the rejected tokens at 0, and Z_i is their sum (so r_{i+1} = w / Z_i). Those sums are the row's
// sum less the rejected tokens' terms, exactly (core::FixedSum on one grid, the row's), so a
// backend that keeps the row's chunk sums (OneHotSums) takes every later mass and the draw
// without another pass.
// A chain never has a second sibling, so its residual is always the plain max(p - q, 0), or, for
// block verification (core/block_walk.hpp), the scaled max(s p - q, 0): r_1 = s p, s = p_scale.
// Traversal verification (core/traversal_walk.hpp) uses both: r_1 = s p, and its steps divide by
// Z_i + 1 - |r_i| instead of Z_i (inv_mass is whatever the walk absorbs with).
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/core/fixed_sum.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

/// A one-hot residual's row, summarised once per node: the chunk sums of s p over every token, at
/// the scale its weights are summed at; the removed tokens' terms are taken back from them
/// (Residual::one_hot_chunks). `removed` holds the terms of the first `folded` siblings.
struct OneHotSums {
  ChunkSums row;
  double scale = 1.0;
  bool ready = false;  // taken at this node (a fresh Siblings room is not)
  std::int32_t folded = 0;
  FixedSum removed;
};

/// Room for the siblings one node's residual absorbs, in the backend's rows: a node has at most
/// as many rejected children as its sequence has nodes, so the walk asks for that much
/// (Rows::siblings) at the first sibling it absorbs; the room is reused from node to node.
struct Siblings {
  std::int32_t capacity = 0;
  std::int32_t* token{};     // [capacity]: c_1 .. c_steps
  double* scale{};           // [capacity]: q_i = scale_i * q off the earlier siblings (without replacement)
  double* inv_mass{};        // [capacity]: 1 / Z_i
  // One-hot drafts and without replacement (Residual::tracked), where r at a sibling's token
  // cannot be collapsed: what the steps one by one leave there, kept step by step.
  double* left{};            // [capacity]: at c_i's first entry, r at c_i after every absorbed step
  std::int32_t* live{};      // [capacity]: the entries whose `left` is not 0 (0 stays 0)
  // Optional, all three or none, over the row's tokens (and one past them): siblings found
  // without a scan. The residual clears the bits at its first sibling (one residual at a time
  // holds the room); `first` is read only where v is marked.
  std::int32_t words = 0;    // of marks and of zeros
  std::uint64_t* marks{};    // [words] or nullptr: bit v set for every sibling token v
  std::uint64_t* zeros{};    // [words]: bit v set once r(v) is 0 for good
  std::int32_t* first{};     // [vocab + 1]: the first entry of token v, where v is marked
  // Optional: the row's summary for a one-hot residual, kept by backends whose passes can use it.
  OneHotSums* summary{};

  /// The first i < end with token[i] == v, or -1, for end <= the entries marked (no bit is read
  /// before the first entry: the residual clears them as it absorbs it).
  SPECVERIFY_HD std::int32_t find(std::int32_t v, std::int32_t end) const {
    if (marks) return end > 0 && (marks[v >> 6] >> (v & 63)) & 1 ? first[v] : -1;
    for (std::int32_t i = 0; i < end; ++i) {
      if (token[i] == v) return i;
    }
    return -1;
  }
  /// No sibling marked yet.
  SPECVERIFY_HD void clear() {
    for (std::int32_t w = 0; marks && w < words; ++w) marks[w] = zeros[w] = 0;
  }
  /// Makes entry i, written, found by its token (siblings marked in index order).
  SPECVERIFY_HD void mark(std::int32_t i) {
    const std::int32_t v = token[i];
    if (!marks || find(v, i) >= 0) return;
    marks[v >> 6] |= std::uint64_t{1} << (v & 63);
    first[v] = i;
  }
  /// Entry i's r (its token's first entry) came to 0, where it stays.
  SPECVERIFY_HD void settle(std::int32_t i) {
    const std::int32_t v = token[i];
    if (zeros) zeros[v >> 6] |= std::uint64_t{1} << (v & 63);
  }
};

/// Fixed room for N siblings, for rows that cannot grow (a CUDA block: each thread keeps a copy).
template <std::int32_t N>
struct FixedSiblings {
  std::int32_t token[N];
  double scale[N];
  double inv_mass[N];
  double left[N];
  std::int32_t live[N];
  SPECVERIFY_HD Siblings room() { return {N, token, scale, inv_mass, left, live}; }
};

/// The collapse's running sums over the absorbed steps (see Residual::collapse), kept by
/// Residual::absorb so that no weight loops over the steps: S and P.
struct StepSums {
  double shift = 0, scale = 1;
};

template <class View>
struct Residual {
  View p{}, q{};
  double p_scale = 1;  // s in r_1 = s * p: 1 but in block and traversal verification
  bool has_q = false;  // false: every q_i is one-hot on its child (the weights stay unnormalised)
  Drafted drafted = Drafted::sampled;
  std::int32_t steps = 0;  // siblings absorbed so far, in `siblings`
  Siblings siblings{};     // token, scale, inv_mass of c_1 .. c_steps
  StepSums sums{};         // over c_1 .. c_steps (read where steps > 0)
  std::int32_t live = 0;   // siblings.live[0 .. live)
  double removed = 0;                  // q(c_1) + ... + q(c_steps), for the without-replacement scale
  double q_total = 1;                  // sum_v q(v), summed at the first absorb (without replacement):
                                       //   1 - removed is rounding noise once siblings hold most of q

  SPECVERIFY_HD bool plain() const { return steps == 0; }
  SPECVERIFY_HD bool one_hot() const { return !has_q; }
  /// Whether a sibling's token takes the steps one by one (see weight()): its q_i are not c_i q.
  SPECVERIFY_HD bool tracked() const { return has_q && drafted == Drafted::sampled_without_replacement; }
  /// Whether the siblings are found by token (Siblings::marks, where the room has them): those
  /// that take the steps one by one, and one-hot drafts' rejected tokens, which weigh 0.
  SPECVERIFY_HD bool marked() const { return one_hot() || tracked(); }

  /// q_i at v, i = 0 .. steps (i == steps: the draft under test now, child `current`).
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD double q_at(Rows& rows, std::int32_t i, std::int32_t current, std::int32_t v) const {
    const bool without = has_q && drafted == Drafted::sampled_without_replacement;
    return q_step(rows, i, current, v, without ? siblings.find(v, steps) : -1);
  }
  SPECVERIFY_HD double current_scale() const { return removed < q_total ? 1.0 / (q_total - removed) : 0.0; }

  /// The absorbed steps collapsed (see weight()): off the sibling tokens every q_i is c_i q
  /// (c_i = 1 sampled, the without-replacement scale, 0 one-hot), so with P = s prod m_i (m_i the
  /// steps' inv_mass) and S = sum c_i / P_i (P_i the product before step i, P_1 = s),
  /// r - q_current = P (p - S q) there.
  struct Collapse {
    double shift = 0;    // S, including the current sibling's c / P
    double scale = 1;    // P
    bool usable = true;  // S and P finite and P > 0
  };
  SPECVERIFY_HD Collapse collapse(std::int32_t current) const {
    Collapse c;
    c.scale = steps > 0 ? sums.scale : p_scale;
    c.shift = steps > 0 ? sums.shift : 0.0;
    const bool without = drafted == Drafted::sampled_without_replacement;
    if (current >= 0 && has_q) c.shift += (without ? current_scale() : 1.0) / c.scale;
    c.usable = c.scale > 0.0 && c.scale <= 1.7976931348623157e308 && c.shift <= 1.7976931348623157e308;
    return c;
  }

  /// A bound on the weights from the row's largest p (a function of the row and of this state, so
  /// every worker picks the same FixedSum scale): each weight is at most P p (P the collapse's
  /// scale, s before any step), and at most 1 once a sibling was absorbed (what is left of p then
  /// sums to at most 1; 2 leaves room for rounding). One-hot weights are s p at any step: their
  /// grid is the row's, whichever tokens were removed.
  SPECVERIFY_HD double weight_bound(float largest_p) const {
    if (one_hot()) return p_scale * fixed_bound(largest_p);
    const double b = collapse(kNoToken).scale * fixed_bound(largest_p);
    return steps > 0 && !(b <= 2.0) ? 2.0 : b;
  }

  /// The weight of v in the draw (or mass) after rejecting `current`: max(r(v) - q_current(v), 0),
  /// or r(v) itself for current = kNoToken. One definition, element by element, for every backend
  /// and instruction set (a backend computes it lane by lane with these roundings):
  ///   one-hot drafts: s p(v), 0 at `current` and at the absorbed siblings' tokens;
  ///   no sibling absorbed, or v a tracked sibling's token, or the collapse unusable: the steps
  ///     one by one, r_1 = s p, then r_i - q_i with one rounding (a fused multiply-add) at each step;
  ///   otherwise the collapse: max(p - S q, 0) P, p - S q with one rounding.
  /// The steps one by one cost O(1) all the same at a tracked sibling's token: its r is kept as
  /// the steps come (siblings.left).
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD double weight(Rows& rows, std::int32_t current, std::int32_t v, const Collapse& c) const {
    if (one_hot()) return zeroed(v, current) ? 0.0 : p_scale * static_cast<double>(rows.value(p, v));
    const std::int32_t j = tracked() ? siblings.find(v, steps) : -1;
    if (j >= 0) return finish(rows, current, v, j, siblings.left[j], siblings.inv_mass[steps - 1]);
    if (steps > 0 && c.usable) {
      const double d = fused(-c.shift, static_cast<double>(rows.value(q, v)), static_cast<double>(rows.value(p, v)));
      return d > 0 ? d * c.scale : 0.0;
    }
    return fresh(rows, current, v);
  }

  /// Whether a one-hot residual weighs v at 0: `current` or an absorbed sibling's token.
  SPECVERIFY_HD bool zeroed(std::int32_t v, std::int32_t current) const {
    return v == current || (steps > 0 && siblings.find(v, steps) >= 0);
  }

  /// r(v), the residual the tests of the next sibling compare against (one-hot drafts: the weight
  /// over the last mass, w / Z_i).
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD double at(Rows& rows, std::int32_t v) const {
    const double w = weight(rows, -1, v, collapse(-1));
    return one_hot() && steps > 0 ? w * siblings.inv_mass[steps - 1] : w;
  }

  /// A one-hot residual's weights after rejecting `current`, chunk by chunk, from the row's
  /// summary (`siblings.summary`, ready): its chunk sums less the terms of the removed tokens, each
  /// token once. The same words as a pass over the weights at the summary's scale (FixedSum).
  /// Folds the siblings absorbed since the last call into the summary, so a node's calls cost
  /// O(1) each, but for the copy of the chunk sums.
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD void one_hot_chunks(Rows& rows, std::int32_t current, std::int32_t n, ChunkSums& out) const {
    out = siblings.summary->row;
    out.total.remove(fold(rows));
    const std::int32_t chunk = chunk_length(n);
    for (std::int32_t i = 0; i < steps; ++i) {
      if (first_entry(i)) out.chunk[siblings.token[i] / chunk].remove(term(rows, siblings.token[i]));
    }
    if (current >= 0 && !zeroed(current, kNoToken)) {
      const FixedSum t = term(rows, current);
      out.total.remove(t);
      out.chunk[current / chunk].remove(t);
    }
  }

  /// one_hot_chunks' total alone, in O(1) for each sibling absorbed since the last call.
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD FixedSum one_hot_total(Rows& rows, std::int32_t current) const {
    FixedSum total = siblings.summary->row.total;
    total.remove(fold(rows));
    if (current >= 0 && !zeroed(current, kNoToken)) total.remove(term(rows, current));
    return total;
  }

  /// Absorbs the rejected child `current` whose step left mass `z` (> 0); steps < siblings.capacity.
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD void absorb(Rows& rows, std::int32_t current, double z) {
    if (steps == 0 && marked()) siblings.clear();
    siblings.token[steps] = current;
    siblings.scale[steps] = current_scale();  // the scale the mass z was computed with
    if (tracked()) track(rows, current);
    if (has_q && drafted == Drafted::sampled_without_replacement) {
      if (steps == 0) {  // the q row's mass, by the backend's mass pass over q as a residual
        Residual<View> row;
        row.p = q;
        q_total = rows.mass(row, -1).value;  // q was validated by the pass that rejected `current`
      }
      removed += rows.value(q, current);
    }
    siblings.inv_mass[steps] = 1.0 / z;
    if (marked()) siblings.mark(steps);
    if (one_hot()) {  // its token weighs 0 from now on
      siblings.settle(steps);
      ++steps;
      return;
    }
    // The collapse's sums, step by step as its definition takes them.
    if (steps == 0) sums = {0.0, p_scale};
    sums.shift += (drafted == Drafted::sampled_without_replacement ? siblings.scale[steps] : 1.0) / sums.scale;
    sums.scale *= siblings.inv_mass[steps];
    ++steps;
  }

  /// Marks the siblings of a residual whose steps were copied in (token and left written for
  /// each), as absorbing them marked them.
  SPECVERIFY_HD void mark_copied() {
    siblings.clear();
    for (std::int32_t i = 0; i < steps; ++i) {
      const bool first = siblings.find(siblings.token[i], i) < 0;
      siblings.mark(i);
      if (first && (one_hot() || !(siblings.left[i] > 0))) siblings.settle(i);
    }
  }

 private:
  /// q_i at v, whose first sibling entry is `first` (-1: none).
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD double q_step(Rows& rows, std::int32_t i, std::int32_t current, std::int32_t v,
                              std::int32_t first) const {
    const std::int32_t c = i < steps ? siblings.token[i] : current;
    if (!has_q) return v == c ? 1.0 : 0.0;
    if (drafted != Drafted::sampled_without_replacement) return rows.value(q, v);
    if (first >= 0 && first < i) return 0.0;  // removed from q_i with c_first
    return (i < steps ? siblings.scale[i] : current_scale()) * rows.value(q, v);
  }

  /// The current sibling's step from r = a b (held unrounded): the weight's last rounding.
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD double finish(Rows& rows, std::int32_t current, std::int32_t v, std::int32_t first, double a,
                              double b) const {
    if (current < 0) return a * b;
    const double d = fused(a, b, -q_step(rows, steps, current, v, first));
    return d > 0 ? d : 0.0;
  }

  /// Whether entry i is the first of its token (a duplicate child removes nothing more).
  SPECVERIFY_HD bool first_entry(std::int32_t i) const {
    const std::int32_t first = siblings.find(siblings.token[i], i);
    return first < 0 || first == i;
  }

  /// The summary's `removed` once the siblings absorbed since the last call are folded into it.
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD FixedSum fold(Rows& rows) const {
    OneHotSums& s = *siblings.summary;
    for (; s.folded < steps; ++s.folded) {
      if (first_entry(s.folded)) s.removed.merge(term(rows, siblings.token[s.folded]));
    }
    return s.removed;
  }

  /// A one-hot residual's term of v on the summary's grid, as if v were not removed.
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD FixedSum term(Rows& rows, std::int32_t v) const {
    return FixedSum::term(p_scale * static_cast<double>(rows.value(p, v)) * siblings.summary->scale);
  }

  /// The weight of v, which no sibling carries, by the steps one by one, r_1 = s p, then r_i - q_i
  /// with one rounding at each step.
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD double fresh(Rows& rows, std::int32_t current, std::int32_t v) const {
    double a = p_scale, b = rows.value(p, v);  // r = a b, held unrounded across each step
    for (std::int32_t s = 0; s < steps; ++s) {
      const double d = fused(a, b, -q_step(rows, s, -1, v, -1));
      a = d > 0 ? d : 0.0;
      b = siblings.inv_mass[s];
    }
    return finish(rows, current, v, -1, a, b);
  }

  /// Before absorbing `current` (its token written): the live siblings take its step (a sibling
  /// left at 0 stays there: fma(0, m, -q) is at most 0, or NaN, and either gives 0), and a token
  /// no sibling carries yet starts its entry with r after its own step.
  SPECVERIFY_HD_TEMPLATE
  template <class Rows>
  SPECVERIFY_HD void track(Rows& rows, std::int32_t current) {
    for (std::int32_t l = 0; l < live;) {
      const std::int32_t j = siblings.live[l];
      const double d = fused(siblings.left[j], siblings.inv_mass[steps - 1],
                             -q_step(rows, steps, current, siblings.token[j], j));
      siblings.left[j] = d > 0 ? d : 0.0;
      if (d > 0) {
        ++l;
      } else {
        siblings.settle(j);
        siblings.live[l] = siblings.live[--live];
      }
    }
    if (siblings.find(current, steps) >= 0) return;
    const double r = fresh(rows, current, current);
    siblings.left[steps] = r;
    if (r > 0) {
      siblings.live[live++] = steps;
    } else {
      siblings.settle(steps);
    }
  }
};

template <class T>
struct Scalar {
  T value{};
  bool ok = true;
};

/// The plain backend's residual operations (any backend may use them): one pass in index order,
/// summed as a FixedSum (so the same as any backend's lanes or blocks). `x` is the sibling just
/// rejected (kNoToken: r itself). Residual::weight_bound sets the scale.
SPECVERIFY_HD_TEMPLATE
template <class Rows, class View>
SPECVERIFY_HD Scalar<FixedSum> residual_sum(Rows& rows, const Residual<View>& r, std::int32_t x, double& scale) {
  const typename Residual<View>::Collapse c = r.collapse(x);
  float largest = 0.0f;
  for (std::int32_t v = 0; v < rows.n; ++v) {
    const float p = rows.value(r.p, v), q = r.has_q ? rows.value(r.q, v) : 0.0f;
    if (!(p >= 0.0f && p <= 3.402823466e+38f && q >= 0.0f && q <= 3.402823466e+38f)) return {FixedSum{}, false};
    largest = p > largest ? p : largest;
  }
  const double bound = r.weight_bound(largest);
  scale = fixed_in_domain(bound, rows.n) ? 1.0 : fixed_scale(bound, rows.n);
  FixedSum total;
  for (std::int32_t v = 0; v < rows.n; ++v) total.add(r.weight(rows, x, v, c) * scale);
  return {total, true};
}

SPECVERIFY_HD_TEMPLATE
template <class Rows, class View>
SPECVERIFY_HD Scalar<double> residual_mass(Rows& rows, const Residual<View>& r, std::int32_t x) {
  double scale = 1.0;
  const Scalar<FixedSum> total = residual_sum(rows, r, x, scale);
  return {total.value.value() / scale, total.ok};
}

/// Draws from the weights residual_mass sums: the smallest v with w_0 + ... + w_v > u * sum(w);
/// -1 when there is no mass.
SPECVERIFY_HD_TEMPLATE
template <class Rows, class View>
SPECVERIFY_HD Scalar<std::int32_t> residual_draw(Rows& rows, const Residual<View>& r, std::int32_t x,
                                                 float u) {
  double scale = 1.0;
  const Scalar<FixedSum> total = residual_sum(rows, r, x, scale);
  if (!total.ok) return {-1, false};
  if (!total.value.positive()) return {-1, true};
  const typename Residual<View>::Collapse c = r.collapse(x);
  const double threshold = static_cast<double>(u) * total.value.value();
  FixedSum before;
  for (std::int32_t v = 0; v < rows.n; ++v) {
    const double w = r.weight(rows, x, v, c);
    if (!(w > 0.0)) continue;
    before.add(w * scale);
    if (before.value() > threshold) return {v, true};
  }
  return {-1, true};  // unreachable: the prefix reaches the total
}

}  // namespace specverify::core
