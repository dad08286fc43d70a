// core::FixedSum lane by lane (xsimd): each double lane rounds its term with the same two IEEE
// additions as FixedSum::add and adds the rounded parts as 64-bit integers, so a sum taken over
// vectors of any width (SSE2, AVX2, AVX-512) or split anywhere is FixedSum's, bit for bit.
//
// Per double vector: two multiplies, four additions and two 64-bit integer additions (add_coarse:
// one fused multiply-add and one integer addition). The integer lanes
// accumulate the raw bits of (h + kMagic), which equal the bits of kMagic plus h while |h| < 2^51;
// flush() subtracts kMagic's bits once per term, in wrapping unsigned arithmetic (the true sum
// fits: the domain bounds it by 2^62 units).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>
#include <cstring>

#include "specverify/core/fixed_sum.hpp"
#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu {

template <class Arch>
class FixedLanes {
 public:
  using D = xsimd::batch<double, Arch>;
  using L = xsimd::batch<std::int64_t, Arch>;
  static constexpr std::int32_t W = D::size;

  /// Terms are multiplied by `scale` (a power of two: exact) before rounding.
  explicit FixedLanes(double scale = 1.0) : unit_(scale * core::kFixedHalfScale) {}

  SPECVERIFY_ALWAYS_INLINE void add(const D& t) {
    const D magic(core::kFixedMagic), half(core::kFixedHalfScale), unit(unit_);
    // s = t unit is exact (a power of two), so a compiler that fuses t * unit + magic or
    // t * unit - h into one instruction changes no bit: each is one rounding (the first) or exact.
    const D a = t * unit + magic;
    const D h = a - magic;
    const D b = (t * unit - h) * half + magic;
    hi_ += xsimd::bitwise_cast<L>(a);
    lo_ += xsimd::bitwise_cast<L>(b);
    ++adds_;
  }

  /// FixedSum::add_coarse lane by lane: one fused multiply-add and one integer addition (lo is
  /// untouched: its units stay 0).
  SPECVERIFY_ALWAYS_INLINE void add_coarse(const D& t) {
    hi_ += coarse_bits(t);
    ++coarse_adds_;
  }
  /// Undoes an add_coarse(t) of the same lanes, exactly: the lanes are integers that wrap, so a
  /// term is taken back bit for bit even where it lay outside FixedSum's domain (a pass that sums a
  /// row as it reads it and then replaces a few of its terms).
  SPECVERIFY_ALWAYS_INLINE void remove_coarse(const D& t) {
    hi_ -= coarse_bits(t);
    --coarse_adds_;
  }

  /// Adds the lanes' sums to `sum` and starts the sums again. Terms must be finite (callers
  /// validate what they read: a NaN or infinite term gives a meaningless sum, never undefined
  /// behaviour); whether they were inside the domain is the caller's question (core::fixed_in_domain
  /// over the largest |term|, which a caller with no bound on its terms tracks), asked of the whole
  /// row so every split agrees.
  void flush(core::FixedSum& sum) {
    alignas(64) std::int64_t hi[W], lo[W];
    hi_.store_aligned(hi);
    lo_.store_aligned(lo);
    std::uint64_t magic_bits;
    const double magic = core::kFixedMagic;
    std::memcpy(&magic_bits, &magic, sizeof magic_bits);
    // Every add put kMagic's bits into hi; only the fine ones put them into lo.
    const std::uint64_t hi_bias = magic_bits * static_cast<std::uint64_t>(adds_ + coarse_adds_);
    const std::uint64_t lo_bias = magic_bits * static_cast<std::uint64_t>(adds_);
    for (std::int32_t l = 0; l < W; ++l) {
      sum.add_units(static_cast<std::int64_t>(static_cast<std::uint64_t>(hi[l]) - hi_bias),
                    static_cast<std::int64_t>(static_cast<std::uint64_t>(lo[l]) - lo_bias));
    }
    hi_ = L(std::int64_t{0});
    lo_ = L(std::int64_t{0});
    adds_ = 0;
    coarse_adds_ = 0;
  }

 private:
  // t unit is exact for any float t (a power of two in double), so fusing it with the addition
  // changes no bit: every call site rounds a term alike.
  SPECVERIFY_ALWAYS_INLINE L coarse_bits(const D& t) const {
    return xsimd::bitwise_cast<L>(t * D(unit_) + D(core::kFixedMagic));
  }

  double unit_;
  L hi_ = L(std::int64_t{0}), lo_ = L(std::int64_t{0});
  std::int64_t adds_ = 0;         // add() calls since the last flush
  std::int64_t coarse_adds_ = 0;  // add_coarse() calls, less remove_coarse()
};

}  // namespace specverify::cpu
