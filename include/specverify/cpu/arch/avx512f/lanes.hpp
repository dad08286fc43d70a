// AVX-512F: cpu/lanes.hpp's primitives in intrinsics (the masked forms: g++ 12 calls the unmasked
// ones' undefined operand uninitialised, a false -Wmaybe-uninitialized users building with -Werror
// would inherit).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>
#include <cstring>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_AVX512F
/// The word's half holding bits i .. i + 15 (little-endian): one mask load.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch_bool<float, Arch> bit_lanes(const std::uint32_t* bits, std::int32_t i,
                                                                  xsimd::kernel::requires_arch<xsimd::avx512f>) {
  std::uint16_t half;
  std::memcpy(&half, reinterpret_cast<const unsigned char*>(bits) + (i >> 3), sizeof half);
  return xsimd::batch_bool<float, Arch>(static_cast<__mmask16>(half));
}

/// xsimd 8.1's batch::gather takes its generic element-wise path on AVX-512.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> gather_at(const float* p, const xsimd::batch<std::int32_t, Arch>& index,
                                                             xsimd::kernel::requires_arch<xsimd::avx512f>) {
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xffff, index, p, sizeof(float));
}

/// Compressed in a register, then one plain store of all 16 lanes.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE std::int32_t append_at_least(float* out, std::int32_t count, const xsimd::batch<float, Arch>& g,
                                                      float pivot, xsimd::kernel::requires_arch<xsimd::avx512f>) {
  const auto keep = g >= xsimd::batch<float, Arch>(pivot);
  _mm512_storeu_ps(out + count, _mm512_maskz_compress_ps(keep, g));
  return count + __builtin_popcount(static_cast<unsigned>(__mmask16(keep)));
}

/// y 2^n by scalef, exact like the multiply it replaces (the result is a normal float), and no
/// integer shift, inside whose intrinsic g++ 12 reports the same false warning.
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> times_pow2(const xsimd::batch<float, Arch>& y, const xsimd::batch<float, Arch>& n,
                                                              const xsimd::batch<float, Arch>&,
                                                              xsimd::kernel::requires_arch<xsimd::avx512f>) {
  return _mm512_maskz_scalef_ps(0xffff, y, n);
}
#endif

}  // namespace specverify::cpu::kernel
