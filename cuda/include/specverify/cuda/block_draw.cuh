// The CUDA backend's one inverse-CDF draw (API.md "Randomness"), as a block primitive in CUB's
// style: the caller owns the temporary storage (shared memory) and every thread of the block calls
// with the same arguments and gets the same token back.
//
//   __shared__ typename BlockDraw<256>::TempStorage temp;
//   const DrawResult r = BlockDraw<256>(temp).draw(n, [&](std::int32_t i) { return double(w[i]); },
//                                                   [&](std::int32_t i) { return !(w[i] >= 0.0f); }, u);
//   // r.index: the smallest i with w_0 + ... + w_i > u * sum(w), -1 when sum(w) is 0; r.ok: no bad(i)
//
// The draw is chunked as the CPU's (core::chunk_length), in three steps with block barriers
// between them: (1) each warp sums whole chunks; (2) one block scan of the chunk sums finds the
// chunk holding the crossing; (3) warp 0 rescans that chunk in index order, 32 weights at a time
// (read 128 at a time).
// Sums are in double; only their order differs from the CPU's, which moves a crossing only when
// u * sum(w) lies within ~1e-16 of it.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <climits>
#include <cstdint>

#include "specverify/core/row_math.hpp"

namespace specverify::cuda {

/// A draw's outcome: the token (-1: no mass), and whether no weight read was bad.
struct DrawResult {
  std::int32_t index = -1;
  bool ok = true;
};

template <int kThreads>
class BlockDraw {
  static_assert(kThreads % 32 == 0 && kThreads >= 64, "a whole number of warps, at least two");
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunksPerThread = (core::kMaxChunks + kThreads - 1) / kThreads;

  struct MinOp {
    __device__ int operator()(int a, int b) const { return b < a ? b : a; }
  };

 public:
  /// Shared memory the draw works in. The crossing chunk and the token have slots of their own:
  /// warp 0 writes the token while other warps may still be reading the chunk.
  struct TempStorage {
    union {
      typename cub::BlockScan<double, kThreads>::TempStorage scan;
      typename cub::BlockReduce<int, kThreads>::TempStorage min;
    } cub;
    double chunks[core::kMaxChunks];  // the chunk sums, then the mass before each chunk
    int crossing;
    int index;
  };

  __device__ explicit BlockDraw(TempStorage& temp) : t_(temp) {}

  /// weight(i): w_i >= 0 as a double; bad(i): whether element i is invalid input (read once,
  /// in step 1; a draw that reads a bad element returns ok == false).
  template <class Weight, class Bad>
  __device__ DrawResult draw(std::int32_t n, const Weight& weight, const Bad& bad_at, float u) {
    const std::int32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const std::int32_t chunk = core::chunk_length(n);
    const std::int32_t chunks = (n + chunk - 1) / chunk;
    bool bad = false;
    __syncthreads();  // the storage may still be read by the block's previous draw
    for (std::int32_t c = warp; c < chunks; c += kWarps) {
      const std::int32_t begin = c * chunk, end = begin + chunk < n ? begin + chunk : n;
      double s = 0.0;
#pragma unroll 4
      for (std::int32_t i = begin + lane; i < end; i += 32) {
        bad |= bad_at(i);
        s += weight(i);
      }
      for (int d = 16; d > 0; d /= 2) s += __shfl_xor_sync(0xffffffffu, s, d);
      if (lane == 0) t_.chunks[c] = s;
    }
    if (__syncthreads_or(bad)) return {-1, false};

    // (2) Mass before each chunk; the crossing chunk is the first whose end passes u * total
    // (the last one when rounding leaves the threshold beyond every end, as on the CPU).
    double sums[kChunksPerThread], before[kChunksPerThread];
    for (int k = 0; k < kChunksPerThread; ++k) {
      const int c = threadIdx.x * kChunksPerThread + k;
      sums[k] = c < chunks ? t_.chunks[c] : 0.0;
    }
    double total;
    cub::BlockScan<double, kThreads>(t_.cub.scan).ExclusiveSum(sums, before, total);
    if (!(total > 0.0)) return {-1, true};
    const double threshold = static_cast<double>(u) * total;
    int crossing = INT_MAX;
    for (int k = kChunksPerThread - 1; k >= 0; --k) {
      const int c = threadIdx.x * kChunksPerThread + k;
      if (c < chunks) {
        t_.chunks[c] = before[k];
        if (before[k] + sums[k] > threshold || c == chunks - 1) crossing = c;
      }
    }
    __syncthreads();  // the scan's storage is the reduction's
    crossing = cub::BlockReduce<int, kThreads>(t_.cub.min).Reduce(crossing, MinOp{});
    if (threadIdx.x == 0) t_.crossing = crossing;
    __syncthreads();  // publishes the crossing and the masses before each chunk

    // (3) In-order rescan of the crossing chunk by warp 0; the other warps wait at the barrier.
    // kTiles tiles of 32 weights are read together: one memory latency per 32 kTiles weights.
    if (warp == 0) {
      constexpr int kTiles = 4;
      const std::int32_t begin = t_.crossing * chunk;
      const std::int32_t end = begin + chunk < n ? begin + chunk : n;
      double running = t_.chunks[t_.crossing];
      std::int32_t found = -1, last_positive = -1;
      for (std::int32_t group = begin; group < end && found < 0; group += 32 * kTiles) {
        double w[kTiles];
#pragma unroll
        for (int k = 0; k < kTiles; ++k) {
          const std::int32_t i = group + 32 * k + lane;
          w[k] = i < end ? weight(i) : 0.0;
        }
#pragma unroll
        for (int k = 0; k < kTiles; ++k) {
          if (found >= 0) break;  // the same in every lane (a ballot's)
          const std::int32_t tile = group + 32 * k;
          double prefix = w[k];  // inclusive prefix within the tile
          for (int d = 1; d < 32; d *= 2) {
            const double below = __shfl_up_sync(0xffffffffu, prefix, d);
            if (lane >= d) prefix += below;
          }
          const unsigned hit = __ballot_sync(0xffffffffu, w[k] > 0.0 && running + prefix > threshold);
          const unsigned positive = __ballot_sync(0xffffffffu, w[k] > 0.0);
          if (hit) found = tile + __ffs(hit) - 1;
          if (positive) last_positive = tile + 31 - __clz(static_cast<int>(positive));
          running += __shfl_sync(0xffffffffu, prefix, 31);
        }
      }
      // The chunk sums and this rescan round differently in the last bits; at that edge the
      // crossing lies at the chunk's last positive weight, or (a chunk left empty) before it.
      for (std::int32_t tile = begin; found < 0 && last_positive < 0 && tile > 0; tile -= 32) {
        const std::int32_t i = tile - 32 + lane;
        const unsigned positive = __ballot_sync(0xffffffffu, i >= 0 && weight(i) > 0.0);
        if (positive) last_positive = tile - 1 - __clz(static_cast<int>(positive));
      }
      if (lane == 0) t_.index = found >= 0 ? found : last_positive;
    }
    __syncthreads();
    return {t_.index, true};
  }

 private:
  TempStorage& t_;
};

}  // namespace specverify::cuda
