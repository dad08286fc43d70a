// The yardsticks benchmarks are measured against, in the same binary: a vectorised read of the
// same bytes (the memory-bandwidth bound) and plain scalar implementations of the row work.
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstdint>

namespace specverify::bench {

/// Sums n floats with xsimd: one read of every byte, nothing else.
inline float read_pass(const float* data, std::int32_t n) {
  using B = xsimd::batch<float>;
  B acc0(0.0f), acc1(0.0f);
  std::int32_t i = 0;
  constexpr std::int32_t W = B::size;
  for (; i + 2 * W <= n; i += 2 * W) {
    acc0 += B::load_unaligned(data + i);
    acc1 += B::load_unaligned(data + i + W);
  }
  float s = xsimd::hadd(acc0 + acc1);
  for (; i < n; ++i) s += data[i];
  return s;
}

/// Residual draw as a plain loop: sum max(p - q, 0), then scan for u * sum.
inline std::int32_t scalar_residual_draw(const float* p, const float* q, std::int32_t n, float u) {
  double total = 0;
  for (std::int32_t i = 0; i < n; ++i) total += std::max(p[i] - q[i], 0.0f);
  const double threshold = u * total;
  double running = 0;
  for (std::int32_t i = 0; i < n; ++i) {
    running += std::max(p[i] - q[i], 0.0f);
    if (running > threshold) return i;
  }
  return n - 1;
}

}  // namespace specverify::bench
