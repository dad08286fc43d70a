// AVX2: eight 16-bit lanes zero-extended to 32 bits (cpu/widen.hpp's load_u16).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>

#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu::kernel {

#if XSIMD_WITH_AVX2
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<std::int32_t, Arch> load_u16(const std::uint16_t* p,
                                                                  xsimd::kernel::requires_arch<xsimd::avx2>) {
  return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
#endif

}  // namespace specverify::cpu::kernel
