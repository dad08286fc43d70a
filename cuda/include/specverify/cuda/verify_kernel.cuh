// The CUDA backend's kernels, for any batch kind whose core::BatchChecks names its layout (chains,
// trees): one block per sequence, or one cluster of blocks splitting its rows (row_split.cuh),
// checks the sequence's input with the shared validator (core/checks.hpp), walks it with
// core::walk over BlockRows and keeps the outcome in its record; a second kernel writes every
// output with the shared writer (core/output.hpp), and only when no block found anything.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "specverify/core/checks.hpp"
#include "specverify/core/output.hpp"
#include "specverify/core/prob_source.hpp"
#include "specverify/core/walk.hpp"
#include "specverify/cuda/block_rows.cuh"
#include "specverify/cuda/workspace.cuh"
#include "specverify/types.hpp"

namespace specverify::cuda::detail {

/// Randomness as a kernel receives it: seed and offset from the host values, or read from device
/// memory when the pointers are set (graph capture).
struct KernelRandomness {
  Randomness values;
  const std::uint64_t* seed{};
  const std::uint64_t* offset{};

  __device__ Randomness resolve() const {
    Randomness r = values;
    if (seed) r.seed = *seed;
    if (offset) r.offset = *offset;
    return r;
  }
};

/// core::check_sequence's per-item work spread over the block: each thread takes every
/// kThreads-th item and the block agrees on the first. Every thread calls alike.
template <class Rows, int kThreads>
struct BlockItems {
  Rows& rows;

  template <class Bad>
  __device__ std::int32_t first(std::int32_t n, const Bad& bad) {
    int found = INT_MAX;
    for (std::int32_t i = threadIdx.x; i < n && found == INT_MAX; i += kThreads) {
      if (bad(i)) found = i;
    }
    found = rows.min(found);
    return found == INT_MAX ? -1 : found;
  }

  /// The first node at depth >= `depth`: each node's depth by walking up its parents (which come
  /// before it), no further than `depth` steps, so the work is bounded by the output's width.
  __device__ std::int32_t first_deeper(std::int32_t n, const std::int32_t* parents, std::int32_t depth) {
    return first(n, [&](std::int32_t i) {
      std::int32_t d = 1;
      for (std::int32_t p = parents[i]; p >= 0 && d < depth; p = parents[p]) ++d;
      return d >= depth;
    });
  }
};

/// One block (or cluster) per sequence: check its input, walk it, keep the outcome in its record.
/// A finding goes to the record, and the header's first_fault keeps the lowest rank over all
/// blocks: the finding the host's validate would have thrown first. `staging` (nullable) receives
/// the walk's logprobs, [B][row_width]. The blocks of a cluster walk alike; the first records.
template <class Rule, class Batch, int kThreads>
__global__ void __launch_bounds__(kThreads)
    walk_kernel(const Rule rule, const Batch batch, const KernelRandomness randomness, const int blocks_per_row,
                const std::int32_t row_width, float* staging, Header* header, SequenceRecord* records) {
  using Prob = std::remove_cv_t<std::remove_pointer_t<decltype(batch.target_probs)>>;
  using Checks = core::BatchChecks<Batch>;
  __shared__ typename BlockRows<Prob, kThreads>::Shared shared;
  const RowSplit split = RowSplit::of_cluster();
  BlockRows<Prob, kThreads> rows(shared, batch.vocab_size, split);
  BlockItems<BlockRows<Prob, kThreads>, kThreads> items{rows};
  // The launch's blocks per row; a kernel built without clusters (split.count 1) walks each
  // sequence in every block of its group, alike.
  const auto b = static_cast<std::int32_t>(blockIdx.x / static_cast<unsigned>(blocks_per_row));
  const Randomness r = randomness.resolve();

  bool walkable = false;
  core::Finding finding = core::check_sequence(rule, batch, r, row_width, b, items, walkable);
  core::WalkResult result;
  if (walkable) {
    const auto source = core::ProbSource<Prob>::of(batch);
    // Every thread walks alike and stages the same logprobs: the joint walks (Block, Traversal)
    // open rows for them, and an open is a block operation every thread must enter. The blocks
    // of a cluster write the same values.
    float* stage = staging ? staging + std::int64_t{b} * row_width : nullptr;
    result = core::walk(rule, Checks::Layout::of(batch), source, r, b, rows, stage);
    if (result.fault.kind != core::FaultKind::none) {
      core::name_bad_value(result.fault, b, source, [&](const Prob* row, float& value) {
        const std::int32_t column = rows.first_invalid(row);
        if (column >= 0) value = rows.value(row, column);
        return column;
      });
      finding = core::from_fault(result.fault, b, Checks::kItem);
    }
  }
  rows.finish();
  if (threadIdx.x != 0 || split.rank != 0) return;
  records[b].result = result;
  if (finding) {
    records[b].finding = finding;
    atomicMax(&header->first_fault, ~static_cast<unsigned long long>(finding.rank()));
  }
}

__device__ inline long long warp_sum(long long v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

__device__ inline void add(std::int64_t& counter, long long v) {
  if (v != 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&counter),
              static_cast<unsigned long long>(static_cast<long long>(v)));
  }
}

/// One thread per sequence writes its outputs with core::write_sequence and adds its share of
/// VerifyStats, unless the walk kernel found anything anywhere: then nothing is written at all.
template <int kThreads, class Layout>
__global__ void __launch_bounds__(kThreads)
    write_kernel(const Layout layout, const std::int32_t batch_size, const core::OutputRows out,
                 const float* staging, Header* header, const SequenceRecord* records) {
  if (header->first_fault != 0) return;
  const std::int64_t b = std::int64_t{blockIdx.x} * kThreads + threadIdx.x;
  core::WalkResult r;  // zero counts for the threads past the batch
  if (b < batch_size) {
    r = records[b].result;
    core::write_sequence(layout, static_cast<std::int32_t>(b), r, out,
                         staging ? staging + b * out.row_width : nullptr);
  }
  const long long drafted = warp_sum(r.drafted), accepted = warp_sum(r.accepted);
  const long long relaxed = warp_sum(r.relaxed), checked = warp_sum(r.target_checked);
  if (threadIdx.x % 32 == 0) {
    add(header->stats.drafted, drafted);
    add(header->stats.accepted, accepted);
    add(header->stats.relaxed, relaxed);
    add(header->stats.target_checked, checked);
  }
}

}  // namespace specverify::cuda::detail
