// The CUDA backend's row operations for core::walk: one thread block works on one row at a
// time. Every thread of the block calls every operation with the same arguments and gets the same
// result back, so the walk's scalar logic runs redundantly and uniformly in all threads and its
// branches never split the block at a barrier.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cub/block/block_reduce.cuh>

#include <climits>
#include <cstdint>

#include "specverify/core/residual.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/cuda/block_draw.cuh"
#include "specverify/rule.hpp"

namespace specverify::cuda {

/// A row pass's result: the value, and whether every element read was a valid probability.
template <class T>
struct Checked {
  T value{};
  bool ok = true;
};

/// Probabilities are stored as float, __half or __nv_bfloat16 and computed with in float.
__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

namespace detail {

/// Larger value first; the lower index among equal values (argmax ties go to the lowest token).
struct TopOp {
  __device__ cub::KeyValuePair<int, float> operator()(const cub::KeyValuePair<int, float>& a,
                                                      const cub::KeyValuePair<int, float>& b) const {
    return (b.value > a.value || (b.value == a.value && b.key < a.key)) ? b : a;
  }
};
struct MinOp {
  __device__ int operator()(int a, int b) const { return b < a ? b : a; }
};
struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};

}  // namespace detail

/// Block-cooperative rows of `n` elements of Prob, as core::walk expects them. kThreads is
/// the block size (a multiple of 32). Draws are BlockDraw's (block_draw.cuh), chunked as the
/// CPU's (cpu/draw.hpp).
///
///   __shared__ typename BlockRows<float, 256>::Shared shared;
///   BlockRows<float, 256> rows(shared, batch.vocab_size);
///   const core::WalkResult r = core::walk(rule, layout, source, randomness, blockIdx.x, rows);
template <class Prob, int kThreads>
class BlockRows {
  static_assert(kThreads % 32 == 0 && kThreads >= 64, "a whole number of warps, at least two");
  using Top = cub::KeyValuePair<int, float>;

 public:
  std::int32_t n;  // row length

  /// Shared memory the operations work in: CUB temporaries, a draw's storage and one broadcast
  /// slot. Declare it __shared__ and hand it to the constructor.
  struct Shared {
    union {
      typename cub::BlockReduce<Top, kThreads>::TempStorage top;
      typename cub::BlockReduce<double, kThreads>::TempStorage sum;
      typename cub::BlockReduce<int, kThreads>::TempStorage min;
    } cub;
    typename BlockDraw<kThreads>::TempStorage draw;
    struct {
      double sum;
      float top_value;
      int top_key;
      int index;
    } slot;
  };

  using View = const Prob*;

  __device__ BlockRows(Shared& shared, std::int32_t n) : n(n), s_(shared) {}

  /// A probability row needs no pre-pass.
  __device__ View open(View row) const { return row; }
  __device__ float value(const Prob* row, std::int32_t v) const { return to_float(row[v]); }

  __device__ Checked<float> max(const Prob* p) {
    const Checked<Top> t = top(p);
    return {t.value.value, t.ok};
  }

  /// Lowest index holding max p; -1 when the row has no mass.
  __device__ Checked<std::int32_t> argmax(const Prob* p) {
    const Checked<Top> t = top(p);
    return {t.ok && t.value.value > 0.0f ? t.value.key : -1, t.ok};
  }

  __device__ Checked<float> entropy(const Prob* p) {
    double h = 0.0;
    bool bad = false;
    for (std::int32_t i = threadIdx.x; i < n; i += kThreads) {
      const float v = to_float(p[i]);
      bad |= !core::valid_probability_value(v);
      h += core::entropy_term(v);
    }
    return {static_cast<float>(sum(h)), !__syncthreads_or(bad)};
  }

  /// D(p, q); no q is the one-hot draft e_x.
  __device__ Checked<float> divergence(Divergence d, const Prob* p, const View* q_view, std::int32_t x) {
    const Prob* q = q_view ? *q_view : nullptr;
    double s = 0.0;
    bool bad = false;
    for (std::int32_t i = threadIdx.x; i < n; i += kThreads) {
      const float pi = to_float(p[i]);
      const float qi = q ? to_float(q[i]) : (i == x ? 1.0f : 0.0f);
      bad |= !core::valid_probability_value(pi) || !core::valid_probability_value(qi);
      s += core::divergence_term(d, pi, qi);
    }
    return {static_cast<float>(sum(s)), !__syncthreads_or(bad)};
  }

  /// A draw from max(p - q, 0); no q is the one-hot draft e_x. -1: no mass.
  __device__ Checked<std::int32_t> draw_residual(const Prob* p, const View* q, std::int32_t x,
                                                 float u) {
    const Prob* q_row = q ? *q : nullptr;
    return draw(RowWeights{p, q_row, q_row ? -1 : x}, u);
  }

  /// A draw from p. -1: no mass.
  __device__ Checked<std::int32_t> draw_target(const Prob* p, float u) {
    return draw(RowWeights{p, nullptr, -1}, u);
  }

  /// Room for the siblings a node's residual absorbs: a fixed 64 per thread (every thread walks
  /// alike and keeps its own copy); a node with more rejected children is invalid_input here.
  __device__ core::Siblings siblings(std::int32_t) { return siblings_.room(); }

  /// The mass of a tree node's residual after rejecting sibling x (core/residual.hpp).
  __device__ Checked<double> mass(const core::Residual<View>& r, std::int32_t x) {
    double s = 0.0;
    bool bad = false;
    const ResidualWeights w{*this, r, x, r.collapse(x)};
    for (std::int32_t i = threadIdx.x; i < n; i += kThreads) {
      bad |= w.bad(i);
      s += w(i);
    }
    return {sum(s), !__syncthreads_or(bad)};
  }

  /// A draw from a tree node's residual after rejecting sibling x (kNoToken: the residual itself).
  __device__ Checked<std::int32_t> draw(const core::Residual<View>& r, std::int32_t x, float u) {
    return draw(ResidualWeights{*this, r, x, r.collapse(x)}, u);
  }

  /// The lowest index whose value is not a valid probability, or -1; names a fault's value.
  __device__ std::int32_t first_invalid(const Prob* row) {
    int first = INT_MAX;
    for (std::int32_t i = threadIdx.x; i < n && first == INT_MAX; i += kThreads) {
      if (!core::valid_probability_value(to_float(row[i]))) first = i;
    }
    first = min(first);
    return first == INT_MAX ? -1 : first;
  }

  /// The minimum over the block of one int per thread, in every thread.
  __device__ int min(int v) {
    __syncthreads();  // the temporaries and the slot may still be read from the previous operation
    v = cub::BlockReduce<int, kThreads>(s_.cub.min).Reduce(v, detail::MinOp{});
    if (threadIdx.x == 0) s_.slot.index = v;
    __syncthreads();
    return s_.slot.index;
  }

 private:
  /// (max p, lowest index holding it) in one pass; every thread visits its indices in increasing
  /// order and keeps the first of its maxima.
  __device__ Checked<Top> top(const Prob* p) {
    Top t(-1, -1.0f);
    bool bad = false;
    for (std::int32_t i = threadIdx.x; i < n; i += kThreads) {
      const float v = to_float(p[i]);
      bad |= !core::valid_probability_value(v);
      if (v > t.value) t = Top(i, v);
    }
    __syncthreads();
    t = cub::BlockReduce<Top, kThreads>(s_.cub.top).Reduce(t, detail::TopOp{});
    if (threadIdx.x == 0) {
      s_.slot.top_key = t.key;
      s_.slot.top_value = t.value;
    }
    const bool ok = !__syncthreads_or(bad);
    return {Top(s_.slot.top_key, s_.slot.top_value), ok};
  }

  __device__ double sum(double v) {
    __syncthreads();
    v = cub::BlockReduce<double, kThreads>(s_.cub.sum).Reduce(v, detail::SumOp{});
    if (threadIdx.x == 0) s_.slot.sum = v;
    __syncthreads();
    return s_.slot.sum;
  }

  /// Weights max(p - q, 0), or p, with w_x = max(p_x - 1, 0) for a one-hot residual at x.
  struct RowWeights {
    const Prob* p;
    const Prob* q;
    std::int32_t x;
    __device__ bool bad(std::int32_t i) const {
      return !core::valid_probability_value(to_float(p[i])) ||
             (q && !core::valid_probability_value(to_float(q[i])));
    }
    __device__ double operator()(std::int32_t i) const {
      const float pi = to_float(p[i]);
      if (i == x) return core::residual_weight(pi, 1.0);
      return q ? core::residual_weight(pi, to_float(q[i])) : double{pi};
    }
  };

  /// Weights of a node's residual (core::Residual::weight).
  struct ResidualWeights {
    const BlockRows& rows;
    const core::Residual<View>& r;
    std::int32_t x;
    typename core::Residual<View>::Collapse collapse;
    __device__ bool bad(std::int32_t i) const {
      return !core::valid_probability_value(rows.value(r.p, i)) ||
             (r.has_q && !core::valid_probability_value(rows.value(r.q, i)));
    }
    __device__ double operator()(std::int32_t i) const { return r.weight(rows, x, i, collapse); }
  };

  /// The block's draw (block_draw.cuh) over weights that name their bad elements.
  template <class Weights>
  __device__ Checked<std::int32_t> draw(const Weights& weight, float u) {
    const DrawResult r = BlockDraw<kThreads>(s_.draw).draw(
        n, weight, [&](std::int32_t i) { return weight.bad(i); }, u);
    return {r.index, r.ok};
  }

  Shared& s_;
  core::FixedSiblings<64> siblings_;
};

}  // namespace specverify::cuda
