// Order-independent sums over a block (core::FixedSum), as a block primitive in CUB's style: the
// caller owns the temporary storage (shared memory); every thread passes its own partial sum and
// gets the block's back. Integer words add exactly, so the total is the CPU's for the same terms,
// whatever the block size or the order the threads took them in.
//
//   __shared__ typename BlockFixedSum<256>::TempStorage temp;
//   core::FixedSum mine;
//   for (std::int32_t i = threadIdx.x; i < n; i += 256) mine.add(w[i]);
//   const core::FixedSum total = BlockFixedSum<256>(temp).sum(mine);  // the same in every thread
#pragma once

#include <cstdint>

#include "specverify/core/fixed_sum.hpp"

namespace specverify::cuda {

/// A thread's running sum of terms: the words of each FixedSum::term added without carrying
/// (|lo| grows by at most 2^39 a term), carried once when read: the same sum as FixedSum::add of
/// every term (add_coarse: FixedSum::add_coarse), in fewer instructions per term.
struct FixedTerms {
  std::int64_t hi = 0, lo = 0;

  __device__ void add(double t) {
    const core::FixedSum u = core::FixedSum::term(t);
    hi = core::wrapping_add(hi, u.hi);
    lo = core::wrapping_add(lo, u.lo);
  }
  __device__ void add_coarse(double t) { hi = core::wrapping_add(hi, core::FixedSum::coarse_term(t).hi); }
  __device__ core::FixedSum sum() const {
    core::FixedSum s;
    s.add_units(hi, lo);
    return s;
  }
};

/// The sum of the warp's 32 partial sums, in every lane (a full warp calls).
__device__ inline core::FixedSum warp_fixed_sum(core::FixedSum s) {
  for (int d = 16; d > 0; d /= 2) {
    core::FixedSum other;
    other.hi = __shfl_xor_sync(0xffffffffu, static_cast<long long>(s.hi), d);
    other.lo = __shfl_xor_sync(0xffffffffu, static_cast<long long>(s.lo), d);
    s.merge(other);
  }
  return s;
}

/// Lane l's sum of the partial sums of lanes 0 .. l (a full warp calls).
__device__ inline core::FixedSum warp_fixed_inclusive_scan(core::FixedSum s) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int d = 1; d < 32; d *= 2) {
    core::FixedSum below;
    below.hi = __shfl_up_sync(0xffffffffu, static_cast<long long>(s.hi), d);
    below.lo = __shfl_up_sync(0xffffffffu, static_cast<long long>(s.lo), d);
    if (lane >= d) s.merge(below);
  }
  return s;
}

/// A FixedSum's words in shared memory: plain integers (a __shared__ variable takes no
/// constructor), read and written whole.
template <int kCount>
struct FixedSlots {
  std::int64_t hi[kCount];
  std::int64_t lo[kCount];

  __device__ core::FixedSum get(int k) const {
    core::FixedSum s;
    s.hi = hi[k];
    s.lo = lo[k];
    return s;
  }
  __device__ void set(int k, const core::FixedSum& s) {
    hi[k] = s.hi;
    lo[k] = s.lo;
  }
};

/// `s` as lane `src` holds it, in every lane.
__device__ inline core::FixedSum warp_fixed_broadcast(const core::FixedSum& s, int src) {
  core::FixedSum r;
  r.hi = __shfl_sync(0xffffffffu, static_cast<long long>(s.hi), src);
  r.lo = __shfl_sync(0xffffffffu, static_cast<long long>(s.lo), src);
  return r;
}

template <int kThreads>
class BlockFixedSum {
  static_assert(kThreads % 32 == 0 && kThreads >= 64, "a whole number of warps, at least two");
  static constexpr int kWarps = kThreads / 32;

 public:
  struct TempStorage {
    FixedSlots<kWarps> warp;
  };

  __device__ explicit BlockFixedSum(TempStorage& temp) : t_(temp) {}

  /// The sum of every thread's `mine`, in every thread. Barriers before and after: the storage
  /// may be reused by the next call at once.
  __device__ core::FixedSum sum(const core::FixedSum& mine) {
    const core::FixedSum w = warp_fixed_sum(mine);
    __syncthreads();  // the storage may still be read by the previous call
    if (threadIdx.x % 32 == 0) t_.warp.set(threadIdx.x / 32, w);
    __syncthreads();
    core::FixedSum total;
    for (int k = 0; k < kWarps; ++k) total.merge(t_.warp.get(k));
    return total;
  }

 private:
  TempStorage& t_;
};

}  // namespace specverify::cuda
