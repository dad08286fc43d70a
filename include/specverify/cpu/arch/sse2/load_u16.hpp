// SSE2: four 16-bit lanes zero-extended to 32 bits (cpu/widen.hpp's load_u16).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_SSE2
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<std::int32_t, Arch> load_u16(const std::uint16_t* p,
                                                                  xsimd::kernel::requires_arch<xsimd::sse2>) {
  const __m128i four = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm_unpacklo_epi16(four, _mm_setzero_si128());
}
#endif

}  // namespace specverify::cpu::kernel
