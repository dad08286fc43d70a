// Lane primitives the row kernels share, one generic body each (here) and the instruction sets'
// own forms in cpu/arch/<arch>/lanes.hpp, chosen by overload (xsimd's requires_arch): the bits of a
// bitmask as lanes, the classification of float lanes, gathers, the lanes >= a pivot appended to a
// buffer, and the exp's scaling by 2^n. Every form gives the same lanes, bit for bit.
// Kernels negate masks with `~`, never `!`: xsimd 8.1's `!` compares with batch_bool(false), built
// by a function g++ does not inline on AVX-512, so a `!` in a loop is a call per vector there (and
// every vector register spilled around it).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cfloat>
#include <cstdint>

#include "specverify/core/logit_rows.hpp"
#include "specverify/cpu/arch/avx512dq/lanes.hpp"
#include "specverify/cpu/arch/avx512f/lanes.hpp"
#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

/// Bits i .. i + W - 1 of a bitmask (bit i % 32 of word i / 32; i a multiple of W) as lanes.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<float, Arch> bit_lanes(const std::uint32_t* bits, std::int32_t i,
                                                                  xsimd::kernel::requires_arch<xsimd::generic>) {
  using I = xsimd::batch<std::int32_t, Arch>;
  constexpr std::int32_t W = I::size;
  const std::uint32_t word = bits[i >> 5] >> (i & 31);
  alignas(64) std::int32_t lane_bits[W];
  for (std::int32_t l = 0; l < W; ++l) lane_bits[l] = static_cast<std::int32_t>(1u << l);
  const I hit = I(static_cast<std::int32_t>(word)) & I::load_aligned(lane_bits);
  return xsimd::to_float(hit) != xsimd::batch<float, Arch>(0.0f);
}

/// Lanes holding NaN or +inf.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<float, Arch> nan_or_inf(const xsimd::batch<float, Arch>& x,
                                                                   xsimd::kernel::requires_arch<xsimd::generic>) {
  return ~(x < xsimd::batch<float, Arch>(core::kInf));
}

/// Lanes that are not +-0 or a positive normal float: NaN, +-inf, subnormals, negatives.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<float, Arch> not_zero_or_normal(const xsimd::batch<float, Arch>& x,
                                                                           xsimd::kernel::requires_arch<xsimd::generic>) {
  using B = xsimd::batch<float, Arch>;
  return ~((x == B(0.0f)) | ((x >= B(FLT_MIN)) & (x <= B(FLT_MAX))));
}

/// Lanes that are not a positive normal float.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<float, Arch> not_normal(const xsimd::batch<float, Arch>& x,
                                                                   xsimd::kernel::requires_arch<xsimd::generic>) {
  using B = xsimd::batch<float, Arch>;
  return ~((x >= B(FLT_MIN)) & (x <= B(FLT_MAX)));
}

/// p[index] lane by lane.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> gather_at(const float* p, const xsimd::batch<std::int32_t, Arch>& index,
                                                             xsimd::kernel::requires_arch<xsimd::generic>) {
  return xsimd::batch<float, Arch>::gather(p, index);
}

/// Appends the lanes of g that are >= pivot to out[count ..] in lane order; returns the new count.
/// out must have room for W more values (a form may store all W lanes).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE std::int32_t append_at_least(float* out, std::int32_t count, const xsimd::batch<float, Arch>& g,
                                                      float pivot, xsimd::kernel::requires_arch<xsimd::generic>) {
  constexpr std::int32_t W = xsimd::batch<float, Arch>::size;
  alignas(64) float lanes[W];
  g.store_aligned(lanes);
  for (std::int32_t l = 0; l < W; ++l) {
    if (lanes[l] >= pivot) out[count++] = lanes[l];
  }
  return count;
}

/// y 2^n for the exp (core::exp_weight): n integral, t = n + kRoundMagic (whose bits hold n), and
/// the result a normal float; exact.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> times_pow2(const xsimd::batch<float, Arch>& y, const xsimd::batch<float, Arch>&,
                                                              const xsimd::batch<float, Arch>& t,
                                                              xsimd::kernel::requires_arch<xsimd::generic>) {
  using I = xsimd::batch<std::int32_t, Arch>;
  const I bits = xsimd::bitwise_cast<I>(t) - I(static_cast<std::int32_t>(core::float_bits(core::kRoundMagic)) - 127);
  return y * xsimd::bitwise_cast<xsimd::batch<float, Arch>>(bits << 23);
}

}  // namespace specverify::cpu::kernel
