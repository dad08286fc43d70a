// A block-strided loop with several loads in flight: thread t visits t, t + kThreads, t + 2 kThreads,
// ... < n in increasing order (so each thread's sums keep their order, and their bits), kUnroll
// elements per step. One element per step leaves a block waiting a memory latency for each: at
// V = 128256 and 256 threads, 500 latencies per pass.
#pragma once

#include <cstdint>

namespace specverify::cuda {

template <int kThreads, int kUnroll = 8, class F>
__device__ __forceinline__ void block_stride(std::int32_t n, const F& f) {
  std::int32_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < n; i += kUnroll * kThreads) {
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) f(i + k * kThreads);
  }
  for (; i < n; i += kThreads) f(i);
}

}  // namespace specverify::cuda
