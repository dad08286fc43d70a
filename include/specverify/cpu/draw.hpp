// The CPU's one inverse-CDF draw (docs/api.md "Randomness"): the smallest i with
// w_0 + ... + w_i > u * sum(w), every sum a core::FixedSum, so the token drawn is the same for
// any SIMD width, and for any split of the row that sums its slices alike.
//
// Weights come from the caller as a functor pair over element indices:
//   vec(i, lo, hi)  the weights of elements i .. i + 2W - 1 as two double vectors (low half, high
//                   half; W double lanes each), for i + 2W <= n;
//   one(i)          the weight of element i alone: the same double value as its lane.
//   check()         after a pass: whether every value read was valid, and a bound on the weights
//                   (a function of the row alone: it decides FixedSum's scale).
// Weights are nonnegative.
//
// Passes: one over the row sums each chunk (core::chunk_length elements) into a FixedSum; the
// chunk holding the crossing is then rescanned element by element from its start. Rows whose
// weights leave FixedSum's domain (unnormalised rows with values near 2^10 and above) are summed
// again at the scale core::fixed_scale gives, a power of two chosen from the row's max alone.
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstdint>

#include "specverify/core/fixed_sum.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/cpu/fixed_lanes.hpp"
#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu {

/// A row pass's result: the value, and whether every element read was a valid probability.
template <class T>
struct Checked {
  T value{};
  bool ok = true;
};

/// Sets lane j (0 <= j < 2W) of the weights in (lo, hi) to w: an element a vector pass patches (a
/// one-hot draft's rejected token, an absorbed sibling).
template <class D>
SPECVERIFY_ALWAYS_INLINE void patch_lane(D& lo, D& hi, std::int32_t j, double w) {
  alignas(64) double lanes[2 * D::size];
  lo.store_aligned(lanes);
  hi.store_aligned(lanes + D::size);
  lanes[j] = w;
  lo = D::load_aligned(lanes);
  hi = D::load_aligned(lanes + D::size);
}

using core::ChunkSums;

template <class Arch, class Vec, class One>
SPECVERIFY_ALWAYS_INLINE void sum_chunks(Vec& vec, One& one, std::int32_t n, double scale, ChunkSums& out) {
  using D = xsimd::batch<double, Arch>;
  constexpr std::int32_t WF = 2 * static_cast<std::int32_t>(D::size);
  const std::int32_t chunk = core::chunk_length(n);
  FixedLanes<Arch> lanes(scale);
  out.total = {};
  out.chunks = 0;
  for (std::int32_t begin = 0; begin < n; begin += chunk) {
    const std::int32_t end = n - begin > chunk ? begin + chunk : n;
    core::FixedSum s;
    std::int32_t i = begin;
    for (; i + WF <= end; i += WF) {
      D lo, hi;
      vec(i, lo, hi);
      lanes.add(lo);
      lanes.add(hi);
    }
    lanes.flush(s);
    for (; i < end; ++i) s.add(one(i) * scale);
    out.chunk[out.chunks++] = s;
    out.total.merge(s);
  }
}

/// The smallest i in [0, n) with before + w_0 + ... + w_i > threshold, the weights summed at
/// `scale` from `sums` (this row's, or this slice's, at that scale); -1 if there is none. A row
/// split into slices finds its crossing in the slice where it lies, starting from the exact sum
/// of the slices before it: FixedSums are exact, so the index is that of the whole row.
template <class Arch, class Vec, class One>
std::int32_t locate(Vec& vec, One& one, std::int32_t n, double scale, const ChunkSums& sums,
                    core::FixedSum before, double threshold) {
  using D = xsimd::batch<double, Arch>;
  constexpr std::int32_t W = static_cast<std::int32_t>(D::size), WF = 2 * W;
  std::int32_t c = 0;
  for (; c + 1 < sums.chunks; ++c) {
    core::FixedSum through = before;
    through.merge(sums.chunk[c]);
    if (through.value() > threshold) break;
    before = through;
  }
  const std::int32_t chunk = core::chunk_length(n);
  const std::int32_t begin = c * chunk, end = std::min(n, begin + chunk);
  // The rescan adds the same rounded terms the chunk's sum did, so it reaches that sum at the
  // chunk's end, which lies above the threshold: the crossing is inside the chunk. Blocks of
  // kRescanBlock elements are summed lane by lane first; the one holding the crossing is then
  // scanned element by element.
  constexpr std::int32_t kRescanBlock = 64;
  static_assert(kRescanBlock % WF == 0, "blocks of whole vectors");
  std::int32_t block = begin;
  for (; block + kRescanBlock < end; block += kRescanBlock) {
    FixedLanes<Arch> lanes(scale);
    for (std::int32_t i = block; i < block + kRescanBlock; i += WF) {
      D lo, hi;
      vec(i, lo, hi);
      lanes.add(lo);
      lanes.add(hi);
    }
    core::FixedSum through = before;
    lanes.flush(through);
    if (through.value() > threshold) break;
    before = through;
  }
  const auto step = [&](double w) {
    if (!(w > 0.0)) return false;
    before.add(w * scale);
    return before.value() > threshold;
  };
  const std::int32_t block_end = std::min(end, block + kRescanBlock);
  std::int32_t i = block;
  for (; i + WF <= block_end; i += WF) {
    D lo, hi;
    vec(i, lo, hi);
    if (!xsimd::any((lo > D(0.0)) | (hi > D(0.0)))) continue;
    alignas(64) double w[WF];
    lo.store_aligned(w);
    hi.store_aligned(w + W);
    for (std::int32_t l = 0; l < WF; ++l) {
      if (step(w[l])) return i + l;
    }
  }
  for (; i < block_end; ++i) {
    if (step(one(i))) return i;
  }
  return -1;  // past the slice's mass: unreachable where the crossing lies in it
}

/// The draw; -1 when the weights have no mass (every weight rounds to 0 at 2^-81), with ok from
/// check() (nothing but an index in [0, n) or -1 is returned either way).
template <class Arch, class Vec, class One, class Check>
Checked<std::int32_t> draw(Vec vec, One one, Check check, std::int32_t n, float u) {
  ChunkSums sums;
  double scale = 1.0;
  sum_chunks<Arch>(vec, one, n, scale, sums);
  const Checked<double> bound = check();
  if (!bound.ok) return {-1, false};
  if (!core::fixed_in_domain(bound.value, n)) {
    scale = core::fixed_scale(bound.value, n);
    sum_chunks<Arch>(vec, one, n, scale, sums);
  }
  if (!sums.total.positive()) return {-1, true};
  const double threshold = static_cast<double>(u) * sums.total.value();
  return {locate<Arch>(vec, one, n, scale, sums, core::FixedSum{}, threshold), true};
}

}  // namespace specverify::cpu
