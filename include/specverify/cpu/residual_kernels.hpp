// CPU row work for a node's residual (core/residual.hpp): what is left of p after rejected
// siblings in a tree, or block verification's scaled max(s p - q, 0) in a chain. Its mass, and the
// draw from it (cpu/draw.hpp). Every element's weight is core::Residual::weight's, computed lane
// by lane with the same roundings, so the mass and the token are those of the scalar definition
// and of every instruction set. The rows are read through a ResidualReader: probability rows
// here, logits views in cpu/logit_residual.hpp.
//
// Speed: the weight has one form per pass for every element but the sibling tokens:
//   one-hot drafts:            s p, the rejected tokens at 0;
//   no sibling absorbed yet:   max(s p - q_current, 0), one fused multiply-add;
//   after absorbed siblings:   max(p - S q, 0) P, whatever their number (the collapse).
// Sibling tokens (one-hot drafts, and the absorbed ones without replacement) are found in the
// siblings' marks (a bit per token): those whose r came to 0 (every one-hot draft's) weigh 0 in
// the vector, the few others are patched lane by lane with the scalar definition, which keeps
// their r (O(1) each). So a pass costs about the same for any number of siblings.
// One-hot drafts need one pass per node at most: it keeps the row's chunk sums
// (core::OneHotSums, in the rows' sibling room), from which every later mass and the draw take
// the rejected tokens' terms back exactly; only the chunk holding the crossing is read again.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>

#include "specverify/core/fixed_sum.hpp"
#include "specverify/core/logit_rows.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/cpu/draw.hpp"
#include "specverify/cpu/fused.hpp"
#include "specverify/cpu/lanes.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/cpu/split_row.hpp"

namespace specverify::cpu {

/// How ResidualLanes reads rows of View (specialised per row source): a reader has value(row, v),
/// read(r, i, p, q) for the W values at i of p and q (0 without q), and largest_p(r, n), every
/// value read valid and the largest p of the whole row.
template <class Arch, class View>
struct ResidualReader;

/// Probability rows: screened for validity and their largest p as they are read.
template <class Arch>
struct ResidualReader<Arch, const float*> {
  using F = xsimd::batch<float, Arch>;
  PairScreen<Arch> screen;

  float value(const float* row, std::int32_t v) const { return row[v]; }
  SPECVERIFY_ALWAYS_INLINE void read(const core::Residual<const float*>& r, std::int32_t i, F& p, F& q) {
    p = F::load_unaligned(r.p + i);
    if (r.has_q) {
      q = F::load_unaligned(r.q + i);
      screen.add(p, q);
    } else {
      q = F(0.0f);
      screen.add(p);
    }
  }
  Checked<float> largest_p(const core::Residual<const float*>& r, std::int32_t n) const {
    return screen.largest_p(r.p, r.has_q ? r.q : nullptr, n);
  }
};

namespace detail {

/// cpu::draw's functors over the weights of `r` after rejecting `current` (kNoToken: r itself).
/// It keeps its own copy of r (a split row's parts each copy one lanes: their views' read cursors
/// stay their own), and reads the siblings' marks.
template <class Arch, class View>
class ResidualLanes {
 public:
  using F = xsimd::batch<float, Arch>;
  using D = xsimd::batch<double, Arch>;
  static constexpr std::int32_t WF = F::size;
  static_assert(WF < 64, "a vector's marks in one word");

  ResidualLanes(const core::Residual<View>& r, std::int32_t current, std::int32_t n)
      : r_(r), current_(current), n_(n), collapse_(r.collapse(current)) {
    const bool one_hot = !r.has_q, without = r.drafted == Drafted::sampled_without_replacement;
    if (r.steps > 0 && (one_hot || without)) marks_ = r.siblings.marks;  // the absorbed siblings
    if (one_hot) alone_ = current;
    specials_ = marks_ || alone_ >= 0;
    // Without marks to find the siblings by (rows that keep none), every lane is computed alone.
    scalar_ = r.steps > 0 && ((r.marked() && !marks_) || (!one_hot && !collapse_.usable));
    q_scale_ = without ? r.current_scale() : 1.0;
  }
  ResidualLanes(const ResidualLanes&) = default;
  ResidualLanes& operator=(const ResidualLanes&) = delete;

  /// The weights of elements i .. i + WF - 1 (i + WF <= n) as two double vectors.
  SPECVERIFY_ALWAYS_INLINE void operator()(std::int32_t i, D& lo, D& hi) {
    F p, q;
    reader_.read(r_, i, p, q);
    if (scalar_) {
      lanes_from_scalar(i, lo, hi);
      return;
    }
    if (!specials_) {
      lo = form(widen_low(p), r_.has_q ? widen_low(q) : D(0.0));
      hi = form(widen_high(p), r_.has_q ? widen_high(q) : D(0.0));
      return;
    }
    std::uint64_t special = marks_ ? marked(marks_, i) : 0;
    if (special != 0) {
      // Siblings whose r came to 0 weigh 0 (+0, as their steps give it where the collapse is
      // usable): their p taken as 0 gives it in the pass's form. The others are computed alone.
      const auto zero = static_cast<std::uint32_t>(marked(r_.siblings.zeros, i));
      if (zero != 0) p = xsimd::select(kernel::bit_lanes<Arch>(&zero, 0, Arch{}), F(0.0f), p);
      special &= ~std::uint64_t{zero};
    }
    lo = form(widen_low(p), r_.has_q ? widen_low(q) : D(0.0));
    hi = form(widen_high(p), r_.has_q ? widen_high(q) : D(0.0));
    if (static_cast<std::uint32_t>(alone_ - i) < static_cast<std::uint32_t>(WF)) special |= std::uint64_t{1} << (alone_ - i);
    for (std::int32_t l = 0; special != 0; ++l, special >>= 1) {
      if (special & 1) patch_lane(lo, hi, l, (*this)(i + l));
    }
  }

  /// Element v's weight alone: core::Residual::weight.
  double operator()(std::int32_t v) const { return r_.weight(reader_, current_, v, collapse_); }

  /// Every value read valid, and a bound on the weights: core::Residual::weight_bound of the
  /// largest p over the whole row.
  Checked<double> operator()() const {
    const Checked<float> largest = reader_.largest_p(r_, n_);
    if (!largest.ok) return {0.0, false};
    return {r_.weight_bound(largest.value), true};
  }

 private:
  /// The pass's form for elements that are not special (see the header comment).
  SPECVERIFY_ALWAYS_INLINE D form(const D& p, const D& q) const {
    const D zero(0.0);
    if (!r_.has_q) return D(r_.p_scale) * p;
    if (r_.steps == 0) {
      if (current_ < 0) return D(r_.p_scale) * p;
      const D d = fused(D(r_.p_scale), p, -(q * D(q_scale_)));
      return xsimd::select(d > zero, d, zero);
    }
    const D d = fused(D(-collapse_.shift), q, p);
    return xsimd::select(d > zero, d, zero) * D(collapse_.scale);
  }

  /// Bits i .. i + WF - 1 of `bits` (the siblings' marks or zeros), element i in bit 0.
  SPECVERIFY_ALWAYS_INLINE static std::uint64_t marked(const std::uint64_t* bits, std::int32_t i) {
    const std::uint64_t* word = bits + (i >> 6);
    const std::int32_t shift = i & 63;
    std::uint64_t lanes = word[0] >> shift;
    if (shift + WF > 64) lanes |= word[1] << (64 - shift);
    return lanes & ((std::uint64_t{1} << WF) - 1);
  }

  void lanes_from_scalar(std::int32_t i, D& lo, D& hi) const {
    alignas(64) double w[WF];
    for (std::int32_t l = 0; l < WF; ++l) w[l] = (*this)(i + l);
    lo = D::load_aligned(w);
    hi = D::load_aligned(w + D::size);
  }

  core::Residual<View> r_;
  std::int32_t current_, n_;
  typename core::Residual<View>::Collapse collapse_;
  const std::uint64_t* marks_ = nullptr;  // the siblings' marks, where their lanes are patched
  std::int32_t alone_ = kNoToken;         // a one-hot draft's rejected token, patched too
  bool specials_ = false;                 // either of them
  bool scalar_ = false;
  double q_scale_ = 1.0;        // q_current = q_scale q off the specials (without replacement)
  // Reads the rows (and what the pass saw of them, for the bound). Mutable so that weight() takes
  // it by non-const reference: GCC 12 calls an empty reader (logits views) passed by const
  // reference "maybe uninitialized".
  mutable ResidualReader<Arch, View> reader_{};
};

/// Whether a one-hot residual's mass and draw come from its row's summary: the rows keep one (in
/// their sibling room), and the row is not split (a split row's parts pass over their slices).
template <class View>
bool summarised(const core::Residual<View>& r, const RowSplit& split) {
  return r.one_hot() && r.siblings.summary && !split.active();
}

/// Takes the summary of r's row where this node has none yet: the chunk sums of s p over every
/// token, at the scale of its weights (the same at any step: Residual::weight_bound); false where a
/// value read is invalid.
template <class Arch, class View>
bool summarise(const core::Residual<View>& r, std::int32_t n) {
  core::OneHotSums& s = *r.siblings.summary;
  if (s.ready) return true;
  core::Residual<View> whole = r;  // every token weighed: no sibling, none rejected
  whole.steps = 0;
  ResidualLanes<Arch, View> lanes(whole, kNoToken, n);
  sum_chunks<Arch>(lanes, lanes, n, 1.0, s.row);
  const Checked<double> bound = lanes();
  if (!bound.ok) return false;
  s.scale = core::fixed_scale(bound.value, n);
  if (s.scale != 1.0) sum_chunks<Arch>(lanes, lanes, n, s.scale, s.row);
  s.ready = true;
  s.folded = 0;
  s.removed = {};
  return true;
}

/// ResidualLanes as a split row's pass (cpu/split_row.hpp): each part takes a copy of lanes built
/// on the calling thread.
template <class Arch, class View>
struct ResidualPass {
  ResidualLanes<Arch, View> lanes;

  template <class D>
  SPECVERIFY_ALWAYS_INLINE void operator()(std::int32_t i, D& lo, D& hi) {
    lanes(i, lo, hi);
  }
  double operator()(std::int32_t v) const { return lanes(v); }
  Checked<double> check() const { return lanes(); }
};

}  // namespace detail

/// Mass of the residual after rejecting sibling x (kNoToken: the residual itself), and whether
/// every value read is a valid probability; a split row's parts on the team.
template <class Arch = DefaultArch, class View>
Checked<double> residual_mass(const core::Residual<View>& r, std::int32_t x, std::int32_t n, const RowSplit& split = {}) {
  if (detail::summarised(r, split)) {
    if (!detail::summarise<Arch>(r, n)) return {0.0, false};
    ResidualReader<Arch, View> reader{};
    return {r.one_hot_total(reader, x).value() / r.siblings.summary->scale, true};
  }
  detail::ResidualLanes<Arch, View> lanes(r, x, n);
  if (split.active()) {
    const auto make_pass = [&] { return detail::ResidualPass<Arch, View>{lanes}; };
    const SplitSums<Arch, decltype(make_pass)> sums(split, make_pass, n);
    return {sums.ok() ? sums.mass() : 0.0, sums.ok()};
  }
  ChunkSums sums;
  sum_chunks<Arch>(lanes, lanes, n, 1.0, sums);
  const Checked<double> bound = lanes();
  if (!bound.ok) return {0.0, false};
  if (core::fixed_in_domain(bound.value, n)) return {sums.total.value(), true};
  const double scale = core::fixed_scale(bound.value, n);
  sum_chunks<Arch>(lanes, lanes, n, scale, sums);
  return {sums.total.value() / scale, true};
}

/// Draws from the weights residual_mass sums: the smallest v with w_0 + ... + w_v > u * sum(w),
/// -1 when there is no mass.
template <class Arch = DefaultArch, class View>
Checked<std::int32_t> residual_draw(const core::Residual<View>& r, std::int32_t x, float u, std::int32_t n,
                                    const RowSplit& split = {}) {
  detail::ResidualLanes<Arch, View> lanes(r, x, n);
  if (detail::summarised(r, split)) {
    if (!detail::summarise<Arch>(r, n)) return {-1, false};
    ResidualReader<Arch, View> reader{};
    ChunkSums sums;
    r.one_hot_chunks(reader, x, n, sums);
    if (!sums.total.positive()) return {-1, true};
    const double threshold = static_cast<double>(u) * sums.total.value();
    return {locate<Arch>(lanes, lanes, n, r.siblings.summary->scale, sums, core::FixedSum{}, threshold), true};
  }
  if (split.active()) return cpu::draw<Arch>(split, [&] { return detail::ResidualPass<Arch, View>{lanes}; }, n, u);
  return cpu::draw<Arch>([&](std::int32_t i, auto& lo, auto& hi) SPECVERIFY_LAMBDA_INLINE { lanes(i, lo, hi); },
                         [&](std::int32_t v) { return lanes(v); }, [&] { return lanes(); }, n, u);
}

}  // namespace specverify::cpu
