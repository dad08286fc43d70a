// Rows in the model's dtype (docs/api.md "Rows in the model's dtype"): float16 and bfloat16
// lanes widened to float as a pass reads them, never copied into a float buffer. Each widening is
// exact, so a 16-bit row gives the bits of the float row holding its values on every instruction
// set. One generic body over 16-bit lanes zero-extended to 32 bits; the zero-extending load per
// instruction set in cpu/arch/<arch>/load_u16.hpp, and AVX-512's own conversions in
// cpu/arch/avx512f/widen.hpp.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>

#include "specverify/cpu/arch/avx2/load_u16.hpp"
#include "specverify/cpu/arch/avx512f/widen.hpp"
#include "specverify/cpu/arch/sse2/load_u16.hpp"
#include "specverify/cpu/inlining.hpp"
#include "specverify/dtypes.hpp"

namespace specverify::cpu {

static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2, "16-bit rows are arrays of their bits");

namespace kernel {

/// W 16-bit lanes from p, zero-extended: element by element where no arch overload applies (AVX
/// without AVX2 has no 256-bit integer widening; xsimd's avx derives from generic, not sse2).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<std::int32_t, Arch> load_u16(const std::uint16_t* p,
                                                                  xsimd::kernel::requires_arch<xsimd::generic>) {
  using I = xsimd::batch<std::int32_t, Arch>;
  alignas(64) std::int32_t lanes[I::size];
  for (std::size_t l = 0; l < I::size; ++l) lanes[l] = p[l];
  return I::load_aligned(lanes);
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> widen(const bfloat16* p, xsimd::kernel::requires_arch<xsimd::generic>) {
  const auto lanes = load_u16<Arch>(reinterpret_cast<const std::uint16_t*>(p), Arch{});
  return xsimd::bitwise_cast<xsimd::batch<float, Arch>>(lanes << 16);
}

/// float16's widening (dtypes.hpp) lane by lane: exponent rebiased, subnormals as mantissa * 2^-24,
/// infinities and NaNs with their payload.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> widen(const float16* p, xsimd::kernel::requires_arch<xsimd::generic>) {
  using I = xsimd::batch<std::int32_t, Arch>;
  using F = xsimd::batch<float, Arch>;
  const I h = load_u16<Arch>(reinterpret_cast<const std::uint16_t*>(p), Arch{});
  const I sign = (h & I(0x8000)) << 16;
  const I exponent = (h >> 10) & I(0x1f), mantissa = h & I(0x3ff);
  const I normal = ((h & I(0x7fff)) << 13) + I(112 << 23);
  const I special = I(0x7f800000) | (mantissa << 13);
  const F subnormal = xsimd::to_float(mantissa) * F(5.9604644775390625e-8f);  // 2^-24
  I bits = xsimd::select(exponent == I(0x1f), special, normal);
  bits = xsimd::select(exponent == I(0), xsimd::bitwise_cast<I>(subnormal), bits);
  return xsimd::bitwise_cast<F>(bits | sign);
}

}  // namespace kernel

/// W row elements from p, as floats.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> load_widened(const float* p) {
  return xsimd::batch<float, Arch>::load_unaligned(p);
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> load_widened(const float16* p) {
  return kernel::widen<Arch>(p, Arch{});
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> load_widened(const bfloat16* p) {
  return kernel::widen<Arch>(p, Arch{});
}

}  // namespace specverify::cpu
