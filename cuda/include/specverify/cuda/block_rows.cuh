// The CUDA backend's row operations for core::walk: one thread block works on one row at a
// time. Every thread of the block calls every operation with the same arguments and gets the same
// result back, so the walk's scalar logic runs redundantly and uniformly in all threads and its
// branches never split the block at a barrier.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cub/block/block_reduce.cuh>

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "specverify/core/logit_rows.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/cuda/block_draw.cuh"
#include "specverify/cuda/block_fixed_sum.cuh"
#include "specverify/cuda/row_split.cuh"
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

/// row[i] as float, read through the read-only data path: rows are inputs no kernel writes.
template <class Prob>
__device__ inline float read_row(const Prob* row, std::int32_t i) {
  return to_float(__ldg(row + i));
}

namespace detail {

/// Larger value first; the lower index among equal values (argmax and Gumbel-race ties go to the
/// lowest token).
template <class Value>
struct TopOp {
  __device__ cub::KeyValuePair<int, Value> operator()(const cub::KeyValuePair<int, Value>& a,
                                                      const cub::KeyValuePair<int, Value>& b) const {
    return (b.value > a.value || (b.value == a.value && b.key < a.key)) ? b : a;
  }
};
struct MinOp {
  __device__ int operator()(int a, int b) const { return b < a ? b : a; }
};
struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct MaxOp {
  __device__ double operator()(double a, double b) const { return b > a ? b : a; }
};

}  // namespace detail

/// Block-cooperative rows of `n` elements of Prob, as core::walk expects them. kThreads is
/// the block size (a multiple of 32). A row may be split over the blocks of a cluster (RowSplit,
/// row_split.cuh): every block walks alike, reads its share of each row pass, and every summary
/// merges exactly (max, min, integer FixedSums), so the results are those of one block. Draws and
/// residual masses are BlockDraw's (block_draw.cuh): the CPU's (cpu/draw.hpp), bit for bit.
/// Entropy and divergences are FixedSums of core/row_math.hpp's terms on the coarse grid, as on
/// the CPU: the same for any split, within their stated accuracy of the CPU's (whose terms use its
/// own fast log).
///
///   __shared__ typename BlockRows<float, 256>::Shared shared;
///   BlockRows<float, 256> rows(shared, batch.vocab_size, RowSplit::of_cluster());
///   const core::WalkResult r = core::walk(rule, layout, source, randomness, sequence, rows);
template <class Prob, int kThreads>
class BlockRows {
  static_assert(kThreads % 32 == 0 && kThreads >= 64, "a whole number of warps, at least two");
  using Top = cub::KeyValuePair<int, float>;
  using Key = cub::KeyValuePair<int, double>;
  static constexpr int kBatch = 8;  // elements a thread reads before it uses them

  /// A block's share of a largest value (max p, or a Gumbel race's key): the value, its lowest
  /// index (-1: none), whether a bad value was read.
  template <class Value>
  struct Lead {
    Value value;
    int key;
    int bad;
  };
  using Best = Lead<float>;
  /// A block's share of a statistic: the FixedSum of its terms (words), the largest magnitude of
  /// a term, whether a bad value was read.
  struct Terms {
    std::int64_t hi, lo;
    double largest;
    int bad;
  };

 public:
  std::int32_t n;  // row length

  /// Shared memory the operations work in: CUB temporaries, a draw's storage, a broadcast slot,
  /// and the slots the blocks of a split row merge through. Declare it __shared__ and hand it to
  /// the constructor.
  struct Shared {
    union {
      typename cub::BlockReduce<Top, kThreads>::TempStorage top;
      typename cub::BlockReduce<Key, kThreads>::TempStorage key;
      typename cub::BlockReduce<double, kThreads>::TempStorage largest;
      typename cub::BlockReduce<int, kThreads>::TempStorage min;
      typename BlockFixedSum<kThreads>::TempStorage fixed;
    } cub;
    typename BlockDraw<kThreads>::TempStorage draw;
    struct {
      double largest;
      double key_value;
      float top_value;
      int key;
      int index;
    } slot;
    Best bests[2];
    Lead<double> races[2];
    Terms terms[2];
    int mins[2];
  };

  using View = const Prob*;

  __device__ BlockRows(Shared& shared, std::int32_t n, RowSplit split = {}) : n(n), s_(shared), split_(split) {}

  /// A probability row needs no pre-pass.
  __device__ View open(View row) const { return row; }
  __device__ float value(const Prob* row, std::int32_t v) const { return read_row(row, v); }

  __device__ Checked<float> max(const Prob* p) {
    const Best t = top(p);
    return {t.value, !t.bad};
  }

  /// Lowest index holding max p; -1 when the row has no mass.
  __device__ Checked<std::int32_t> argmax(const Prob* p) {
    const Best t = top(p);
    return {!t.bad && t.value > 0.0f ? t.key : -1, !t.bad};
  }

  __device__ Checked<float> entropy(const Prob* p) {
    return statistic([&](std::int32_t i, bool& bad) {
      const float v = to_float(p[i]);
      bad |= !core::valid_probability_value(v);
      return core::entropy_term(v);
    });
  }

  /// D(p, q); no q is the one-hot draft e_x.
  __device__ Checked<float> divergence(Divergence d, const Prob* p, const View* q_view, std::int32_t x) {
    const Prob* q = q_view ? *q_view : nullptr;
    return statistic([&](std::int32_t i, bool& bad) {
      const float pi = to_float(p[i]);
      const float qi = q ? to_float(q[i]) : (i == x ? 1.0f : 0.0f);
      bad |= !core::valid_probability_value(pi) || !core::valid_probability_value(qi);
      return core::divergence_term(d, pi, qi);
    });
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

  /// Coupled sampling over p as given (the CPU's cpu::gumbel_argmax): argmax over p > 0 of
  /// log p(v) + Gumbel(seed, position, v) with the shared log, lowest token on ties; -1 without
  /// mass. Each thread takes blocks of four tokens (one Philox call each).
  __device__ Checked<std::int32_t> gumbel_argmax(const Prob* p, std::uint64_t seed, std::int64_t position) {
    Key best(-1, -HUGE_VAL);
    bool bad = false;
    for (std::int32_t first = 4 * first_index(); first < n; first += 4 * stride()) {
      float v[4];
      bool any = false;
      for (int l = 0; l < 4; ++l) {
        v[l] = first + l < n ? read_row(p, first + l) : 0.0f;
        bad |= !core::valid_probability_value(v[l]);
        any |= v[l] > 0.0f && v[l] <= FLT_MAX;
      }
      if (!any) continue;
      std::uint32_t words[4];
      core::gumbel_words(seed, position, static_cast<std::uint32_t>(first) >> 2, words);
      for (int l = 0; l < 4; ++l) {
        if (!(v[l] > 0.0f && v[l] <= FLT_MAX)) continue;
        const double k = core::shared_log(double(v[l])) + core::gumbel(words[l]);
        if (k > best.value) best = Key(first + l, k);  // tokens rise: the first of equal keys stays
      }
    }
    const Lead<double> all = lead(best, bad, s_.cub.key, s_.slot.key_value, s_.races);
    return {all.bad ? -1 : all.key, !all.bad};
  }

  /// Room for the siblings a node's residual absorbs: a fixed 64 per thread (every thread walks
  /// alike and keeps its own copy); a node with more rejected children is invalid_input here.
  __device__ core::Siblings siblings(std::int32_t) { return siblings_.room(); }

  /// The mass of a tree node's residual after rejecting sibling x (core/residual.hpp): the sum
  /// the draw from it compares against, the CPU's bit for bit.
  __device__ Checked<double> mass(const core::Residual<View>& r, std::int32_t x) {
    const MassResult m =
        BlockDraw<kThreads>(s_.draw, split_).mass(n, ResidualWeights{*this, r, x, r.collapse(x)});
    return {m.value, m.ok};
  }

  /// A draw from a tree node's residual after rejecting sibling x (kNoToken: the residual itself).
  __device__ Checked<std::int32_t> draw(const core::Residual<View>& r, std::int32_t x, float u) {
    return draw(ResidualWeights{*this, r, x, r.collapse(x)}, u);
  }

  /// The lowest index whose value is not a valid probability, or -1; names a fault's value.
  __device__ std::int32_t first_invalid(const Prob* row) {
    int first = INT_MAX;
    for (std::int32_t i = first_index(); i < n && first == INT_MAX; i += stride()) {
      if (!core::valid_probability_value(to_float(row[i]))) first = i;
    }
    first = min(first);
    return first == INT_MAX ? -1 : first;
  }

  /// The minimum over the row's blocks of one int per thread, in every thread.
  __device__ int min(int v) {
    __syncthreads();  // the temporaries and the slot may still be read from the previous operation
    v = cub::BlockReduce<int, kThreads>(s_.cub.min).Reduce(v, detail::MinOp{});
    if (threadIdx.x == 0) s_.slot.index = v;
    __syncthreads();
    return split_.merge(s_.mins, turn_, s_.slot.index, detail::MinOp{});
  }

  /// Before the block exits: the row's other blocks may still read its shared memory.
  __device__ void finish() const { split_.finish(); }

 private:
  __device__ std::int32_t first_index() const { return split_.template first<kThreads>(); }
  __device__ std::int32_t stride() const { return split_.template stride<kThreads>(); }

  /// (max p, lowest index holding it) in one pass; every thread visits its indices in increasing
  /// order and keeps the first of its maxima.
  __device__ Best top(const Prob* p) {
    Top t(-1, -1.0f);
    bool bad = false;
    for (std::int32_t first = first_index(); first < n; first += kBatch * stride()) {
      float v[kBatch];  // read together: kBatch loads in flight
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const std::int32_t i = first + b * stride();
        v[b] = i < n ? read_row(p, i) : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const std::int32_t i = first + b * stride();
        if (i >= n) break;
        bad |= !core::valid_probability_value(v[b]);
        if (v[b] > t.value) t = Top(i, v[b]);
      }
    }
    return lead(t, bad, s_.cub.top, s_.slot.top_value, s_.bests);
  }

  /// The row's largest of every thread's (index, value), the lowest index among equal values, and
  /// whether any thread read a bad value: over the block (CUB's reduce in `temp`, the answer
  /// broadcast through `value_slot` and the slot's key), then over the row's blocks (`slots`).
  template <class Value, class Temp>
  __device__ Lead<Value> lead(cub::KeyValuePair<int, Value> mine, bool bad, Temp& temp, Value& value_slot,
                              Lead<Value> (&slots)[2]) {
    __syncthreads();  // the temporaries and the slot may still be read from the previous operation
    mine = cub::BlockReduce<cub::KeyValuePair<int, Value>, kThreads>(temp).Reduce(mine, detail::TopOp<Value>{});
    if (threadIdx.x == 0) {
      s_.slot.key = mine.key;
      value_slot = mine.value;
    }
    const int block_bad = __syncthreads_or(bad);  // publishes the slot
    const Lead<Value> block{value_slot, s_.slot.key, block_bad};
    return split_.merge(slots, turn_, block, [](const Lead<Value>& a, const Lead<Value>& b) {
      const bool second = b.value > a.value || (b.value == a.value && b.key < a.key);
      return Lead<Value>{second ? b.value : a.value, second ? b.key : a.key, a.bad | b.bad};
    });
  }

  /// sum_i term(i, bad) as a FixedSum: at scale 1, or again at core::fixed_scale where a term
  /// leaves FixedSum's domain (as the CPU's statistics); +inf where a term is (positive mass
  /// against none, for the KL-type divergences).
  template <class Term>
  __device__ Checked<float> statistic(const Term& term) {
    Terms all = terms_at(term, 1.0);
    if (all.bad) return {0.0f, false};
    if (all.largest > 1.7976931348623157e308) return {__int_as_float(0x7f800000), true};
    double scale = 1.0;
    if (!core::fixed_fits(all.largest, n)) {
      scale = core::fixed_scale(all.largest, n);
      all = terms_at(term, scale);
    }
    core::FixedSum sum;
    sum.hi = all.hi;
    sum.lo = all.lo;
    return {static_cast<float>(sum.value() / scale), true};
  }

  template <class Term>
  __device__ Terms terms_at(const Term& term, double scale) {
    FixedTerms s;
    double largest = 0.0;
    bool bad = false;
    for (std::int32_t first = first_index(); first < n; first += kBatch * stride()) {
      double t[kBatch];  // computed together: their loads in flight at once
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const std::int32_t i = first + b * stride();
        t[b] = i < n ? term(i, bad) : 0.0;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const double magnitude = t[b] < 0.0 ? -t[b] : t[b];
        largest = magnitude > largest ? magnitude : largest;
        s.add_coarse(t[b] * scale);  // the CPU's grid for statistics (cpu/divergence_kernels.hpp)
      }
    }
    const core::FixedSum block_sum = BlockFixedSum<kThreads>(s_.cub.fixed).sum(s.sum());
    __syncthreads();  // the sum's temporaries are the max's
    largest = cub::BlockReduce<double, kThreads>(s_.cub.largest).Reduce(largest, detail::MaxOp{});
    if (threadIdx.x == 0) s_.slot.largest = largest;
    const int block_bad = __syncthreads_or(bad);  // publishes the slot
    const Terms mine{block_sum.hi, block_sum.lo, s_.slot.largest, block_bad};
    return split_.merge(s_.terms, turn_, mine, [](const Terms& a, const Terms& b) {
      core::FixedSum t;
      t.hi = a.hi;
      t.lo = a.lo;
      core::FixedSum other;
      other.hi = b.hi;
      other.lo = b.lo;
      t.merge(other);
      return Terms{t.hi, t.lo, a.largest > b.largest ? a.largest : b.largest, a.bad | b.bad};
    });
  }

  /// Weights max(p - q, 0), or p, with w_x = max(p_x - 1, 0) for a one-hot residual at x: an
  /// element is (p_i, q_i), the one-hot draft's q_i = [i == x] (x = -1 with no draft row: the
  /// weights are p); the largest p bounds them (BlockDraw's concept, as cpu::draw's check()).
  struct RowWeights {
    const Prob* p;
    const Prob* q;  // nullptr: the one-hot draft at x
    std::int32_t x;
    struct Element {
      float p, q;
    };
    __device__ Element load(std::int32_t i) const {
      return {read_row(p, i), q ? read_row(q, i) : (i == x ? 1.0f : 0.0f)};
    }
    __device__ bool bad(const Element& e) const {
      return !core::valid_probability_value(e.p) || !core::valid_probability_value(e.q);
    }
    __device__ double operator()(const Element& e, std::int32_t) const { return core::residual_weight(e.p, e.q); }
    __device__ float screen(const Element& e) const { return e.p; }
    __device__ double bound(float largest_p) const { return core::fixed_bound(largest_p); }
  };

  /// Weights of a node's residual (core::Residual::weight, which reads p_i and q_i from a loaded
  /// element), bounded by Residual::weight_bound.
  struct ResidualWeights {
    const BlockRows& rows;
    const core::Residual<View>& r;
    std::int32_t x;
    typename core::Residual<View>::Collapse collapse;
    struct Element {
      float p, q;
    };
    /// Element i as Residual::weight reads rows: p_i from the p row, q_i from the q row.
    struct Loaded {
      View p;
      Element e;
      __device__ float value(View row, std::int32_t) const { return row == p ? e.p : e.q; }
    };
    __device__ Element load(std::int32_t i) const {
      return {rows.value(r.p, i), r.has_q ? rows.value(r.q, i) : 0.0f};
    }
    __device__ bool bad(const Element& e) const {
      return !core::valid_probability_value(e.p) || !core::valid_probability_value(e.q);
    }
    __device__ double operator()(const Element& e, std::int32_t i) const {
      Loaded loaded{r.p, e};
      return r.weight(loaded, x, i, collapse);
    }
    __device__ float screen(const Element& e) const { return e.p; }
    __device__ double bound(float largest_p) const { return r.weight_bound(largest_p); }
  };

  /// The row's draw (block_draw.cuh).
  template <class Weights>
  __device__ Checked<std::int32_t> draw(const Weights& weight, float u) {
    const DrawResult r = BlockDraw<kThreads>(s_.draw, split_).draw(n, weight, u);
    return {r.index, r.ok};
  }

  Shared& s_;
  RowSplit split_;
  int turn_ = 0;  // the merge slots the next merge takes (row_split.cuh)
  core::FixedSiblings<64> siblings_;
};

}  // namespace specverify::cuda
