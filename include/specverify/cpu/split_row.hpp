// One row's passes split into parts over the row team (cpu/row_team.hpp), each part's summary
// merged in part order. Every summary merges exactly (FixedSums, maxima with their lowest index,
// validity), so a split row gives the bits of the unsplit one for any number of parts: the same
// argument as the sharded verify's, with threads for ranks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specverify/core/fixed_sum.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/cpu/draw.hpp"
#include "specverify/cpu/row_team.hpp"

namespace specverify::cpu {

/// How one verify call splits its rows: `parts` slices of whole 64-element blocks (so a bitmask
/// word and every vector width divide each slice's start), run on `team`. Without a team, or
/// with one part, rows are read unsplit.
struct RowSplit {
  // Below ~16k elements a part's work (~4 us) is not worth its hand-off.
  static constexpr std::int32_t kMinPart = 1 << 14;
  static constexpr std::int32_t kBlock = 64;

  RowTeam* team = nullptr;
  std::int32_t parts = 1;

  /// `threads` parts (the call's thread allowance) of rows of n, or fewer so that each holds at
  /// least kMinPart elements (at most RowTeam::kMaxParts).
  static std::int32_t parts_for(std::int32_t n, std::int32_t threads) {
    return std::max(1, std::min({threads, n / kMinPart, RowTeam::kMaxParts}));
  }

  bool active() const { return parts > 1; }

  /// Where part `part` of a row of n starts (part == parts: n).
  std::int32_t begin(std::int32_t part, std::int32_t n) const {
    const std::int64_t even = (std::int64_t{n} + parts - 1) / parts;
    const std::int64_t size = (even + kBlock - 1) / kBlock * kBlock;
    return static_cast<std::int32_t>(std::min<std::int64_t>(n, part * size));
  }

  /// Runs fn(part, begin, end) for every part of a row of n, on the team.
  template <class Fn>
  void for_parts(std::int32_t n, const Fn& fn) const {
    team->run(parts, [&](std::int32_t part) { fn(part, begin(part, n), begin(part + 1, n)); });
  }
};

/// A weights pass (cpu/draw.hpp's vec, one and check) read from element `first` on: a part's
/// view of the row's pass.
template <class Pass>
struct ShiftedPass {
  Pass& pass;
  std::int32_t first;

  template <class D>
  SPECVERIFY_ALWAYS_INLINE void operator()(std::int32_t i, D& lo, D& hi) {
    pass(first + i, lo, hi);
  }
  double operator()(std::int32_t i) { return pass(first + i); }
};

/// A pass of stateless functors (vec and one as cpu::draw takes them) whose weights `bound`
/// bounds.
template <class Vec, class One>
struct LanePass {
  const Vec& vec;
  const One& one;
  double bound;

  template <class D>
  SPECVERIFY_ALWAYS_INLINE void operator()(std::int32_t i, D& lo, D& hi) const {
    vec(i, lo, hi);
  }
  double operator()(std::int32_t i) const { return one(i); }
  Checked<double> check() const { return {bound, true}; }
};

/// cpu::draw over a split row: the parts' chunk sums on the team, then the crossing located in the
/// part where it lies, from the exact sum of the parts before it. make_pass() gives each part its
/// own pass (passes may keep state, as WeightsPass's screen does); check() is a function of the
/// row alone, so the parts' bounds agree (they are merged as the largest, validity as all).
template <class Arch, class MakePass>
Checked<std::int32_t> draw(const RowSplit& split, const MakePass& make_pass, std::int32_t n, float u) {
  struct Part {
    ChunkSums sums;
    Checked<double> bound;
  };
  std::vector<Part> parts(static_cast<std::size_t>(split.parts));
  const auto sum_parts = [&](double scale) {
    split.for_parts(n, [&](std::int32_t part, std::int32_t begin, std::int32_t end) {
      auto pass = make_pass();
      ShiftedPass<decltype(pass)> shifted{pass, begin};
      sum_chunks<Arch>(shifted, shifted, end - begin, scale, parts[part].sums);
      parts[part].bound = pass.check();
    });
  };
  double scale = 1.0;
  sum_parts(scale);
  Checked<double> bound{0.0, true};
  for (const Part& part : parts) {
    bound.ok = bound.ok && part.bound.ok;
    bound.value = std::max(bound.value, part.bound.value);
  }
  if (!bound.ok) return {-1, false};
  if (!core::fixed_in_domain(bound.value, n)) {
    scale = core::fixed_scale(bound.value, n);
    sum_parts(scale);
  }
  core::FixedSum total;
  for (const Part& part : parts) total.merge(part.sums.total);
  if (!total.positive()) return {-1, true};
  const double threshold = static_cast<double>(u) * total.value();
  core::FixedSum before;
  for (std::int32_t part = 0; part < split.parts; ++part) {
    core::FixedSum through = before;
    through.merge(parts[part].sums.total);
    if (through.value() > threshold || part + 1 == split.parts) {
      const std::int32_t begin = split.begin(part, n);
      auto pass = make_pass();
      ShiftedPass<decltype(pass)> shifted{pass, begin};
      const std::int32_t i =
          locate<Arch>(shifted, shifted, split.begin(part + 1, n) - begin, scale, parts[part].sums, before, threshold);
      return {i < 0 ? -1 : begin + i, true};
    }
    before = through;
  }
  return {-1, true};  // no parts: unreachable for a split row
}

}  // namespace specverify::cpu
