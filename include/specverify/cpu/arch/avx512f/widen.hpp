// AVX-512: the generic widenings of cpu/widen.hpp in intrinsics, the masked forms throughout
// (g++ 12 calls the unmasked ones' undefined operand uninitialised, which xsimd's operators use).
// Not vcvtph2ps: it quiets a signalling NaN, and a row's bits are its values' bits.
#pragma once

#include <xsimd/xsimd.hpp>

#include "specverify/cpu/inlining.hpp"
#include "specverify/dtypes.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_AVX512F
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> widen(const float16* p, xsimd::kernel::requires_arch<xsimd::avx512f>) {
  constexpr __mmask16 all = 0xffff;
  const __m512i h = _mm512_maskz_cvtepu16_epi32(all, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i sign = _mm512_maskz_slli_epi32(all, _mm512_and_si512(h, _mm512_set1_epi32(0x8000)), 16);
  const __m512i exponent = _mm512_and_si512(_mm512_maskz_srli_epi32(all, h, 10), _mm512_set1_epi32(0x1f));
  const __m512i mantissa = _mm512_and_si512(h, _mm512_set1_epi32(0x3ff));
  const __m512i normal = _mm512_add_epi32(_mm512_maskz_slli_epi32(all, _mm512_and_si512(h, _mm512_set1_epi32(0x7fff)), 13),
                                          _mm512_set1_epi32(112 << 23));
  const __m512i special = _mm512_or_si512(_mm512_set1_epi32(0x7f800000), _mm512_maskz_slli_epi32(all, mantissa, 13));
  const __m512 subnormal = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(all, mantissa), _mm512_set1_ps(5.9604644775390625e-8f));
  __m512i bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(exponent, _mm512_set1_epi32(0x1f)), normal, special);
  bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(exponent, _mm512_setzero_si512()), bits,
                                 _mm512_castps_si512(subnormal));
  return _mm512_castsi512_ps(_mm512_or_si512(bits, sign));
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<float, Arch> widen(const bfloat16* p, xsimd::kernel::requires_arch<xsimd::avx512f>) {
  const __m512i lanes = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, lanes, 16));
}
#endif

}  // namespace specverify::cpu::kernel
