// The 16-bit row types of docs/api.md ("Rows in the model's dtype"): storage only, widened
// to float where a pass reads them. Both widenings are exact (every float16 and bfloat16 value is a
// float), so a row of them gives the bits of a float row holding the same values.
#pragma once

#include <cstdint>
#include <cstring>

#include "specverify/config.hpp"

namespace specverify {

namespace dtype_detail {
SPECVERIFY_HD inline float float_of_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
}  // namespace dtype_detail

/// IEEE binary16, as engines' LM heads emit it (torch.float16, NumPy float16).
struct float16 {
  std::uint16_t bits;

  /// Exact: sign, exponent rebiased from 15 to 127, mantissa shifted up 13; subnormals as
  /// mantissa * 2^-24 (an integer times a power of two, exact in float and safe under FTZ/DAZ);
  /// infinities and NaNs keep their payload.
  SPECVERIFY_HD explicit operator float() const {
    const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
    const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
    if (exponent == 0) {
      const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
      return sign ? -magnitude : magnitude;
    }
    if (exponent == 0x1f) return dtype_detail::float_of_bits(sign | 0x7f800000u | (mantissa << 13));
    return dtype_detail::float_of_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
};

/// bfloat16: the upper half of a float (torch.bfloat16).
struct bfloat16 {
  std::uint16_t bits;

  SPECVERIFY_HD explicit operator float() const {
    return dtype_detail::float_of_bits(static_cast<std::uint32_t>(bits) << 16);
  }
};

/// Whether T is a row type the CPU backend reads (float, float16, bfloat16).
template <class T>
inline constexpr bool is_cpu_row_type = false;
template <>
inline constexpr bool is_cpu_row_type<float> = true;
template <>
inline constexpr bool is_cpu_row_type<float16> = true;
template <>
inline constexpr bool is_cpu_row_type<bfloat16> = true;

}  // namespace specverify
