// A row split over the blocks of a thread block cluster (sm_90 and later; one block elsewhere).
// Every block of the cluster walks the same sequence alike; each row pass takes the block's share
// of the row (every count-th stretch of kThreads elements), and the blocks' summaries merge
// through distributed shared memory. The merges are exact (integer FixedSums, max, min, or), so
// every block holds the same answer, and it is the answer of one block alone: the same bits for
// any split.
//
//   const RowSplit split = RowSplit::of_cluster();
//   float mine = 0.0f;
//   for (std::int32_t i = split.first<256>(); i < n; i += split.stride<256>()) mine = fmaxf(mine, p[i]);
//   // ... reduce `mine` over the block into `block_max`, then:
//   __shared__ float slots[2];
//   int turn = 0;
//   const float row_max = split.merge(slots, turn, block_max, [](float a, float b) { return fmaxf(a, b); });
//
// Every decision a block takes must rest on merged values (or on global memory every block reads
// alike), so that the blocks take the same branches and meet at the same cluster barriers; and a
// block must not exit while another may still read its shared memory (finish() before returning).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

namespace specverify::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SPECVERIFY_CUDA_CLUSTERS 1
#endif

struct RowSplit {
  int rank = 0;   // this block's place in the cluster
  int count = 1;  // blocks per row

  /// The cluster this block belongs to (a cluster of one where clusters do not exist).
  __device__ static RowSplit of_cluster() {
#if defined(SPECVERIFY_CUDA_CLUSTERS)
    const auto cluster = cooperative_groups::this_cluster();
    return {static_cast<int>(cluster.block_rank()), static_cast<int>(cluster.num_blocks())};
#else
    return {};
#endif
  }

  /// The first element of this thread's share of a row pass, and the stride to its next.
  template <int kThreads>
  __device__ std::int32_t first() const {
    return rank * kThreads + static_cast<std::int32_t>(threadIdx.x);
  }
  template <int kThreads>
  __device__ std::int32_t stride() const {
    return count * kThreads;
  }

  /// A barrier over every thread of the row's blocks; shared memory written before it is visible
  /// to all of them after it.
  __device__ void sync() const {
#if defined(SPECVERIFY_CUDA_CLUSTERS)
    if (count > 1) {
      cooperative_groups::this_cluster().sync();
      return;
    }
#endif
    __syncthreads();
  }

  /// `local` (a __shared__ object of this block) as block `r` of the row holds it.
  template <class T>
  __device__ T* at(T* local, int r) const {
#if defined(SPECVERIFY_CUDA_CLUSTERS)
    if (count > 1) return cooperative_groups::this_cluster().map_shared_rank(local, r);
#endif
    return local;
  }

  /// The merge over the row's blocks of each block's `mine` (the same in all threads of a block),
  /// in rank order, in every thread. `slots` (shared memory) are taken in turn (`turn`, a variable
  /// every thread keeps alike): one barrier per merge suffices, as no block can write a slot
  /// again before every block has passed the next merge's barrier, after its reads of the slot.
  template <class T, class Merge>
  __device__ T merge(T (&slots)[2], int& turn, const T& mine, const Merge& merge_op) const {
    if (count == 1) return mine;
    if (threadIdx.x == 0) slots[turn] = mine;
    sync();
    T all = *at(&slots[turn], 0);
    for (int r = 1; r < count; ++r) all = merge_op(all, *at(&slots[turn], r));
    turn ^= 1;
    return all;
  }

  /// Before a block of a split row exits: the other blocks may still read its shared memory.
  __device__ void finish() const {
    if (count > 1) sync();
  }
};

}  // namespace specverify::cuda
