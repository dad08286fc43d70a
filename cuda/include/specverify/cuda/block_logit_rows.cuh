// The CUDA backend's row operations over rows of logits for core::walk (the logits row source,
// core/logit_source.hpp): one thread block opens a row by its pre-pass and reads it through the
// view, mirroring BlockRows (block_rows.cuh) for probability rows and cpu::LogitRows for the CPU.
// Every thread calls every operation with the same arguments and gets the same result back.
//
// The pre-pass finds what the CPU's finds (cpu/logit_kernels.hpp, prepare), without sorting:
//   read:   max g, its lowest index, validity, the count of finite values (block reductions);
//   top_k:  the k-th largest g by radix select on order-preserving keys of g (four 8-bit digits,
//           block histograms in shared memory; integer counts, so exact);
//   top_p:  bisection over the keys of the candidates for the largest t whose mass
//           sum_{g >= t} w(g) reaches top_p of the candidates' mass (each step one pass and a
//           block FixedSum); the answer is a candidate's value, ties included;
//   min_p:  the lowest kept g with w >= min_p (a block minimum);
//   norm:   sum of the kept w.
// Weights are core::exp_weight, bit-identical to the CPU's, and the normaliser, the kept masses,
// the draws and the residual masses are the CPU's core::FixedSums of the same terms (coarse grid
// for the pre-pass's, as the CPU's): so the kept set, inv_norm, every p and every token drawn are
// the CPU's bit for bit. Entropy and divergences are double sums of core/row_math.hpp's terms,
// not the CPU's fast_log terms: they agree with the CPU's to within their stated accuracy.
//
// The view is core::LogitView, so the shared per-element functions (core::probability, ...) read
// it; kept sets are never listed on the device (listed = -1): a block reads the whole row as fast.
// Penalties and bias: no overlay is built; every element looks itself up in the lists
// (core::listed) where a filter of the listed row indices in shared memory says it may be there.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <climits>
#include <cstdint>

#include "specverify/core/logit_rows.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/cuda/block_draw.cuh"
#include "specverify/cuda/block_fixed_sum.cuh"
#include "specverify/cuda/block_rows.cuh"
#include "specverify/rule.hpp"

namespace specverify::cuda {

namespace logit_detail {

/// The order-preserving key of a processed logit: unsigned comparison of keys is float comparison
/// of values (-0 is taken as +0, so equal values have equal keys).
__device__ inline unsigned order_key(float g) {
  const unsigned bits = __float_as_uint(g == 0.0f ? 0.0f : g);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
__device__ inline float key_value(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

struct MinBitsOp {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return b < a ? b : a; }
};
struct CountOp {
  __device__ int operator()(int a, int b) const { return a + b; }
};

}  // namespace logit_detail

/// Block-cooperative rows over views of logits rows, as core::walk expects them; n is the target
/// vocabulary size (views over a reduced draft vocabulary are read at target ids through their
/// map). kThreads is the block size (a multiple of 32, at least 64).
///
///   __shared__ typename BlockLogitRows<__half, 256>::Shared shared;
///   BlockLogitRows<__half, 256> rows(shared, batch.vocab_size);
///   const core::WalkResult r = core::walk(rule, layout, source, randomness, blockIdx.x, rows);
template <class Logit, int kThreads>
class BlockLogitRows {
  static_assert(kThreads % 32 == 0 && kThreads >= 64, "a whole number of warps, at least two");
  static constexpr int kBins = 256;  // radix select: 8-bit digits
  static constexpr int kBinsPerThread = (kBins + kThreads - 1) / kThreads;
  static constexpr int kCandidates = 1024;  // top_p reads at most this many from shared memory
  static constexpr int kBatch = 4;  // elements whose raw values a thread reads before it uses them
  using Top = cub::KeyValuePair<int, float>;
  using Best = cub::KeyValuePair<int, double>;

 public:
  using View = core::LogitView<Logit>;
  std::int32_t n;  // target vocabulary size

  /// Shared memory the operations work in: CUB temporaries, a radix histogram or a draw's
  /// storage, and broadcast slots. Declare it __shared__ and hand it to the constructor.
  struct Shared {
    union {
      typename cub::BlockReduce<Top, kThreads>::TempStorage top;
      typename cub::BlockReduce<Best, kThreads>::TempStorage best;
      typename cub::BlockReduce<double, kThreads>::TempStorage sum;
      typename BlockFixedSum<kThreads>::TempStorage fixed;
      typename cub::BlockReduce<unsigned, kThreads>::TempStorage bits;
      typename cub::BlockReduce<int, kThreads>::TempStorage count;
      typename cub::BlockScan<int, kThreads>::TempStorage counts;
    } cub;
    union {
      int histogram[kBins];
      float candidates[kCandidates];  // top_p's after top_k
      typename BlockDraw<kThreads>::TempStorage draw;
    } work;
    // Two rows' list filters (LogitRow::may_be_listed), taken in turn by open(): a view reads its
    // own until the second open() after it, as the walk's views live.
    std::uint32_t filters[2][core::kListFilterWords];
    struct {
      double sum;
      double best_key;
      float top_value;
      int top_key;
      int index;
      int count;
      unsigned bits;
    } slot;
  };

  __device__ BlockLogitRows(Shared& shared, std::int32_t n) : n(n), s_(shared) {}

  /// f(i, core::processed_logit(row, i)) for this thread's row indices (threadIdx.x, then every
  /// kThreads-th) in increasing order, as a plain loop would visit them; each thread reads kBatch
  /// elements' raw values (core::raw_logit) before it processes any, so that many reads are in
  /// flight at once: a pass over the row costs a few memory latencies, not one per element.
  template <class F>
  __device__ static void each_processed(const core::LogitRow<Logit>& row, std::int32_t count, const F& f) {
    for (std::int32_t first = threadIdx.x; first < count; first += kBatch * kThreads) {
      core::RawLogit raw[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (first + b * kThreads < count) raw[b] = core::raw_logit(row, first + b * kThreads);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const std::int32_t i = first + b * kThreads;
        if (i >= count) break;
        f(i, core::processed_logit(row, i, raw[b]));
      }
    }
  }

  /// The pre-pass: a view of `row` with its sampling parameters applied (docs/api.md's nine steps),
  /// the same in every thread. Parameters must have passed check_sampling_params. view.ok is
  /// false when a NaN or +inf logit was read (or guidance overflowed); view.has_mass() is false
  /// when every token is masked.
  __device__ View open(const core::LogitRow<Logit>& raw) {
    View view;
    const core::LogitRow<Logit> row = with_lists(raw);
    view.row = row;
    view.listed = -1;
    const SamplingParams& params = row.params;
    view.greedy = params.temperature == 0.0f;
    if (!view.greedy) {  // __fdiv_rn: the IEEE quotient the CPU computes, whatever the nvcc flags
      const float inv = __fdiv_rn(1.0f, params.temperature);
      view.inv_temperature = inv < core::kFloatMax ? inv : core::kFloatMax;
    } else {
      view.inv_temperature = 0.0f;
    }
    view.threshold = -core::kFloatMax;

    // The read: max g and its lowest index, validity, and how many values are finite.
    Top t(INT_MAX, -core::kInf);
    bool bad = false;
    int finite = 0;
    each_processed(row, row.n, [&](std::int32_t i, const core::Processed& e) {
      bad |= !e.valid;
      if (e.g > t.value) t = Top(i, e.g);
      finite += e.g > -core::kInf;
    });
    __syncthreads();  // the temporaries may still be read from the previous operation
    t = cub::BlockReduce<Top, kThreads>(s_.cub.top).Reduce(t, detail::TopOp<float>{});
    if (threadIdx.x == 0) {
      s_.slot.top_key = t.key;
      s_.slot.top_value = t.value;
    }
    view.ok = !__syncthreads_or(bad);
    view.max = s_.slot.top_value;
    view.argmax = view.max > -core::kInf ? s_.slot.top_key : -1;
    if (!view.ok || !view.has_mass()) return view;
    if (view.greedy) {
      view.norm = 1.0;
      view.inv_norm = 1.0f;
      return view;
    }
    finite = count(finite);

    if (params.top_k > 0 && params.top_k < row.n && finite >= params.top_k) {
      view.threshold = kth_largest(row, params.top_k);
    }
    if (params.top_p < 1.0f) view.threshold = top_p_threshold(view, params.top_p);
    if (params.min_p > 0.0f) view.threshold = min_p_threshold(view, params.min_p);
    view.norm = kept_mass(view, view.threshold).value();
    view.inv_norm = static_cast<float>(1.0 / view.norm);
    return view;
  }

  __device__ float value(const View& view, std::int32_t v) const { return core::probability(view, v); }

  /// max_v p(v): p at the argmax, 1 * inv_norm (0 without mass).
  __device__ Checked<float> max(const View& p) const {
    return {p.has_mass() ? (p.greedy ? 1.0f : p.inv_norm) : 0.0f, p.ok};
  }

  /// The lowest index of max g: the exact argmax of p.
  __device__ Checked<std::int32_t> argmax(const View& p) const { return {p.argmax, p.ok}; }

  __device__ Checked<float> entropy(const View& p) {
    if (p.greedy || !p.has_mass()) return {0.0f, p.ok};
    double h = 0.0;
    for (std::int32_t v = threadIdx.x; v < n; v += kThreads) h += core::entropy_term(value(p, v));
    return {static_cast<float>(sum(h)), p.ok};
  }

  /// D(p, q); no q is the one-hot draft e_x, whose divergence depends on p(x) alone (as the CPU).
  __device__ Checked<float> divergence(Divergence d, const View& p, const View* q, std::int32_t x) {
    if (!q) {
      if (x < 0 || x >= n) return {__int_as_float(0x7fc00000), false};
      const double a = value(p, x), rest = 1.0 - a > 0.0 ? 1.0 - a : 0.0;
      const double off = rest > 0.0 ? rest * core::divergence_term(d, 1.0, 0.0) : 0.0;
      return {static_cast<float>(off + core::divergence_term(d, a, 1.0)), p.ok};
    }
    double s = 0.0;
    for (std::int32_t v = threadIdx.x; v < n; v += kThreads) {
      s += core::divergence_term(d, value(p, v), value(*q, v));
    }
    return {static_cast<float>(sum(s)), p.ok && q->ok};
  }

  /// From max(p - q, 0) (q == nullptr: one-hot at x); -1 when it has no mass.
  __device__ Checked<std::int32_t> draw_residual(const View& p, const View* q, std::int32_t x, float u) {
    if (!p.ok || (q && !q->ok)) return {-1, false};
    if (!p.has_mass()) return {-1, true};
    if (q && q->greedy) {  // one-hot q at the target id of its argmax
      x = q->row.target_to_draft ? target_id(*q, q->argmax) : q->argmax;
      q = nullptr;
    }
    if (p.greedy) {  // one positive weight at most: 1 - q(argmax)
      const float qa = q ? value(*q, p.argmax) : (p.argmax == x ? 1.0f : 0.0f);
      return {1.0f - qa > 0.0f ? p.argmax : -1, true};
    }
    return draw(ResidualWeights{*this, p, q, x}, u);
  }

  __device__ Checked<std::int32_t> draw_target(const View& p, float u) {
    if (!p.ok) return {-1, false};
    if (!p.has_mass()) return {-1, true};
    if (p.greedy) return {p.argmax, true};
    return draw(TargetWeights{*this, p}, u);
  }

  /// Room for the siblings a node's residual absorbs: a fixed 64 per thread (every thread walks
  /// alike and keeps its own copy); a node with more rejected children is invalid_input here.
  __device__ core::Siblings siblings(std::int32_t) { return siblings_.room(); }

  /// The mass of a tree node's residual after rejecting sibling x (core/residual.hpp): the sum
  /// the draw from it compares against, the CPU's bit for bit.
  __device__ Checked<double> mass(const core::Residual<View>& r, std::int32_t x) {
    const MassResult m = BlockDraw<kThreads>(s_.work.draw).mass(n, TreeWeights{*this, r, x, r.collapse(x)});
    return {m.value, r.p.ok && (!r.has_q || r.q.ok)};
  }

  /// A draw from a tree node's residual after rejecting sibling x (kNoToken: the residual itself).
  __device__ Checked<std::int32_t> draw(const core::Residual<View>& r, std::int32_t x, float u) {
    if (!r.p.ok || (r.has_q && !r.q.ok)) return {-1, false};
    return draw(TreeWeights{*this, r, x, r.collapse(x)}, u);
  }

  /// Coupled sampling: argmax over kept tokens of (g - max)/T + Gumbel(seed, position, v), lowest
  /// index on ties; argmax for greedy rows; -1 without mass. Each thread takes blocks of four
  /// tokens (one Philox call each).
  __device__ Checked<std::int32_t> gumbel_argmax(const View& p, std::uint64_t seed, std::int64_t position) {
    if (!p.ok) return {-1, false};
    if (!p.has_mass() || p.greedy) return {p.argmax, true};
    Best best(INT_MAX, -HUGE_VAL);
    const std::int32_t rows = p.row.n;
    for (std::int32_t first = 4 * std::int32_t(threadIdx.x); first < rows; first += 4 * kThreads) {
      float a[4];
      bool any = false;
      for (int l = 0; l < 4; ++l) {
        const std::int32_t i = first + l;
        const float g = i < rows ? core::processed_logit(p.row, i).g : -core::kInf;
        a[l] = g >= p.threshold ? core::weight_argument(g, p.max, p.inv_temperature) : -core::kInf;
        any |= a[l] > -core::kInf;
      }
      if (!any) continue;
      std::uint32_t words[4];
      core::gumbel_words(seed, position, static_cast<std::uint32_t>(first) >> 2, words);
      for (int l = 0; l < 4; ++l) {
        if (!(a[l] > -core::kInf)) continue;
        const double k = double(a[l]) + core::gumbel(words[l]);
        if (k > best.value) best = Best(first + l, k);  // indices rise: the first of equal keys stays
      }
    }
    __syncthreads();
    best = cub::BlockReduce<Best, kThreads>(s_.cub.best).Reduce(best, detail::TopOp<double>{});
    if (threadIdx.x == 0) s_.slot.index = best.key;
    __syncthreads();
    return {s_.slot.index, true};
  }

  /// The lowest row index whose inputs are invalid (NaN or +inf logit, guidance overflow, a finite
  /// logit bias and penalties made infinite), or -1; names a fault's value.
  __device__ std::int32_t first_invalid(const core::LogitRow<Logit>& raw) {
    core::LogitRow<Logit> row = raw;
    row.read_lists = true;  // every element looks itself up: a fault's path needs no filter
    int first = INT_MAX;
    for (std::int32_t i = threadIdx.x; i < row.n && first == INT_MAX; i += kThreads) {
      if (!core::processed_logit(row, i).valid) first = i;
    }
    first = min(first);
    return first == INT_MAX ? -1 : first;
  }

  /// The minimum over the block of one int per thread, in every thread.
  __device__ int min(int v) { return reduce(v, s_.cub.count, s_.slot.index, detail::MinOp{}); }

 private:
  // ---------------------------------------------------------------- block reductions

  /// `op` over the block of one value per thread, through `temp` and `slot`, in every thread.
  template <class T, class Temp, class Op>
  __device__ T reduce(T v, Temp& temp, T& slot, Op op) {
    __syncthreads();  // the temporaries and the slot may still be read from the previous operation
    v = cub::BlockReduce<T, kThreads>(temp).Reduce(v, op);
    if (threadIdx.x == 0) slot = v;
    __syncthreads();
    return slot;
  }

  __device__ double sum(double v) { return reduce(v, s_.cub.sum, s_.slot.sum, detail::SumOp{}); }
  __device__ int count(int v) { return reduce(v, s_.cub.count, s_.slot.count, logit_detail::CountOp{}); }
  __device__ unsigned min_bits(unsigned v) { return reduce(v, s_.cub.bits, s_.slot.bits, logit_detail::MinBitsOp{}); }

  // ---------------------------------------------------------------- penalties and bias

  /// `row` reading its penalty and bias lists element by element (core::listed), through a filter
  /// of the row indices they name built in shared memory; unchanged where the lists change nothing.
  __device__ core::LogitRow<Logit> with_lists(core::LogitRow<Logit> row) {
    const core::PenaltyLists& l = row.lists;
    const bool penalise = l.penalise && (l.history_size > 0 || l.path_end > 0);
    const bool biased = l.bias_tokens && l.bias_size > 0;
    if (!penalise && !biased) return row;
    std::uint32_t* filter = s_.filters[filter_];
    filter_ ^= 1;
    __syncthreads();  // the filter's last row is no longer read (its view is two opens old)
    for (int w = threadIdx.x; w < core::kListFilterWords; w += kThreads) filter[w] = 0u;
    __syncthreads();
    const auto mark = [&](std::int32_t v) {
      const std::int32_t i = row.target_to_draft ? row.target_to_draft[v] : v;
      if (i < 0) return;  // outside a reduced draft vocabulary
      const std::int32_t bit = i & (core::kListFilterBits - 1);
      atomicOr(filter + (bit >> 5), 1u << (bit & 31));
    };
    if (penalise) {
      for (std::int32_t k = threadIdx.x; k < l.history_size; k += kThreads) mark(l.history_tokens[k]);
      if (l.parents) {
        if (threadIdx.x == 0) {
          for (std::int32_t node = l.path_end - 1; node >= 0; node = l.parents[node]) mark(l.drafts[node]);
        }
      } else {
        for (std::int32_t j = threadIdx.x; j < l.path_end; j += kThreads) mark(l.drafts[j]);
      }
    }
    if (biased) {
      for (std::int32_t k = threadIdx.x; k < l.bias_size; k += kThreads) mark(l.bias_tokens[k]);
    }
    __syncthreads();
    row.read_lists = true;
    row.may_be_listed = filter;
    return row;
  }

  // ---------------------------------------------------------------- the pre-pass's thresholds

  __device__ static float weight(const View& view, float g) {
    return core::exp_weight(core::weight_argument(g, view.max, view.inv_temperature));
  }

  /// Sum of w over the row's values g >= t (t finite), on FixedSum's coarse grid as the CPU's.
  __device__ core::FixedSum kept_mass(const View& view, float t) {
    core::FixedSum s;
    each_processed(view.row, view.row.n, [&](std::int32_t, const core::Processed& e) {
      if (e.g >= t) s.add_coarse(weight(view, e.g));
    });
    return BlockFixedSum<kThreads>(s_.cub.fixed).sum(s);
  }

  /// The k-th largest finite value of the row (the row holds at least k): radix select on the
  /// keys, most significant digit first; each round counts the values that share the digits
  /// found so far, per next digit, and keeps the digit where the count from the top reaches k.
  __device__ float kth_largest(const core::LogitRow<Logit>& row, int k) {
    unsigned prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      __syncthreads();  // the histogram and the slot of the previous round may still be read
      for (int d = threadIdx.x; d < kBins; d += kThreads) s_.work.histogram[d] = 0;
      __syncthreads();
      each_processed(row, row.n, [&](std::int32_t, const core::Processed& e) {
        if (!(e.g > -core::kInf)) return;
        const unsigned key = logit_detail::order_key(e.g);
        if ((key & mask) == prefix) atomicAdd(&s_.work.histogram[(key >> shift) & 0xffu], 1);
      });
      __syncthreads();
      // Counts from the highest digit down: thread t holds digits 255 - t kBinsPerThread - j.
      int counts[kBinsPerThread], above[kBinsPerThread];
      for (int j = 0; j < kBinsPerThread; ++j) {
        const int d = kBins - 1 - (int(threadIdx.x) * kBinsPerThread + j);
        counts[j] = d >= 0 ? s_.work.histogram[d] : 0;
      }
      cub::BlockScan<int, kThreads>(s_.cub.counts).ExclusiveSum(counts, above);
      for (int j = 0; j < kBinsPerThread; ++j) {
        if (above[j] < k && above[j] + counts[j] >= k) {
          s_.slot.index = kBins - 1 - (int(threadIdx.x) * kBinsPerThread + j);
          s_.slot.count = above[j];
        }
      }
      __syncthreads();
      k -= s_.slot.count;
      prefix |= unsigned(s_.slot.index) << shift;
      mask |= 0xffu << shift;
    }
    return logit_detail::key_value(prefix);
  }

  /// top_p among the candidates (finite g >= view.threshold): the largest t such that the
  /// candidates >= t hold mass >= top_p of the candidates' mass. Bisection over keys on the
  /// monotone mass M(K) = sum of w over candidates with key >= K, between the lowest candidate of
  /// positive weight (M = the whole mass) and past the max (M = 0); the answer is a candidate key.
  /// After top_k the candidates are few: they are copied to shared memory once (in thread order,
  /// so the sums' order is fixed) and the bisection's passes read them there, not the row.
  __device__ float top_p_threshold(const View& view, float top_p) {
    if (view.threshold > -core::kFloatMax) {
      int mine = 0;
      each_processed(view.row, view.row.n,
                     [&](std::int32_t, const core::Processed& e) { mine += e.g >= view.threshold; });
      int offset = 0, total = 0;
      __syncthreads();  // the temporaries and the histogram may still be read by kth_largest
      cub::BlockScan<int, kThreads>(s_.cub.counts).ExclusiveSum(mine, offset, total);
      if (total <= kCandidates) {
        each_processed(view.row, view.row.n, [&](std::int32_t, const core::Processed& e) {
          if (e.g >= view.threshold) s_.work.candidates[offset++] = e.g;
        });
        __syncthreads();
        return top_p_bisection(view, top_p, [&](const auto& f) {
          for (std::int32_t c = threadIdx.x; c < total; c += kThreads) f(s_.work.candidates[c]);
        });
      }
    }
    return top_p_bisection(view, top_p, [&](const auto& f) {
      each_processed(view.row, view.row.n, [&](std::int32_t, const core::Processed& e) { f(e.g); });
    });
  }

  /// top_p_threshold's bisection over the values (the row's, or its candidates'): `each(f)` calls
  /// f(g) for each of this thread's values.
  template <class Each>
  __device__ float top_p_bisection(const View& view, float top_p, const Each& each) {
    core::FixedSum s;
    unsigned lowest = UINT_MAX;
    each([&](float g) {
      if (!(g >= view.threshold)) return;
      const float w = weight(view, g);
      if (w > 0.0f) {
        s.add_coarse(w);
        const unsigned key = logit_detail::order_key(g);
        lowest = key < lowest ? key : lowest;
      }
    });
    const double need = double(top_p) * BlockFixedSum<kThreads>(s_.cub.fixed).sum(s).value();
    unsigned lo = min_bits(lowest), hi = logit_detail::order_key(view.max) + 1u;
    while (hi - lo > 1u) {
      const unsigned mid = lo + (hi - lo) / 2u;
      const float t = logit_detail::key_value(mid);
      core::FixedSum m;
      each([&](float g) {
        if (g >= t) m.add_coarse(weight(view, g));
      });
      if (BlockFixedSum<kThreads>(s_.cub.fixed).sum(m).value() >= need) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return logit_detail::key_value(lo);
  }

  /// min_p among the tokens still kept: the lowest g >= view.threshold with w >= min_p (w = 1 at
  /// the max, so the max qualifies).
  __device__ float min_p_threshold(const View& view, float min_p) {
    unsigned lowest = logit_detail::order_key(view.max);
    each_processed(view.row, view.row.n, [&](std::int32_t, const core::Processed& e) {
      if (e.g >= view.threshold && weight(view, e.g) >= min_p) {
        const unsigned key = logit_detail::order_key(e.g);
        lowest = key < lowest ? key : lowest;
      }
    });
    return logit_detail::key_value(min_bits(lowest));
  }

  /// The target id whose draft row index is `row_index` (q over a reduced vocabulary).
  __device__ std::int32_t target_id(const View& q, std::int32_t row_index) {
    int found = INT_MAX;
    for (std::int32_t v = threadIdx.x; v < n && found == INT_MAX; v += kThreads) {
      if (q.row.target_to_draft[v] == row_index) found = v;
    }
    return min(found);
  }

  // ---------------------------------------------------------------- the draw

  // Weights in BlockDraw's concept; the views checked every value as they were opened (no element
  // is bad), and p <= 1 (w <= 1, 1 / norm <= 1) bounds the target's and the residual's, as on the
  // CPU. An element holds the raw values of p(v) (and q(v)), read before any is used.

  /// Target id v of a view: its row index (-1 outside a reduced draft vocabulary) and raw values.
  struct RawAt {
    std::int32_t i;
    core::RawLogit raw;
  };
  __device__ static RawAt raw_at(const View& view, std::int32_t v) {
    const std::int32_t i = core::row_index(view, v);
    return {i, i >= 0 ? core::raw_logit(view.row, i) : core::RawLogit{}};
  }
  /// core::probability(view, v) from its raw values.
  __device__ static float probability(const View& view, const RawAt& at) {
    return at.i < 0 ? 0.0f : core::probability_at(view, at.i, at.raw);
  }

  /// p(v) (a non-greedy view with mass).
  struct TargetWeights {
    const BlockLogitRows& rows;
    const View& p;
    using Element = RawAt;
    __device__ Element load(std::int32_t v) const { return raw_at(p, v); }
    __device__ double operator()(const Element& e, std::int32_t) const { return probability(p, e); }
    __device__ bool bad(const Element&) const { return false; }
    __device__ float screen(const Element&) const { return 0.0f; }
    __device__ double bound(float) const { return 1.0; }
  };

  /// max(p(v) - q(v), 0) in double, as the CPU's logits rows; with q == nullptr, p off x.
  struct ResidualWeights {
    const BlockLogitRows& rows;
    const View& p;
    const View* q;
    std::int32_t x;
    struct Element {
      RawAt p, q;
    };
    __device__ Element load(std::int32_t v) const { return {raw_at(p, v), q ? raw_at(*q, v) : RawAt{-1, {}}}; }
    __device__ double operator()(const Element& e, std::int32_t v) const {
      const float pv = probability(p, e.p);
      if (!q) return v == x ? 0.0 : double(pv);
      if (!(pv > 0.0f)) return 0.0;  // max(0 - q, 0)
      return core::residual_weight(pv, probability(*q, e.q));
    }
    __device__ bool bad(const Element&) const { return false; }
    __device__ float screen(const Element&) const { return 0.0f; }
    __device__ double bound(float) const { return 1.0; }
  };

  /// A node's residual (core::Residual::weight, which reads p(v) and q(v) from a loaded element),
  /// bounded by Residual::weight_bound of the largest p (core::residual_mass, as the CPU's logits
  /// rows).
  struct TreeWeights {
    const BlockLogitRows& rows;
    const core::Residual<View>& r;
    std::int32_t x;
    typename core::Residual<View>::Collapse collapse;
    struct Element {
      RawAt p, q;
    };
    /// Element v as Residual::weight reads rows: p(v) from the p view, q(v) from the q view.
    struct Loaded {
      const View* p;
      float pv, qv;
      __device__ float value(const View& view, std::int32_t) const { return &view == p ? pv : qv; }
    };
    __device__ Element load(std::int32_t v) const {
      return {raw_at(r.p, v), r.has_q ? raw_at(r.q, v) : RawAt{-1, {}}};
    }
    __device__ double operator()(const Element& e, std::int32_t v) const {
      Loaded loaded{&r.p, probability(r.p, e.p), r.has_q ? probability(r.q, e.q) : 0.0f};
      return r.weight(loaded, x, v, collapse);
    }
    __device__ bool bad(const Element&) const { return false; }
    __device__ float screen(const Element& e) const { return probability(r.p, e.p); }
    __device__ double bound(float largest_p) const { return r.weight_bound(largest_p); }
  };

  /// The block's draw (block_draw.cuh).
  template <class Weights>
  __device__ Checked<std::int32_t> draw(const Weights& weight, float u) {
    const DrawResult r = BlockDraw<kThreads>(s_.work.draw).draw(n, weight, u);
    return {r.index, r.ok};
  }

  Shared& s_;
  core::FixedSiblings<64> siblings_;
  int filter_ = 0;  // the list filter the next open() takes
};

}  // namespace specverify::cuda
