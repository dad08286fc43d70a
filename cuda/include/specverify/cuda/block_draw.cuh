// The CUDA backend's one inverse-CDF draw (docs/api.md "Randomness"), as a block primitive in CUB's
// style: the caller owns the temporary storage (shared memory) and every thread of the block calls
// with the same arguments and gets the same token back.
//
//   struct Weights {  // w_i = p_i
//     const float* p;
//     using Element = float;                                            // what index i reads
//     __device__ Element load(std::int32_t i) const { return p[i]; }     // the reads alone
//     __device__ double operator()(Element e, std::int32_t) const { return e; }  // w_i >= 0
//     __device__ bool bad(Element e) const { return !(e >= 0.0f); }     // invalid input
//     __device__ float screen(Element e) const { return e; }            // the row max of these
//     __device__ double bound(float largest) const { return core::fixed_bound(largest); }  // bounds w
//   };
//   __shared__ typename BlockDraw<256>::TempStorage temp;
//   const DrawResult r = BlockDraw<256>(temp).draw(n, Weights{p}, u);
//   // r.index: the smallest i with w_0 + ... + w_i > u * sum(w), -1 when sum(w) is 0; r.ok: no bad(i)
//
// The draw is the CPU's (cpu/draw.hpp), bit for bit: the same chunks (core::chunk_length), every
// sum a core::FixedSum of the same terms, at the scale core::fixed_scale picks from the bound of
// the row's largest screen value. (1) Each warp sums whole chunks; (2) warp 0 scans the chunk sums
// for the chunk holding the crossing; (3) the warps sum pieces of that chunk and warp 0 rescans
// the piece holding the crossing in index order. Integer sums are exact in any order, so the
// crossing is the CPU's. Each lane loads a batch of elements before it uses any (load() holds
// every read of an element, so the loads are in flight together: a row pass costs a few memory
// latencies, not one per element).
#pragma once

#include <cstdint>

#include "specverify/core/fixed_sum.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/cuda/block_fixed_sum.cuh"
#include "specverify/cuda/row_split.cuh"

namespace specverify::cuda {

/// A draw's outcome: the token (-1: no mass), and whether no weight read was bad.
struct DrawResult {
  std::int32_t index = -1;
  bool ok = true;
};

/// A mass: sum(w), and whether no weight read was bad.
struct MassResult {
  double value = 0.0;
  bool ok = true;
};

template <int kThreads>
class BlockDraw {
  static_assert(kThreads % 32 == 0 && kThreads >= 64, "a whole number of warps, at least two");
  static_assert(core::kMaxChunks % 32 == 0, "warp 0 scans the chunk sums, a whole number per lane");
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunksPerLane = core::kMaxChunks / 32;

  /// What a block saw of the row: its largest screen value, whether it read a bad element.
  struct Screen {
    float largest;
    int bad;
  };

 public:
  /// Shared memory the draw works in. Chunk c's sum lies in the block that summed it (split.at).
  struct TempStorage {
    FixedSlots<core::kMaxChunks> chunks;
    FixedSlots<1> total;    // a mass
    FixedSlots<1> before;   // the mass before the crossing chunk
    FixedSlots<kWarps> pieces;  // the crossing chunk's pieces' sums
    double threshold;       // u * total
    int crossing;           // the crossing chunk, -1: no mass
    float largest[kWarps];  // each warp's largest screen value
    Screen screens[2];      // the block's, for the merge over a split row
    int index;
  };

  /// `split`: the blocks the row is spread over (row_split.cuh); every block of them calls alike.
  __device__ explicit BlockDraw(TempStorage& temp, RowSplit split = {}) : t_(temp), split_(split) {}

  /// `w` as in the header's snippet: weights, their bad elements (read in step 1; a draw that reads
  /// one returns ok == false), and the bound that picks FixedSum's scale.
  template <class Weights>
  __device__ DrawResult draw(std::int32_t n, const Weights& w, float u) {
    const Chunks c = sum_chunks(n, w);
    if (!c.ok) return {-1, false};
    return {crossing(n, w, c, u), true};
  }

  /// sum(w), the FixedSum the draw compares against (the CPU's residual mass, bit for bit).
  template <class Weights>
  __device__ MassResult mass(std::int32_t n, const Weights& w) {
    const Chunks c = sum_chunks(n, w);
    if (!c.ok) return {0.0, false};
    if (threadIdx.x < 32) {
      core::FixedSum mine;
      for (std::int32_t k = threadIdx.x; k < c.count; k += 32) mine.merge(chunk_sum(k));
      const core::FixedSum total = warp_fixed_sum(mine);
      if (threadIdx.x == 0) t_.total.set(0, total);
    }
    __syncthreads();
    return {t_.total.get(0).value() / c.scale, true};
  }

 private:
  /// How a row was chunked and summed (into t_.chunks).
  struct Chunks {
    std::int32_t length, count;
    double scale;
    bool ok;
  };

  /// The sum of chunk k, from the block that summed it.
  __device__ core::FixedSum chunk_sum(std::int32_t k) const {
    const int owner = (k % (split_.count * kWarps)) / kWarps;
    core::FixedSum s;
    s.hi = *split_.at(&t_.chunks.hi[k], owner);
    s.lo = *split_.at(&t_.chunks.lo[k], owner);
    return s;
  }

  /// (1) The warps of the row's blocks sum whole chunks of w * scale into t_.chunks, scale 1
  /// first; the row's largest screen value bounds w, and a row outside FixedSum's domain at scale
  /// 1 is summed again at core::fixed_scale (rare: unnormalised rows far from 1). Begins and ends
  /// with a barrier over the row's blocks (the chunk sums of a previous draw may still be read).
  template <class Weights>
  __device__ Chunks sum_chunks(std::int32_t n, const Weights& w) {
    Chunks c{core::chunk_length(n), 0, 1.0, true};
    c.count = (n + c.length - 1) / c.length;
    split_.sync();
    bool bad = false;
    float largest = 0.0f;
    sum_chunks_at(n, w, c, [&](const typename Weights::Element& e) {
      bad |= w.bad(e);
      const float s = w.screen(e);
      largest = s > largest ? s : largest;
    });
    for (int d = 16; d > 0; d /= 2) largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, d));
    if (threadIdx.x % 32 == 0) t_.largest[threadIdx.x / 32] = largest;
    Screen screen{0.0f, __syncthreads_or(bad)};
    for (int k = 0; k < kWarps; ++k) screen.largest = fmaxf(screen.largest, t_.largest[k]);
    // The merge's barrier also publishes the chunk sums to the row's other blocks.
    screen = split_.merge(t_.screens, turn_, screen, [](const Screen& a, const Screen& b) {
      return Screen{fmaxf(a.largest, b.largest), a.bad | b.bad};
    });
    c.ok = !screen.bad;
    if (!c.ok) return c;
    const double bound = w.bound(screen.largest);
    if (!core::fixed_in_domain(bound, n)) {
      c.scale = core::fixed_scale(bound, n);
      split_.sync();  // the sums at scale 1 may still be read
      sum_chunks_at(n, w, c, [](const typename Weights::Element&) {});
    }
    split_.sync();
    return c;
  }

  /// Chunk sums at c.scale, chunk k by the row's (k mod warps)-th warp; `visit(e)` sees every
  /// element. Each lane loads kBatch elements before it uses them: that many loads in flight.
  template <class Weights, class Visit>
  __device__ void sum_chunks_at(std::int32_t n, const Weights& w, const Chunks& c, const Visit& visit) {
    constexpr int kBatch = 8;
    const std::int32_t lane = threadIdx.x % 32, warp = split_.rank * kWarps + threadIdx.x / 32;
    for (std::int32_t k = warp; k < c.count; k += split_.count * kWarps) {
      const std::int32_t begin = k * c.length, end = begin + c.length < n ? begin + c.length : n;
      FixedTerms s;
      for (std::int32_t first = begin + lane; first < end; first += 32 * kBatch) {
        typename Weights::Element e[kBatch]{};
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          if (first + 32 * b < end) e[b] = w.load(first + 32 * b);
        }
        double t[kBatch];  // every weight first, then every term: their chains overlap
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const std::int32_t i = first + 32 * b;
          if (i < end) visit(e[b]);
          t[b] = i < end ? w(e[b], i) * c.scale : 0.0;
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) s.add(t[b]);
      }
      const core::FixedSum chunk_sum = warp_fixed_sum(s.sum());
      if (lane == 0) t_.chunks.set(k, chunk_sum);
    }
  }

  /// (2) Warp 0 finds the chunk holding the crossing: the first whose end passes u * total (the
  /// last one when none before it does, as on the CPU). (3) Every warp sums its piece of that
  /// chunk (kWarps pieces of whole tiles); warp 0 finds the piece holding the crossing the same
  /// way and rescans it in index order, kTiles tiles of 32 weights read together. The rescans add
  /// the terms the sums added, so they reach each sum at its end: the crossing is inside. Two
  /// memory latencies for a chunk of 1024 weights. Ends with a barrier; returns the token.
  template <class Weights>
  __device__ std::int32_t crossing(std::int32_t n, const Weights& w, const Chunks& chunked, float u) {
    constexpr int kTiles = 4;
    const std::int32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const double scale = chunked.scale;
    if (warp == 0) {
      core::FixedSum mine;  // lane l holds chunks l kChunksPerLane .. (l + 1) kChunksPerLane - 1
      for (int k = 0; k < kChunksPerLane; ++k) {
        const int c = lane * kChunksPerLane + k;
        if (c < chunked.count) mine.merge(chunk_sum(c));
      }
      const core::FixedSum through_lane = warp_fixed_inclusive_scan(mine);
      const core::FixedSum total = warp_fixed_broadcast(through_lane, 31);
      const double threshold = static_cast<double>(u) * total.value();
      core::FixedSum before = warp_fixed_broadcast(through_lane, lane > 0 ? lane - 1 : 0);
      if (lane == 0) before = core::FixedSum{};
      int hit = -1;
      for (int k = 0; k < kChunksPerLane && hit < 0; ++k) {
        const int c = lane * kChunksPerLane + k;
        if (c >= chunked.count) break;
        core::FixedSum through = before;
        through.merge(chunk_sum(c));
        if (c == chunked.count - 1 || through.value() > threshold) {
          hit = c;
        } else {
          before = through;
        }
      }
      const int owner = __ffs(__ballot_sync(0xffffffffu, hit >= 0)) - 1;  // the last chunk always hits
      const int c = __shfl_sync(0xffffffffu, hit, owner);
      before = warp_fixed_broadcast(before, owner);
      if (lane == 0) {
        t_.crossing = total.positive() ? c : -1;
        t_.threshold = threshold;
        t_.before.set(0, before);
      }
    }
    __syncthreads();
    const int c = t_.crossing;
    if (c < 0) return -1;  // no mass
    const double threshold = t_.threshold;
    const std::int32_t begin = c * chunked.length, end = begin + chunked.length < n ? begin + chunked.length : n;
    const std::int32_t piece = ((end - begin + kWarps - 1) / kWarps + 31) / 32 * 32;
    {
      const std::int32_t piece_begin = begin + warp * piece;
      const std::int32_t piece_end = piece_begin + piece < end ? piece_begin + piece : end;
      FixedTerms s;
      for (std::int32_t first = piece_begin + lane; first < piece_end; first += 32 * kTiles) {
        typename Weights::Element e[kTiles]{};  // read together
#pragma unroll
        for (int k = 0; k < kTiles; ++k) {
          if (first + 32 * k < piece_end) e[k] = w.load(first + 32 * k);
        }
        double t[kTiles];
#pragma unroll
        for (int k = 0; k < kTiles; ++k) {
          const std::int32_t i = first + 32 * k;
          t[k] = i < piece_end ? w(e[k], i) * scale : 0.0;
        }
#pragma unroll
        for (int k = 0; k < kTiles; ++k) s.add(t[k]);
      }
      const core::FixedSum piece_sum = warp_fixed_sum(s.sum());
      if (lane == 0) t_.pieces.set(warp, piece_sum);
    }
    __syncthreads();
    if (warp == 0) {
      const core::FixedSum mine = lane < kWarps ? t_.pieces.get(lane) : core::FixedSum{};
      core::FixedSum through = warp_fixed_inclusive_scan(mine);
      through.merge(t_.before.get(0));
      const unsigned passed = __ballot_sync(0xffffffffu, lane < kWarps && through.value() > threshold);
      std::int32_t found = -1;
      if (passed) {
        const int p = __ffs(passed) - 1;
        const core::FixedSum lane_before = warp_fixed_broadcast(through, p > 0 ? p - 1 : 0);
        core::FixedSum running = p > 0 ? lane_before : t_.before.get(0);
        const std::int32_t piece_begin = begin + p * piece;
        const std::int32_t piece_end = piece_begin + piece < end ? piece_begin + piece : end;
        for (std::int32_t group = piece_begin; group < piece_end && found < 0; group += 32 * kTiles) {
          typename Weights::Element e[kTiles]{};  // read together
#pragma unroll
          for (int k = 0; k < kTiles; ++k) {
            if (group + 32 * k + lane < piece_end) e[k] = w.load(group + 32 * k + lane);
          }
          double t[kTiles];
#pragma unroll
          for (int k = 0; k < kTiles; ++k) {
            const std::int32_t i = group + 32 * k + lane;
            t[k] = i < piece_end ? w(e[k], i) * scale : 0.0;
          }
#pragma unroll
          for (int k = 0; k < kTiles; ++k) {
            if (found >= 0) break;  // the same in every lane (a ballot's)
            core::FixedSum prefix = warp_fixed_inclusive_scan(core::FixedSum::term(t[k]));
            prefix.merge(running);
            const unsigned crossed = __ballot_sync(0xffffffffu, t[k] > 0.0 && prefix.value() > threshold);
            if (crossed) found = group + 32 * k + __ffs(crossed) - 1;
            running = warp_fixed_broadcast(prefix, 31);
          }
        }
      }
      if (lane == 0) t_.index = found;  // -1 is unreachable for valid weights, as on the CPU
    }
    __syncthreads();
    return t_.index;
  }

  TempStorage& t_;
  RowSplit split_;
  int turn_ = 0;  // the screen slot: slot 0 in every draw, as the draw's leading barrier orders its
                  // merge after every block's reads of the previous draw's
};

}  // namespace specverify::cuda
