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
  /// least kMinPart elements (below RowTeam::kMaxParts: for_parts_and runs one task more).
  static std::int32_t parts_for(std::int32_t n, std::int32_t threads) {
    return std::max(1, std::min({threads, n / kMinPart, RowTeam::kMaxParts - 1}));
  }

  bool active() const { return team != nullptr && parts > 1; }

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

  /// fn(begin, end) of every part of a row of n, on the team, in part order (summaries to merge).
  template <class T, class Fn>
  std::vector<T> per_part(std::int32_t n, const Fn& fn) const {
    std::vector<T> results(static_cast<std::size_t>(parts));
    for_parts(n, [&](std::int32_t part, std::int32_t begin, std::int32_t end) {
      results[static_cast<std::size_t>(part)] = fn(begin, end);
    });
    return results;
  }

  /// for_parts, and extra() as one more task beside the parts (the work they leave).
  template <class Fn, class Extra>
  void for_parts_and(std::int32_t n, const Fn& fn, const Extra& extra) const {
    team->run(parts + 1, [&](std::int32_t part) {
      if (part == parts) {
        extra();
      } else {
        fn(part, begin(part, n), begin(part + 1, n));
      }
    });
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

/// A split row's weights summed part by part on the team: each part's chunk sums, at the scale
/// the merged bound asks for (a second pass only where it is not 1). make_pass() gives each part
/// its own pass (passes may keep state, as WeightsPass's screen does); check() is a function of
/// the row alone, so the parts' bounds agree (they are merged as the largest, validity as all).
/// The row's mass, and what a draw locates its crossing in.
template <class Arch, class MakePass>
class SplitSums {
 public:
  SplitSums(const RowSplit& split, const MakePass& make_pass, std::int32_t n)
      : split_(split), make_pass_(make_pass), n_(n), parts_(static_cast<std::size_t>(split.parts)) {
    sum_parts();
    for (const Part& part : parts_) {
      ok_ = ok_ && part.bound.ok;
      bound_ = std::max(bound_, part.bound.value);
    }
    if (!ok_) return;
    if (!core::fixed_in_domain(bound_, n)) {
      scale_ = core::fixed_scale(bound_, n);
      sum_parts();
    }
    for (const Part& part : parts_) total_.merge(part.sums.total);
  }

  /// Whether every value read was valid.
  bool ok() const { return ok_; }
  /// The sum of the weights (0 without mass).
  double mass() const { return total_.value() / scale_; }

  /// The smallest i with w_0 + ... + w_i > u * sum(w), located in the part where it lies from
  /// the exact sum of the parts before it; -1 without mass.
  std::int32_t locate(float u) const {
    if (!total_.positive()) return -1;
    const double threshold = static_cast<double>(u) * total_.value();
    core::FixedSum before;
    for (std::int32_t part = 0; part < split_.parts; ++part) {
      core::FixedSum through = before;
      through.merge(parts_[static_cast<std::size_t>(part)].sums.total);
      if (through.value() > threshold || part + 1 == split_.parts) {
        const std::int32_t begin = split_.begin(part, n_);
        auto pass = make_pass_();
        ShiftedPass<decltype(pass)> shifted{pass, begin};
        const std::int32_t i = cpu::locate<Arch>(shifted, shifted, split_.begin(part + 1, n_) - begin, scale_,
                                                 parts_[static_cast<std::size_t>(part)].sums, before, threshold);
        return i < 0 ? -1 : begin + i;
      }
      before = through;
    }
    return -1;  // no parts: unreachable for a split row
  }

 private:
  struct Part {
    ChunkSums sums;
    Checked<double> bound;
  };

  void sum_parts() {
    split_.for_parts(n_, [&](std::int32_t part, std::int32_t begin, std::int32_t end) {
      auto pass = make_pass_();
      ShiftedPass<decltype(pass)> shifted{pass, begin};
      sum_chunks<Arch>(shifted, shifted, end - begin, scale_, parts_[static_cast<std::size_t>(part)].sums);
      parts_[static_cast<std::size_t>(part)].bound = pass.check();
    });
  }

  const RowSplit& split_;
  const MakePass& make_pass_;
  std::int32_t n_;
  std::vector<Part> parts_;
  bool ok_ = true;
  double bound_ = 0.0, scale_ = 1.0;
  core::FixedSum total_;
};

/// cpu::draw over a split row: the same token as the unsplit draw, for any number of parts.
template <class Arch, class MakePass>
Checked<std::int32_t> draw(const RowSplit& split, const MakePass& make_pass, std::int32_t n, float u) {
  const SplitSums<Arch, MakePass> sums(split, make_pass, n);
  if (!sums.ok()) return {-1, false};
  return {sums.locate(u), true};
}

}  // namespace specverify::cpu
