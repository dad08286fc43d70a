// CPU row work for rows of logits (the logits row source): the pre-pass that turns a LogitRow
// into a LogitView (max, argmax, validation, the kept-set threshold, the normaliser), and the row
// operations read through views, mirroring cpu::Rows: value, max, argmax, entropy, divergence,
// the residual and target draws, and the Gumbel-max sample of coupled verification.
//
// Every weight is core::exp_weight, computed lane by lane with the same float operations (fused
// multiply-adds included), and every sum over the row is a core::FixedSum, so a view's value(),
// its draws and statistics are the same bits for every SIMD width and for the CUDA backend.
// Kernels are templates over an xsimd architecture with one generic body, like row_kernels.hpp.
//
// Pre-pass cost (the kept set is found without sorting the row):
//   greedy (T = 0):               one read: max, argmax, validation.
//   no top_k / top_p (min_p or not): one read (max, argmax, validation), then the weights pass
//       over the cache-hot row: every weight computed once, kept in the scratch row for value(),
//       the draws and the statistics, and summed for the normaliser. The weights need the row's
//       max first: a normaliser summed against a running max and rescaled as it rises would
//       depend on where the max lies, which no split of the row could reproduce.
//   top_k (with or without top_p, min_p): the read also collects candidates into scratch by a
//       streaming selection with a rising pivot (see scan): about k ln(n / 1024) values beyond
//       the first 1024; the k-th largest is selected among them (nth_element); top_p and min_p
//       then work on the k or so survivors.
//   top_p without top_k:          the read copies every finite value into scratch; a quickselect on
//       mass (three-way partitions, the mass of the upper part decides the side) finds the
//       threshold in expected linear work.
//   Kept sets of up to LogitView::kMaxListed tokens are listed (their indices); larger ones get
//   the weights pass.
//   Penalties and bias (the row's overlay, core/penalties.hpp): the read and the weights pass take
//   the overlay's tokens as -inf (one mask a block) and then visit those tokens W at a time, their
//   values kept for the later passes (Entries).
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "specverify/core/logit_rows.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/cpu/divergence_kernels.hpp"
#include "specverify/cpu/fixed_lanes.hpp"
#include "specverify/cpu/fused.hpp"
#include "specverify/cpu/lanes.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/cpu/split_row.hpp"
#include "specverify/cpu/widen.hpp"
#include "specverify/rule.hpp"

namespace specverify::cpu {

using core::LogitRow;
using core::LogitView;

namespace logits_detail {

template <class Arch>
using F = xsimd::batch<float, Arch>;
template <class Arch>
using FB = xsimd::batch_bool<float, Arch>;
template <class Arch>
using I = xsimd::batch<std::int32_t, Arch>;
template <class Arch>
using D = xsimd::batch<double, Arch>;

/// core::exp_weight lane by lane: the same operations in the same order.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE F<Arch> exp_weight(const F<Arch>& a) {
  using B = F<Arch>;
  const B t = fused(a, B(core::kLog2e), B(core::kRoundMagic));
  const B n = t - B(core::kRoundMagic);
  B r = fused(n, B(-core::kExpLn2Hi), a);
  r = fused(n, B(-core::kExpLn2Lo), r);
  B poly(core::kExpP0);
  poly = fused(poly, r, B(core::kExpP1));
  poly = fused(poly, r, B(core::kExpP2));
  poly = fused(poly, r, B(core::kExpP3));
  poly = fused(poly, r, B(core::kExpP4));
  poly = fused(poly, r, B(core::kExpP5));
  const B y = fused(poly, r * r, r) + B(1.0f);
  // Lanes below the cutoff (and -inf, NaN) computed garbage here: they are 0.
  return xsimd::select(a >= B(core::kExpCutoff), kernel::times_pow2(y, n, t, Arch{}), B(0.0f));
}

/// Float weights into a FixedLanes sum, as two double vectors, on the coarse grid: the sums of a
/// row's weights hold its max, whose weight is exactly 1 (FixedSum::add_coarse).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE void add_weights(FixedLanes<Arch>& sum, const F<Arch>& w) {
  sum.add_coarse(widen_low(w));
  sum.add_coarse(widen_high(w));
}

/// Takes back an add_weights(sum, w), bit for bit.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE void remove_weights(FixedLanes<Arch>& sum, const F<Arch>& w) {
  sum.remove_coarse(widen_low(w));
  sum.remove_coarse(widen_high(w));
}

/// Lanes of the bitmask word for the W tokens starting at i (i a multiple of W).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE FB<Arch> allowed_lanes(const std::uint32_t* allowed, std::int32_t i) {
  return kernel::bit_lanes<Arch>(allowed, i, Arch{});
}

/// Lanes holding NaN or +inf (invalid logits; -inf is a masked token).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE FB<Arch> invalid_logit(const F<Arch>& l) {
  return kernel::nan_or_inf(l, Arch{});
}

/// Step 1 in lanes (guidance where the row has it); with kValidate, `ok` is cleared in lanes whose
/// inputs are invalid. The same operations as core::guided_logit.
template <class Arch, bool kValidate, class Logit>
SPECVERIFY_ALWAYS_INLINE F<Arch> guided(const LogitRow<Logit>& row, const F<Arch>& l, const F<Arch>& u, FB<Arch>& ok) {
  using B = F<Arch>;
  const B inf(core::kInf);
  if constexpr (kValidate) ok = ok & ~invalid_logit<Arch>(l);
  if (!row.unconditional) return l;
  const auto masked = (l == -inf) | (u == -inf);
  const B g = fused(B(row.guidance_scale), l - u, u);
  if constexpr (kValidate) {
    ok = ok & ~invalid_logit<Arch>(u) & (masked | (xsimd::abs(g) <= B(core::kFloatMax)));
  }
  return xsimd::select(masked, -inf, g);
}

/// Steps 2-3 in lanes: core::penalised lane by lane (the scalar path's bits).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE F<Arch> penalised(const F<Arch>& g, const F<Arch>& bias, const F<Arch>& in,
                                           const F<Arch>& count, const SamplingParams& params) {
  using B = F<Arch>;
  const B x = g + bias;
  const B r(params.repetition_penalty);
  const B scaled = xsimd::select(x > B(0.0f), x / r, x * r);
  const B presence = xsimd::select(count > B(0.0f), B(params.presence_penalty), B(0.0f));
  return xsimd::select(in != B(0.0f), scaled - fused(B(params.frequency_penalty), count, presence), x);
}

/// How a pass reads the tokens of the row's overlay (penalties, bias): `excluded` reads them as
/// -inf, and the pass then visits the entries themselves, W at a time (for_entries): a sum over the
/// row is the same in any order, so the entries may come last, and the row's blocks cost one mask
/// each instead of a branch on every block an entry falls in. `replaced` reads them as the row has
/// them, at no cost a block, and the pass then takes back the terms they gave and adds the entries'
/// own: for sums alone (FixedLanes takes a term back exactly), not for a max or a minimum.
/// `patched` substitutes the values the pre-pass kept (overlay.value), for the passes that need the
/// row in order. `none`: the row has no overlay (the hot passes are compiled for each case, so
/// none pays for another's test).
enum class Entries { none, excluded, replaced, patched };

/// The overlay's kept values in the W lanes at row index i (i a multiple of W). Passes read the
/// row in increasing order, so the row's cursor usually points at the next entry already; other
/// reads find their place by binary search.
template <class Arch, class Logit>
SPECVERIFY_ALWAYS_INLINE F<Arch> patched(const LogitRow<Logit>& row, std::int32_t i, F<Arch> g) {
  using B = F<Arch>;
  constexpr std::int32_t W = B::size;
  const core::Overlay& o = row.overlay;
  if (!xsimd::any(allowed_lanes<Arch>(o.bits, i))) return g;
  std::int32_t k = row.overlay_cursor;
  if ((k > 0 && o.index[k - 1] >= i) || (k < o.size && o.index[k] < i)) {
    k = core::lower_index(o.index, o.size, i);
  }
  alignas(64) static constexpr float kIota[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  static_assert(W <= 64, "one lane index per float lane");
  const B lane = B::load_aligned(kIota);
  for (; k < o.size && o.index[k] < i + W; ++k) {
    g = xsimd::select(lane == B(static_cast<float>(o.index[k] - i)), B(o.value[k]), g);
  }
  row.overlay_cursor = k;
  return g;
}

/// Steps 1-4 for the W tokens at row index i (i a multiple of W, i + W <= n): g, the overlay's
/// tokens as kEntries says; with kValidate, `ok` is cleared in lanes whose inputs are invalid.
/// The same operations as core::processed_logit. Passes after the pre-pass's first read skip the
/// validation (it has been done).
template <class Arch, Entries kEntries, bool kValidate = false, class Logit>
SPECVERIFY_ALWAYS_INLINE F<Arch> load_g(const LogitRow<Logit>& row, std::int32_t i, FB<Arch>& ok) {
  using B = F<Arch>;
  const B l = load_widened<Arch>(row.logits + i);
  B g = guided<Arch, kValidate>(row, l, row.unconditional ? load_widened<Arch>(row.unconditional + i) : l, ok);
  if constexpr (kEntries == Entries::excluded) {
    g = xsimd::select(allowed_lanes<Arch>(row.overlay.bits, i), B(-core::kInf), g);
  } else if constexpr (kEntries == Entries::patched) {
    if (row.overlay.size) g = patched<Arch>(row, i, g);
  }
  if (row.allowed) g = xsimd::select(allowed_lanes<Arch>(row.allowed, i), g, B(-core::kInf));
  return g;
}

/// Calls fn(k, len, index) for the overlay's entries k .. k + len - 1 below `end` (len <= W), their
/// row indices in `index`'s first len lanes (the rest repeat a valid index); returns how many
/// entries lie below end.
template <class Arch, class Fn>
std::int32_t for_entries(const core::Overlay& o, std::int32_t end, Fn fn) {
  using Iv = I<Arch>;
  constexpr std::int32_t W = Iv::size;
  const std::int32_t m = core::lower_index(o.index, o.size, end);
  std::int32_t k = 0;
  for (; k + W <= m; k += W) fn(k, W, Iv::load_unaligned(o.index + k));
  if (k < m) {
    alignas(64) std::int32_t lanes[W];
    for (std::int32_t l = 0; l < W; ++l) lanes[l] = o.index[std::min(k + l, m - 1)];
    fn(k, m - k, Iv::load_aligned(lanes));
  }
  return m;
}

/// p[index] lane by lane.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE F<Arch> gather_at(const float* p, const I<Arch>& index) {
  return kernel::gather_at(p, index, Arch{});
}

/// p[index] lane by lane, widened: a 16-bit row's entries one by one (they are few).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE F<Arch> gather_widened(const float* p, const I<Arch>& index) {
  return gather_at<Arch>(p, index);
}
template <class Arch, class Logit>
SPECVERIFY_ALWAYS_INLINE F<Arch> gather_widened(const Logit* p, const I<Arch>& index) {
  constexpr std::int32_t W = F<Arch>::size;
  alignas(64) std::int32_t at[W];
  alignas(64) float lanes[W];
  index.store_aligned(at);
  for (std::int32_t l = 0; l < W; ++l) lanes[l] = static_cast<float>(p[at[l]]);
  return F<Arch>::load_aligned(lanes);
}

/// The first len lanes from p, the rest `fill`.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE F<Arch> load_lanes(const float* p, std::int32_t len, float fill) {
  using B = F<Arch>;
  if (len == static_cast<std::int32_t>(B::size)) return B::load_unaligned(p);
  alignas(64) float lanes[B::size];
  for (std::int32_t l = 0; l < static_cast<std::int32_t>(B::size); ++l) lanes[l] = l < len ? p[l] : fill;
  return B::load_aligned(lanes);
}

/// Steps 1-4 at the overlay's entries below row index `end`, W at a time, kept in overlay.value
/// for the later passes; `ok` is cleared where steps 2-3 made a finite value infinite. Calls
/// each(g) with the entries' values (-inf in unused lanes); returns how many entries lie below end.
template <class Arch, class Logit, class Each>
std::int32_t entry_values(const LogitRow<Logit>& row, std::int32_t end, FB<Arch>& ok, Each each) {
  using B = F<Arch>;
  const core::Overlay& o = row.overlay;
  FB<Arch> unused(true);  // the pass validated every input
  return for_entries<Arch>(o, end, [&](std::int32_t k, std::int32_t len, const I<Arch>& index) {
    const B l = gather_widened<Arch>(row.logits, index);
    const B g = guided<Arch, false>(row, l, row.unconditional ? gather_widened<Arch>(row.unconditional, index) : l, unused);
    const B bias = load_lanes<Arch>(o.bias + k, len, 0.0f), in = load_lanes<Arch>(o.in + k, len, 0.0f);
    const B x = penalised<Arch>(g, bias, in, load_lanes<Arch>(o.count + k, len, 0.0f), row.params);
    const B max(core::kFloatMax);
    ok = ok & ~((xsimd::abs(g) <= max) & ~(xsimd::abs(x) <= max));
    alignas(64) float lanes[B::size];
    x.store_aligned(lanes);
    for (std::int32_t j = 0; j < len; ++j) {
      const std::int32_t i = o.index[k + j];
      const bool allowed = !row.allowed || ((row.allowed[i >> 5] >> (i & 31)) & 1u);
      o.value[k + j] = allowed ? lanes[j] : -core::kInf;
    }
    each(load_lanes<Arch>(o.value + k, len, -core::kInf));
  });
}

/// p of the W row indices at i (a prepared, non-greedy view); the same bits as
/// core::probability_at.
template <class Arch, class Logit>
SPECVERIFY_ALWAYS_INLINE F<Arch> probs_from_g(const LogitView<Logit>& view, const F<Arch>& g) {
  using B = F<Arch>;
  const B a = (g - B(view.max)) * B(view.inv_temperature);
  // Every finite value kept: exp_weight already gives masked (-inf) lanes 0.
  if (view.threshold == -core::kFloatMax) return exp_weight<Arch>(a) * B(view.inv_norm);
  const auto kept = g >= B(view.threshold);
  if (!xsimd::any(kept)) return B(0.0f);
  return xsimd::select(kept, exp_weight<Arch>(a) * B(view.inv_norm), B(0.0f));
}

/// p(v) at target id v, from the view's weights where it keeps them: core::probability's bits.
template <class Logit>
float probability(const LogitView<Logit>& view, std::int32_t v) {
  const std::int32_t i = core::row_index(view, v);
  if (i < 0) return 0.0f;
  return view.weights ? view.weights[i] * view.inv_norm : core::probability_at(view, i);
}

/// p at target ids v .. v + W - 1 (v + W <= the target vocabulary).
template <class Arch, class Logit>
SPECVERIFY_ALWAYS_INLINE F<Arch> probs(const LogitView<Logit>& view, std::int32_t v) {
  using B = F<Arch>;
  if (view.weights && !view.row.target_to_draft) {
    return B::load_unaligned(view.weights + v) * B(view.inv_norm);
  }
  if (view.row.target_to_draft || view.greedy) {  // gathers and one-hot rows: element by element
    alignas(64) float lanes[B::size];
    for (std::int32_t l = 0; l < static_cast<std::int32_t>(B::size); ++l) lanes[l] = logits_detail::probability(view, v + l);
    return B::load_aligned(lanes);
  }
  FB<Arch> ok(true);  // the pre-pass validated every value
  return probs_from_g<Arch>(view, load_g<Arch, Entries::patched>(view.row, v, ok));
}

/// Sum of w over the candidates c[0..m) that are >= threshold, with the view's max and 1/T: a
/// FixedSum on its coarse grid (weights are at most 1, m <= 2^21, and every mass compared holds
/// the max, of weight 1), so the same for any order.
template <class Arch>
core::FixedSum candidate_sum(const float* c, std::int32_t m, float threshold, float max, float inv_t) {
  using B = F<Arch>;
  constexpr std::int32_t W = B::size;
  FixedLanes<Arch> lanes;
  std::int32_t i = 0;
  for (; i + W <= m; i += W) {
    const B g = B::load_unaligned(c + i);
    const B w = exp_weight<Arch>((g - B(max)) * B(inv_t));
    add_weights<Arch>(lanes, xsimd::select(g >= B(threshold), w, B(0.0f)));
  }
  core::FixedSum s;
  lanes.flush(s);
  for (; i < m; ++i) {
    if (c[i] >= threshold) s.add_coarse(core::exp_weight(core::weight_argument(c[i], max, inv_t)));
  }
  return s;
}

/// The read of the pre-pass: max g, its lowest index, validity; with `collect`, the values that
/// may be kept are appended to scratch (which holds n floats) and their count returned.
/// For top_k (k > 0) the collection is a streaming selection: values >= pivot are appended; when
/// the buffer has grown past kCompactAt (and doubled since the last time), the k-th largest value
/// collected so far becomes the pivot and the values below it are dropped. The pivot never exceeds
/// the row's k-th largest value, so every value top_k keeps is collected; on rows in no particular
/// order only ~k ln(n / kCompactAt) values clear the rising pivot after the first compaction.
struct Scan {
  float max = -core::kInf;
  std::int32_t argmax = -1;
  bool ok = true;
  std::int32_t collected = 0;
};

inline constexpr std::int32_t kCompactAt = 256;

/// The read of row elements [from, n) (from a multiple of 64) and of every overlay entry: max,
/// lowest argmax, validation, and with `collect` the candidates into scratch. from > 0 reads what
/// a split row's parts leave (split_scan).
template <class Arch, Entries kEntries, class Logit>
Scan scan(const LogitRow<Logit>& row, bool collect, std::int32_t k, float* scratch, std::int32_t from = 0) {
  using B = F<Arch>;
  constexpr std::int32_t W = B::size;
  const std::int32_t n = row.n;
  B m0(-core::kInf), m1(-core::kInf);  // two accumulators: two independent max chains
  FB<Arch> ok(true);
  float pivot = -core::kFloatMax;
  std::int32_t count = 0, compact_at = std::max(kCompactAt, 2 * k);
  const auto gather = [&](const B& g) {  // appends the lanes >= pivot: count + W <= (elements read) <= n
    count = kernel::append_at_least(scratch, count, g, pivot, Arch{});
  };
  const auto compact = [&] {  // raise the pivot to the k-th largest value collected so far
    if (k <= 0 || count < compact_at) return;
    std::nth_element(scratch, scratch + k - 1, scratch + count, std::greater<float>());
    pivot = scratch[k - 1];
    count = static_cast<std::int32_t>(std::partition(scratch, scratch + count, [&](float g) { return g >= pivot; }) - scratch);
    compact_at = std::max(compact_at, 2 * count);  // ties at the pivot: amortise
  };
  std::int32_t i = from;
  for (; i + 2 * W <= n; i += 2 * W) {
    const B g0 = load_g<Arch, kEntries, true>(row, i, ok);
    const B g1 = load_g<Arch, kEntries, true>(row, i + W, ok);
    m0 = lane_max(m0, g0);
    m1 = lane_max(m1, g1);
    if (collect && xsimd::any(lane_max(g0, g1) >= B(pivot))) {
      gather(g0);
      gather(g1);
      compact();
    }
  }
  for (; i + W <= n; i += W) {
    const B g = load_g<Arch, kEntries, true>(row, i, ok);
    m0 = lane_max(m0, g);
    if (collect && xsimd::any(g >= B(pivot))) gather(g);
  }
  const std::int32_t body = i;
  alignas(64) float lanes[W];
  std::int32_t entries = 0;  // the overlay's entries in the body, read as -inf above
  if constexpr (kEntries == Entries::excluded) {
    entries = entry_values<Arch>(row, body, ok, [&](const B& g) {
      m0 = lane_max(m0, g);
      if (!collect) return;
      g.store_aligned(lanes);  // few: appended one by one (a partial group has no room for a W-wide store)
      for (std::int32_t l = 0; l < W; ++l) {
        if (lanes[l] >= pivot) scratch[count++] = lanes[l];
      }
    });
  }
  Scan r;
  lane_max(m0, m1).store_aligned(lanes);
  r.max = *std::max_element(lanes, lanes + W);
  r.ok = xsimd::all(ok);
  for (; i < n; ++i) {
    const core::Processed e = core::processed_logit(row, i);
    r.ok = r.ok && e.valid;
    r.max = std::max(r.max, e.g);
    if (collect && e.g >= pivot && e.g > -core::kInf) scratch[count++] = e.g;
  }
  r.collected = count;
  if (!r.ok || !(r.max > -core::kInf)) return r;
  // The argmax: the first index holding the max, found again in the (cache-hot) row; the vector
  // search, which reads entries as -inf, stops at the block of the first entry holding it.
  std::int32_t stop = body;
  for (std::int32_t e = 0; e < entries; ++e) {
    if (row.overlay.value[e] == r.max) {
      stop = row.overlay.index[e] - row.overlay.index[e] % W;
      break;
    }
  }
  FB<Arch> unused(true);
  for (i = std::min(from, stop); i + W <= stop; i += W) {
    if (xsimd::any(load_g<Arch, kEntries>(row, i, unused) == B(r.max))) break;
  }
  for (; i < n; ++i) {
    if (core::processed_logit(row, i).g == r.max) {
      r.argmax = i;
      break;
    }
  }
  return r;
}

/// What a weights pass sums: the kept weights (view.norm) and the lowest kept value (min_p's
/// threshold).
struct WeightSums {
  core::FixedSum norm;
  float lowest = core::kInf;
};

/// The weights pass over the cache-hot row (after the read found max g): w(i) = exp_weight((g(i) -
/// max) / T) for the kept tokens, 0 elsewhere, written to out[0..n); their sum (view.norm) is a
/// FixedSum on its coarse grid (w <= 1, and the max weighs 1: the sum is at least 1, so n
/// roundings of 2^-41 are below 2^-24 of it for n <= 2^17). Kept: g >= view.threshold and w >= min_w.
/// min_w > 0 is min_p: w is non-decreasing in g, so that is a value threshold too, and
/// view.threshold becomes the lowest kept g, `lowest` (a minimum: the overlay's tokens must be
/// `excluded` then; a sum alone may read them `replaced`).
/// Elements [from, n) and every overlay entry: from > 0 is what a split row's parts leave.
/// With `entry_out`, entry k's weight goes to entry_out[k] instead of its place in out (a split
/// row's parts write out beside this pass).
template <class Arch, Entries kEntries, class Logit>
WeightSums weights_sums(const LogitView<Logit>& view, float min_w, float* out, std::int32_t from = 0,
                        float* entry_out = nullptr) {
  static_assert(kEntries != Entries::patched, "the weights pass computes the values patched reads");
  using B = F<Arch>;
  constexpr std::int32_t W = B::size;
  const LogitRow<Logit>& row = view.row;
  const std::int32_t n = row.n;
  const B max(view.max), inv_t(view.inv_temperature), threshold(view.threshold), floor(min_w);
  // Every finite value kept: exp_weight gives masked (-inf) tokens 0 by itself.
  const bool all = view.threshold == -core::kFloatMax && !(min_w > 0.0f);
  FB<Arch> unused(true);
  FixedLanes<Arch> lanes;
  B lowest(core::kInf);
  const auto weights_of = [&](const B& g) SPECVERIFY_LAMBDA_INLINE {
    const B w = exp_weight<Arch>((g - max) * inv_t);
    if (all) return w;
    const auto kept = (g >= threshold) & (w >= floor);
    lowest = xsimd::select(kept & (g < lowest), g, lowest);
    return xsimd::select(kept, w, B(0.0f));
  };
  const auto weights = [&](std::int32_t i) SPECVERIFY_LAMBDA_INLINE {
    return weights_of(load_g<Arch, kEntries>(row, i, unused));
  };
  std::int32_t i = from;
  for (; i + 2 * W <= n; i += 2 * W) {
    const B w0 = weights(i), w1 = weights(i + W);
    w0.store_unaligned(out + i);
    w1.store_unaligned(out + i + W);
    add_weights<Arch>(lanes, w0);
    add_weights<Arch>(lanes, w1);
  }
  for (; i + W <= n; i += W) {
    const B w = weights(i);
    w.store_unaligned(out + i);
    add_weights<Arch>(lanes, w);
  }
  if constexpr (kEntries != Entries::none) {  // the entries in the body: 0 above, or the row's own g's
    const core::Overlay& o = row.overlay;
    for_entries<Arch>(o, i, [&](std::int32_t k, std::int32_t len, const I<Arch>&) {
      alignas(64) float ws[W];
      if constexpr (kEntries == Entries::replaced) {  // the very weights the body added (0 in unused lanes)
        for (std::int32_t j = 0; j < W; ++j) ws[j] = j < len ? out[o.index[k + j]] : 0.0f;
        remove_weights<Arch>(lanes, B::load_aligned(ws));
      }
      const B w = weights_of(load_lanes<Arch>(o.value + k, len, -core::kInf));
      add_weights<Arch>(lanes, w);
      w.store_aligned(ws);
      for (std::int32_t j = 0; j < len; ++j) (entry_out ? entry_out[k + j] : out[o.index[k + j]]) = ws[j];
    });
  }
  core::FixedSum s;
  lanes.flush(s);
  alignas(64) float low_lanes[W];
  lowest.store_aligned(low_lanes);
  float low = *std::min_element(low_lanes, low_lanes + W);
  for (; i < n; ++i) {
    const float g = core::processed_logit(row, i).g;
    const float w = core::exp_weight(core::weight_argument(g, view.max, view.inv_temperature));
    const bool kept = g >= view.threshold && w >= min_w;
    out[i] = kept ? w : 0.0f;
    s.add_coarse(out[i]);
    if (kept) low = std::min(low, g);
  }
  return {s, low};
}

/// The pass's sums into the view: its normaliser and, for min_p, its threshold.
template <class Logit>
void apply(LogitView<Logit>& view, float min_w, const WeightSums& sums) {
  if (min_w > 0.0f) view.threshold = sums.lowest;
  view.norm = sums.norm.value();
}

template <class Arch, Entries kEntries, class Logit>
void weights_pass(LogitView<Logit>& view, float min_w, float* out) {
  apply(view, min_w, weights_sums<Arch, kEntries>(view, min_w, out));
}

/// Elements [begin, end) of a row as a row of their own (indexed by target ids): begin is a
/// multiple of 32, so the bitmask's words shift whole. Of an overlay only its bits come along
/// (an `excluded` read of the part skips its entries, which the whole row's read then visits).
template <class Logit>
LogitRow<Logit> slice(const LogitRow<Logit>& row, std::int32_t begin, std::int32_t end) {
  LogitRow<Logit> part = row;
  part.logits += begin;
  if (part.unconditional) part.unconditional += begin;
  if (part.allowed) part.allowed += begin / 32;
  part.overlay = core::Overlay{};
  if (row.overlay.size) part.overlay.bits = row.overlay.bits + begin / 32;
  part.n = end - begin;
  return part;
}

/// Where a split row's parts end: a row with an overlay leaves its last n % 64 elements, which
/// the read of its entries takes (their tail has no vector form of the entries' lookup).
template <class Logit>
std::int32_t parts_end(const LogitRow<Logit>& row) {
  return row.overlay.size ? row.n / RowSplit::kBlock * RowSplit::kBlock : row.n;
}

/// scan() of a row split over the team: the maxima merged in part order, so the argmax is the
/// first part's holding the max, the lowest index. With `collect`, each part collects into its own
/// stretch of scratch (at most its length) and the lists are moved to the front in part order:
/// a part's pivot never exceeds the row's k-th largest value (its own k-th largest is at most
/// that), so every value top_k keeps is among them, and the later steps depend on the values kept
/// alone, not on the extra candidates or their order.
template <class Arch, class Logit>
Scan split_scan(const LogitRow<Logit>& row, const RowSplit& split, bool collect, std::int32_t k, float* scratch) {
  const bool overlay = row.overlay.size > 0;
  const std::int32_t end_of_parts = parts_end(row);
  std::vector<Scan> parts(static_cast<std::size_t>(split.parts));
  const auto part_scan = [&](std::int32_t part, std::int32_t begin, std::int32_t end) {
    const LogitRow<Logit> piece = slice(row, begin, end);
    Scan s = overlay ? scan<Arch, Entries::excluded>(piece, collect, k, scratch + begin)
                     : scan<Arch, Entries::none>(piece, collect, k, scratch + begin);
    if (s.argmax >= 0) s.argmax += begin;
    parts[part] = s;
  };
  // A row with an overlay: its entries (which the parts read as -inf) and its last elements are
  // read beside the parts, their candidates into a list of their own.
  std::vector<float> candidates;
  Scan rest;
  if (overlay) {
    candidates.resize(collect ? std::size_t(row.n - end_of_parts + row.overlay.size + 2 * F<Arch>::size) : 0);
    split.for_parts_and(end_of_parts, part_scan, [&] {
      rest = scan<Arch, Entries::excluded>(row, collect, k, candidates.data(), end_of_parts);
    });
  } else {
    split.for_parts(end_of_parts, part_scan);
  }
  Scan merged;
  for (std::int32_t part = 0; part < split.parts; ++part) {
    const Scan& s = parts[static_cast<std::size_t>(part)];
    merged.ok = merged.ok && s.ok;
    if (s.max > merged.max) {
      merged.max = s.max;
      merged.argmax = s.argmax;
    }
    if (collect) {  // merged.collected <= this part's start: the move never overtakes a list
      std::memmove(scratch + merged.collected, scratch + split.begin(part, end_of_parts), sizeof(float) * std::size_t(s.collected));
      merged.collected += s.collected;
    }
  }
  if (!overlay) return merged;
  // The rest's candidates go after the parts': the parts collected none of the entries, so the two
  // lists together hold at most n values.
  const Scan& s = rest;
  merged.ok = merged.ok && s.ok;
  if (s.max > merged.max || (s.max == merged.max && s.argmax >= 0 && s.argmax < merged.argmax)) {
    merged.max = s.max;
    merged.argmax = s.argmax;
  }
  if (collect) {
    std::copy(candidates.data(), candidates.data() + s.collected, scratch + merged.collected);
    merged.collected += s.collected;
  }
  return merged;
}

/// weights_pass() of a row split over the team: each part writes its weights, and its FixedSum
/// and lowest kept value merge exactly.
template <class Arch, class Logit>
void split_weights_pass(LogitView<Logit>& view, float min_w, float* out, const RowSplit& split) {
  const bool overlay = view.row.overlay.size > 0;
  const std::int32_t end_of_parts = parts_end(view.row);
  std::vector<WeightSums> parts(static_cast<std::size_t>(split.parts) + (overlay ? 1 : 0));
  const auto part_sums = [&](std::int32_t part, std::int32_t begin, std::int32_t end) {
    LogitView<Logit> piece = view;
    piece.row = slice(view.row, begin, end);
    parts[part] = overlay ? weights_sums<Arch, Entries::excluded>(piece, min_w, out + begin)
                          : weights_sums<Arch, Entries::none>(piece, min_w, out + begin);
  };
  if (overlay) {
    // The entries and the row's last elements beside the parts; the entries' weights then replace
    // the 0s the parts wrote in their places.
    const core::Overlay& o = view.row.overlay;
    std::vector<float> entry_weights(static_cast<std::size_t>(o.size));
    split.for_parts_and(end_of_parts, part_sums, [&] {
      parts.back() = weights_sums<Arch, Entries::excluded>(view, min_w, out, end_of_parts, entry_weights.data());
    });
    const std::int32_t body = end_of_parts + (view.row.n - end_of_parts) / F<Arch>::size * F<Arch>::size;
    for (std::int32_t k = 0; k < o.size && o.index[k] < body; ++k) out[o.index[k]] = entry_weights[static_cast<std::size_t>(k)];
  } else {
    split.for_parts(end_of_parts, part_sums);
  }
  WeightSums merged;
  for (const WeightSums& s : parts) {
    merged.norm.merge(s.norm);
    merged.lowest = std::min(merged.lowest, s.lowest);
  }
  apply(view, min_w, merged);
}

/// top_p on candidates c[0..m) (every token still kept, in any order; reordered here): the
/// largest value t such that the candidates >= t hold mass >= top_p of the candidates' mass.
/// Every mass compared is the FixedSum of a set of candidates ({g >= t} or {g > t}), never a
/// running difference, so t depends on the candidates' values alone, not on their order.
template <class Arch>
float top_p_threshold(float* c, std::int32_t m, float max, float inv_t, float top_p) {
  const auto w = [&](float g) { return core::exp_weight(core::weight_argument(g, max, inv_t)); };
  const double need = double(top_p) * candidate_sum<Arch>(c, m, -core::kFloatMax, max, inv_t).value();
  core::FixedSum higher;  // the mass of the candidates above c[lo, hi)
  std::int32_t lo = 0, hi = m;
  constexpr std::int32_t kSortBelow = 2048;
  if (m > kSortBelow && inv_t > 0.0f) {
    // Top-p sets are usually a small head of the row: when the tokens within e^-8 of the top
    // already hold the mass, continue among those alone (moved to the front: c stays a
    // permutation, so the caller's later passes over c[0..m) see every candidate once).
    const float head = max - 8.0f / inv_t;
    if (candidate_sum<Arch>(c, m, head, max, inv_t).value() >= need) {
      hi = static_cast<std::int32_t>(std::partition(c, c + m, [&](float g) { return g >= head; }) - c);
    }
  }
  while (hi - lo > kSortBelow) {
    // Quickselect on mass: three-way partition around a median of three values.
    float trio[3] = {c[lo], c[lo + (hi - lo) / 2], c[hi - 1]};
    std::sort(trio, trio + 3);
    const float pivot = trio[1];
    float* const above_end = std::partition(c + lo, c + hi, [&](float g) { return g > pivot; });
    float* const equal_end = std::partition(above_end, c + hi, [&](float g) { return g == pivot; });
    const auto above = static_cast<std::int32_t>(above_end - c);
    const auto equal = static_cast<std::int32_t>(equal_end - c);
    core::FixedSum over = higher;  // the mass of {g > pivot}
    over.merge(candidate_sum<Arch>(c + lo, above - lo, -core::kFloatMax, max, inv_t));
    if (over.value() >= need) {
      hi = above;
      continue;
    }
    core::FixedSum through = over;  // the mass of {g >= pivot}
    through.add_repeated(w(pivot), equal - above, true);
    if (through.value() >= need) return pivot;
    higher = through;
    lo = equal;
  }
  std::sort(c + lo, c + hi, std::greater<float>());
  core::FixedSum mass = higher;
  for (std::int32_t i = lo; i < hi; ++i) {
    mass.add_coarse(w(c[i]));
    if (mass.value() >= need && (i + 1 == hi || c[i + 1] != c[i])) return c[i];
  }
  return hi > lo ? c[hi - 1] : c[lo > 0 ? lo - 1 : 0];  // unreachable: need <= the total mass
}

/// min_p on candidates c[0..m) that are >= view.threshold: raises the threshold to the lowest
/// candidate with w >= min_p.
template <class Logit>
void min_p_on_candidates(LogitView<Logit>& view, const float* c, std::int32_t m) {
  const float min_p = view.row.params.min_p;
  if (!(min_p > 0.0f)) return;
  float lowest = view.max;  // w = 1 >= min_p at the max
  for (std::int32_t i = 0; i < m; ++i) {
    if (c[i] >= view.threshold && c[i] < lowest &&
        core::exp_weight(core::weight_argument(c[i], view.max, view.inv_temperature)) >= min_p) {
      lowest = c[i];
    }
  }
  view.threshold = lowest;
}

/// Lists the kept row indices (at most View::kMaxListed of them) in increasing order into
/// `scratch`, whose candidates are done with: one more pass over the cache-hot row.
template <class Arch, class Logit>
std::int32_t write_kept(const LogitView<Logit>& view, float* out, std::int32_t first) {
  using B = F<Arch>;
  constexpr std::int32_t W = B::size;
  static_assert(sizeof(std::int32_t) == sizeof(float) && alignof(std::int32_t) <= alignof(float),
                "a row index takes the place of a candidate in the scratch row");
  const LogitRow<Logit>& row = view.row;
  FB<Arch> unused(true);
  std::int32_t count = 0;
  const auto add = [&](std::int32_t i, float g) {  // count <= the kept tokens <= row.n: out has room
    if (g >= view.threshold && count < LogitView<Logit>::kMaxListed) ::new (static_cast<void*>(out + count++)) std::int32_t(first + i);
  };
  std::int32_t i = 0;
  for (; i + W <= row.n; i += W) {
    const B g = load_g<Arch, Entries::patched>(row, i, unused);
    if (!xsimd::any(g >= B(view.threshold))) continue;
    alignas(64) float lanes[W];
    g.store_aligned(lanes);
    for (std::int32_t l = 0; l < W; ++l) add(i + l, lanes[l]);
  }
  for (; i < row.n; ++i) add(i, core::processed_logit(row, i).g);
  return count;
}

/// The view's kept row indices (at most kMaxListed, which the caller checked), in increasing
/// order, over scratch: view.kept. A split row lists each part's into its own stretch of scratch,
/// then moves the lists to the front in part order.
template <class Arch, class Logit>
void list_kept(LogitView<Logit>& view, float* scratch, const RowSplit& split) {
  std::int32_t count = 0;
  if (split.active()) {
    std::vector<std::int32_t> counts(static_cast<std::size_t>(split.parts));
    split.for_parts(view.row.n, [&](std::int32_t part, std::int32_t begin, std::int32_t end) {
      LogitView<Logit> piece = view;
      piece.row = slice(view.row, begin, end);
      counts[static_cast<std::size_t>(part)] = write_kept<Arch>(piece, scratch + begin, begin);
    });
    for (std::int32_t part = 0; part < split.parts; ++part) {
      const std::int32_t take = std::min(counts[static_cast<std::size_t>(part)], LogitView<Logit>::kMaxListed - count);
      std::memmove(scratch + count, scratch + split.begin(part, view.row.n), sizeof(float) * std::size_t(take));
      count += take;
    }
  } else {
    count = write_kept<Arch>(view, scratch, 0);
  }
  view.listed = count;
  view.kept = std::launder(reinterpret_cast<const std::int32_t*>(scratch));
}

}  // namespace logits_detail

/// The pre-pass: a view of `row` with its sampling parameters applied (docs/api.md's nine steps).
/// `scratch` holds row.n floats: the top_k and top_p candidates while this runs, then the view's
/// weights or its list of kept indices (view.weights and view.kept point into scratch: the view
/// reads them until scratch is reused). Parameters must have passed check_sampling_params. view.ok is false when a
/// NaN or +inf logit was read; view.has_mass() is false when every token is masked.
///
/// Passes: one read of the row (max, argmax, validation, candidates); then, over the cache-hot
/// row, the weights pass (every weight computed once, for the normaliser and every later read) or,
/// for small kept sets, work on the candidates and a list of the kept indices.
template <class Arch = DefaultArch, class Logit>
LogitView<Logit> prepare(const LogitRow<Logit>& row, float* scratch, const RowSplit& split = {}) {
  namespace d = logits_detail;
  using View = LogitView<Logit>;
  View view;
  view.row = row;
  const SamplingParams& params = row.params;
  view.greedy = params.temperature == 0.0f;
  view.inv_temperature = view.greedy ? 0.0f : std::min(1.0f / params.temperature, core::kFloatMax);
  view.threshold = -core::kFloatMax;
  const bool top_k = !view.greedy && params.top_k > 0 && params.top_k < row.n;
  const bool top_p = !view.greedy && params.top_p < 1.0f;
  const bool collect = top_k || top_p;
  const std::int32_t k = top_k ? params.top_k : 0;
  const bool overlay = row.overlay.size > 0;
  // Rows of a reduced draft vocabulary (indexed through their map) are read unsplit.
  const bool split_row = split.active() && !row.target_to_draft;
  const d::Scan s = split_row ? d::split_scan<Arch>(row, split, collect, k, scratch)
                    : overlay ? d::scan<Arch, d::Entries::excluded>(row, collect, k, scratch)
                              : d::scan<Arch, d::Entries::none>(row, collect, k, scratch);
  view.ok = s.ok;
  view.max = s.max;
  view.argmax = s.argmax;
  if (!view.ok || !view.has_mass()) return view;
  if (view.greedy) {
    view.norm = 1.0;
    view.inv_norm = 1.0f;
    return view;
  }
  const auto keep_weights = [&](float min_w) {
    if (split_row) {
      d::split_weights_pass<Arch>(view, min_w, scratch, split);
    } else if (overlay && min_w > 0.0f) {
      d::weights_pass<Arch, d::Entries::excluded>(view, min_w, scratch);
    } else if (overlay) {
      d::weights_pass<Arch, d::Entries::replaced>(view, min_w, scratch);
    } else {
      d::weights_pass<Arch, d::Entries::none>(view, min_w, scratch);
    }
    view.weights = scratch;
    view.inv_norm = static_cast<float>(1.0 / view.norm);
  };
  if (!collect) {  // T, and min_p alone
    keep_weights(params.min_p);
    return view;
  }
  std::int32_t m = s.collected;  // every finite value that may be kept
  if (top_k && m >= params.top_k) {
    std::nth_element(scratch, scratch + params.top_k - 1, scratch + m, std::greater<float>());
    view.threshold = scratch[params.top_k - 1];
    // nth_element leaves the k - 1 larger values before it; ties follow anywhere after.
    m = static_cast<std::int32_t>(std::partition(scratch, scratch + m,
                                                 [&](float g) { return g >= view.threshold; }) - scratch);
  }
  if (top_p) {
    view.threshold = d::top_p_threshold<Arch>(scratch, m, view.max, view.inv_temperature, params.top_p);
  }
  d::min_p_on_candidates(view, scratch, m);
  if (std::count_if(scratch, scratch + m, [&](float g) { return g >= view.threshold; }) > View::kMaxListed) {
    keep_weights(0.0f);  // the candidates are done with: scratch takes the weights
    return view;
  }
  view.norm = d::candidate_sum<Arch>(scratch, m, view.threshold, view.max, view.inv_temperature).value();
  view.inv_norm = static_cast<float>(1.0 / view.norm);
  // The list's pass reads an overlay's entries in row order (patched): unsplit.
  d::list_kept<Arch>(view, scratch, split_row && !overlay ? split : RowSplit{});
  return view;
}

/// The row operations through views, as core::walk asks them of a backend. Indices are
/// target ids: a view over a reduced draft vocabulary is read through its target_to_draft map.
/// argmax, draw_target and gumbel_argmax return row indices (of target rows, which have no map).
template <class Arch = DefaultArch, class Logit = float>
struct LogitRows {
  static_assert(is_cpu_row_type<Logit>, "the CPU reads rows of float, specverify::float16 or specverify::bfloat16");
  std::int32_t n;       // target vocabulary size
  RowSplit split = {};  // how draws and dense views' statistics split (unsplit by default)

  using View = LogitView<Logit>;

  float value(const View& v, std::int32_t token) const { return logits_detail::probability(v, token); }

  /// max_v p(v): p at the argmax, 1 * inv_norm (0 without mass).
  Checked<float> max(const View& p) const {
    return {p.has_mass() ? (p.greedy ? 1.0f : p.inv_norm) : 0.0f, p.ok};
  }

  /// The lowest index of max g: the exact argmax of p (its float rounding may tie a neighbour).
  Checked<std::int32_t> argmax(const View& p) const { return {p.argmax, p.ok}; }

  Checked<float> entropy(const View& p) const {
    if (p.greedy || !p.has_mass()) return {0.0f, p.ok};
    if (p.listed >= 0 && !p.row.target_to_draft) {  // the kept p: the dense sum's nonzero terms
      float kept[View::kMaxListed];
      for (std::int32_t k = 0; k < p.listed; ++k) kept[k] = value(p, p.kept[k]);
      const detail::TermSum sum = detail::sum_terms<Arch>(kept, nullptr, p.listed, detail::EntropyTerm{});
      return {static_cast<float>(sum.value()), p.ok && sum.ok};
    }
    const detail::TermSum sum = sum_chunks(p, nullptr, [&](const float* pc, const float*, std::int32_t len) {
      return detail::sum_terms<Arch>(pc, nullptr, len, detail::EntropyTerm{});
    });
    return {static_cast<float>(sum.value()), p.ok && sum.ok};
  }

  /// D(p, q); q == nullptr is one-hot at x.
  Checked<float> divergence(Divergence d, const View& p, const View* q, std::int32_t x) const {
    if (!q) {  // D(p, e_x) depends on a = p(x) and the rest of p's mass alone
      if (x < 0 || x >= n) return {std::numeric_limits<float>::quiet_NaN(), false};
      const double a = value(p, x), rest = std::max(0.0, 1.0 - a);
      const double off = rest > 0.0 ? rest * core::divergence_term(d, 1.0, 0.0) : 0.0;
      return {static_cast<float>(off + core::divergence_term(d, a, 1.0)), p.ok};
    }
    const double factor = detail::divergence_factor(d);
    const detail::TermSum sum = sum_chunks(p, q, [&](const float* pc, const float* qc, std::int32_t len) {
      double unused;
      return detail::divergence_sum<Arch>(d, pc, qc, len, unused);
    });
    if (!sum.ok) return {std::numeric_limits<float>::quiet_NaN(), false};
    return {static_cast<float>(factor * sum.value()), p.ok && q->ok};
  }

  /// From max(p - q, 0) (q == nullptr: one-hot at x), in float lanes; -1 when it has no mass.
  Checked<std::int32_t> draw_residual(const View& p, const View* q, std::int32_t x, float u) const {
    if (!p.ok || (q && !q->ok)) return {-1, false};
    if (!p.has_mass()) return {-1, true};
    if (q && q->greedy) {  // one-hot q at the target id of its argmax (none, x = -1, without mass)
      x = q->row.target_to_draft ? target_id(*q, q->argmax) : q->argmax;
      q = nullptr;
    }
    if (p.greedy) {  // one positive weight at most: 1 - q(argmax)
      const float qa = q ? value(*q, p.argmax) : (p.argmax == x ? 1.0f : 0.0f);
      return {1.0f - qa > 0.0f ? p.argmax : -1, true};
    }
    const auto one = [&](std::int32_t v) {
      return core::residual_weight(value(p, v), q ? value(*q, v) : (v == x ? 1.0 : 0.0));
    };
    if (p.listed >= 0 && !p.row.target_to_draft) return draw_listed(p, one, u);  // 0 off p's kept tokens
    if (!q) {
      if (dense(p)) return draw_lanes([&](std::int32_t v) SPECVERIFY_LAMBDA_INLINE { return kept_probs(p, v); }, nullptr, one, x, u);
      return draw_lanes([&](std::int32_t v) SPECVERIFY_LAMBDA_INLINE { return logits_detail::probs<Arch>(p, v); }, nullptr, one, x, u);
    }
    if (dense(p) && dense(*q)) {  // both rows' weights in scratch: the draw mostly reads them
      return draw_lanes([&](std::int32_t v) SPECVERIFY_LAMBDA_INLINE { return kept_probs(p, v); },
                        [&](std::int32_t v) SPECVERIFY_LAMBDA_INLINE { return kept_probs(*q, v); }, one, -1, u);
    }
    return draw_lanes([&](std::int32_t v) SPECVERIFY_LAMBDA_INLINE { return logits_detail::probs<Arch>(p, v); },
                      [&](std::int32_t v) SPECVERIFY_LAMBDA_INLINE { return logits_detail::probs<Arch>(*q, v); }, one, -1, u);
  }

  Checked<std::int32_t> draw_target(const View& p, float u) const {
    if (!p.ok) return {-1, false};
    if (!p.has_mass()) return {-1, true};
    if (p.greedy) return {p.argmax, true};
    const auto one = [&](std::int32_t v) { return double{value(p, v)}; };
    if (p.listed >= 0 && !p.row.target_to_draft) return draw_listed(p, one, u);
    if (dense(p)) return draw_lanes([&](std::int32_t v) SPECVERIFY_LAMBDA_INLINE { return kept_probs(p, v); }, nullptr, one, -1, u);
    return draw_lanes([&](std::int32_t v) SPECVERIFY_LAMBDA_INLINE { return logits_detail::probs<Arch>(p, v); }, nullptr, one, -1, u);
  }

  /// Coupled sampling: argmax over kept tokens of (g - max)/T + Gumbel(seed, position, v), lowest
  /// index on ties; argmax for greedy rows; -1 without mass.
  Checked<std::int32_t> gumbel_argmax(const View& p, std::uint64_t seed, std::int64_t position) const;

 private:
  /// Whether the view's weights are in scratch, indexed by target id.
  static bool dense(const View& v) { return v.weights && !v.row.target_to_draft; }

  /// p at v .. v + W - 1 of a dense view: its weights times 1 / norm.
  SPECVERIFY_ALWAYS_INLINE static logits_detail::F<Arch> kept_probs(const View& view, std::int32_t v) {
    using B = logits_detail::F<Arch>;
    return B::load_unaligned(view.weights + v) * B(view.inv_norm);
  }

  /// The target id of a reduced draft row's index; -1 for none (row_index -1: a row without mass).
  std::int32_t target_id(const View& q, std::int32_t row_index) const {
    for (std::int32_t v = 0; v < n; ++v) {
      if (q.row.target_to_draft[v] == row_index) return v;
    }
    return -1;
  }

  /// The merged TermSums f(p_chunk, q_chunk_or_null, len) over target ids in chunks of
  /// materialised floats (the values value() returns), so the probability-row statistics run on
  /// them unchanged. Values of p, q <= 1 keep every chunk's terms in FixedSum's domain at scale 1,
  /// so the chunks merge exactly however the row is cut: dense views (pure reads of their weights)
  /// split over the row team.
  template <class Fn>
  detail::TermSum sum_chunks(const View& p, const View* q, Fn f) const {
    const auto range = [&](std::int32_t begin, std::int32_t end) {
      detail::TermSum sum;
      for_chunks(p, q, begin, end, [&](const float* pc, const float* qc, std::int32_t len) { sum.merge(f(pc, qc, len)); });
      return sum;
    };
    if (!split.active() || !dense(p) || (q && !dense(*q))) return range(0, n);
    detail::TermSum sum;
    for (const detail::TermSum& part : split.per_part<detail::TermSum>(n, range)) sum.merge(part);
    return sum;
  }

  /// Calls f(p_chunk, q_chunk_or_null, len) over target ids [first, end) in chunks (sum_chunks).
  template <class Fn>
  void for_chunks(const View& p, const View* q, std::int32_t first, std::int32_t end, Fn f) const {
    using B = logits_detail::F<Arch>;
    constexpr std::int32_t W = B::size, kChunk = 2048;
    alignas(64) float pc[kChunk], qc[kChunk];
    for (std::int32_t begin = first; begin < end; begin += kChunk) {
      const std::int32_t len = std::min(kChunk, end - begin);
      std::int32_t i = 0;
      for (; i + W <= len; i += W) {
        logits_detail::probs<Arch>(p, begin + i).store_aligned(pc + i);
        if (q) logits_detail::probs<Arch>(*q, begin + i).store_aligned(qc + i);
      }
      for (; i < len; ++i) {
        pc[i] = value(p, begin + i);
        if (q) qc[i] = value(*q, begin + i);
      }
      f(pc, q ? qc : nullptr, len);
    }
  }

  /// The library's draw (cpu/draw.hpp) over p's lanes `pv` (w = p), or with `qv`, over
  /// max(p - q, 0) taken in double (as cpu::Weights, so probability rows holding these values
  /// draw the same token). `one(v)` is element v's weight alone; `patched` an element whose lane
  /// takes one(patched) (the one-hot residual's rejected draft; -1: none).
  template <class PVec, class QVec, class One>
  Checked<std::int32_t> draw_lanes(PVec pv, QVec qv, One one, std::int32_t patched, float u) const {
    using B = logits_detail::F<Arch>;
    using Dv = logits_detail::D<Arch>;
    constexpr std::int32_t WF = B::size;
    const auto vec = [&](std::int32_t v, Dv& lo, Dv& hi) SPECVERIFY_LAMBDA_INLINE {
      const B p = pv(v);
      if constexpr (std::is_same<QVec, std::nullptr_t>::value) {
        lo = widen_low(p);
        hi = widen_high(p);
      } else if (!xsimd::any(p > B(0.0f))) {  // max(0 - q, 0): q not read
        lo = hi = Dv(0.0);
      } else {
        const B q = qv(v);
        lo = lane_max(widen_low(p) - widen_low(q), Dv(0.0));
        hi = lane_max(widen_high(p) - widen_high(q), Dv(0.0));
      }
      if (static_cast<std::uint32_t>(patched - v) < static_cast<std::uint32_t>(WF)) patch_lane(lo, hi, patched - v, one(patched));
    };
    // The views were validated, and p <= 1 (w <= 1, 1 / norm <= 1) bounds every weight.
    if (split.active()) return cpu::draw<Arch>(split, [&] { return LanePass<decltype(vec), One>{vec, one, 1.0}; }, n, u);
    return cpu::draw<Arch>(vec, one, [] { return Checked<double>{1.0, true}; }, n, u);
  }

  /// The draw over a listed view's kept tokens, whose weights `one` gives (0 elsewhere): the same
  /// sums as the dense draw, so the same token.
  template <class One>
  Checked<std::int32_t> draw_listed(const View& p, One one, float u) const {
    core::FixedSum total;
    for (std::int32_t k = 0; k < p.listed; ++k) total.add(one(p.kept[k]));
    if (!total.positive()) return {-1, true};
    const double threshold = static_cast<double>(u) * total.value();
    core::FixedSum before;
    for (std::int32_t k = 0; k < p.listed; ++k) {
      const double w = one(p.kept[k]);
      if (!(w > 0.0)) continue;
      before.add(w);
      if (before.value() > threshold) return {p.kept[k], true};
    }
    return {-1, true};  // unreachable: the prefix reaches the total
  }
};

template <class Arch, class Logit>
Checked<std::int32_t> LogitRows<Arch, Logit>::gumbel_argmax(const View& p, std::uint64_t seed,
                                                            std::int64_t position) const {
  if (!p.ok) return {-1, false};
  if (!p.has_mass() || p.greedy) return {p.argmax, true};
  std::uint32_t words[4];
  std::uint32_t cached = 0xffffffffu;
  const auto key = [&](std::int32_t i, float a) {
    const auto block = static_cast<std::uint32_t>(i) >> 2;
    if (block != cached) {
      core::gumbel_words(seed, position, block, words);
      cached = block;
    }
    return double(a) + core::gumbel(words[i & 3]);
  };
  std::int32_t best = p.argmax;
  double best_key = key(best, 0.0f);
  using B = logits_detail::F<Arch>;
  constexpr std::int32_t W = B::size;
  const std::int32_t rows = p.row.n;
  const auto consider = [&](std::int32_t i, float g) {
    if (!(g >= p.threshold)) return;
    const float a = core::weight_argument(g, p.max, p.inv_temperature);
    if (double(a) + core::kGumbelMax < best_key) return;  // cannot reach the best key
    const double k = key(i, a);
    if (k > best_key || (k == best_key && i < best)) {
      best_key = k;
      best = i;
    }
  };
  if (p.listed >= 0) {
    for (std::int32_t k = 0; k < p.listed; ++k) consider(p.kept[k], core::processed_logit(p.row, p.kept[k]).g);
    return {best, true};
  }
  logits_detail::FB<Arch> ok(true);
  std::int32_t i = 0;
  for (; i + W <= rows; i += W) {
    const B g = logits_detail::load_g<Arch, logits_detail::Entries::patched>(p.row, i, ok);
    // a + kGumbelMax >= best_key  <=>  g >= max + (best_key - kGumbelMax) T, with slack for rounding.
    const B a = (g - B(p.max)) * B(p.inv_temperature);
    if (!xsimd::any((g >= B(p.threshold)) & (a >= B(static_cast<float>(best_key - core::kGumbelMax - 1e-3))))) {
      continue;
    }
    alignas(64) float lanes[W];
    g.store_aligned(lanes);
    for (std::int32_t l = 0; l < W; ++l) consider(i + l, lanes[l]);
  }
  for (; i < rows; ++i) consider(i, core::processed_logit(p.row, i).g);
  return {best, true};
}

/// The Gumbel-max winner of a slice of a probability row: the key log p + Gumbel, its token and
/// p there (token -1: no mass).
struct GumbelBest {
  double key = -HUGE_VAL;
  std::int32_t token = -1;
  float p = 0.0f;
  bool ok = true;

  /// Slices merged in vocabulary order: a tie keeps the lower token.
  void merge(const GumbelBest& later) {
    ok = ok && later.ok;
    if (later.key > key) {
      key = later.key;
      token = later.token;
      p = later.p;
    }
  }
};

/// Gumbel-max over p[0..n), element i being token first + i (the noise is keyed by the token):
/// argmax over p > 0 of log p(v) + Gumbel(seed, position, v), lowest token on ties; ok = false on
/// a NaN, infinite or negative value.
inline GumbelBest gumbel_best(const float* p, std::int32_t n, std::int32_t first, std::uint64_t seed,
                              std::int64_t position) {
  GumbelBest best;
  float floor_p = 0.0f;  // p below this cannot reach best.key: exp(best.key - kGumbelMax)
  std::uint32_t words[4];
  std::uint32_t cached = 0xffffffffu;
  for (std::int32_t i = 0; i < n; ++i) {
    const float v = p[i];
    best.ok = best.ok && valid_probability(v);
    if (!(v > floor_p) || !(v <= FLT_MAX)) continue;
    const auto token = static_cast<std::uint32_t>(first + i);
    const auto block = token >> 2;
    if (block != cached) {
      core::gumbel_words(seed, position, block, words);
      cached = block;
    }
    const double k = core::shared_log(double(v)) + core::gumbel(words[token & 3]);
    if (k > best.key) {
      best.key = k;
      best.token = static_cast<std::int32_t>(token);
      best.p = v;
      floor_p = static_cast<float>(std::exp(best.key - core::kGumbelMax) * (1.0 - 1e-6));
    }
  }
  return best;
}

/// Gumbel-max over a probability row (weights p as given): gumbel_best's token; -1 without mass.
template <class Arch = DefaultArch>
Checked<std::int32_t> gumbel_argmax(const float* p, std::int32_t n, std::uint64_t seed,
                                    std::int64_t position) {
  const GumbelBest best = gumbel_best(p, n, 0, seed, position);
  return {best.ok ? best.token : -1, best.ok};
}

}  // namespace specverify::cpu
