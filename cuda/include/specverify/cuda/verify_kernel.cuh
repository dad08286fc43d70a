// The CUDA backend's kernels: one block per sequence validates the sequence's input and walks
// its chain with core::walk over BlockRows; a second kernel writes every output, only when
// no block recorded a fault.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "specverify/core/chain_layout.hpp"
#include "specverify/core/output.hpp"
#include "specverify/core/prob_source.hpp"
#include "specverify/core/validate.hpp"
#include "specverify/core/walk.hpp"
#include "specverify/cuda/block_rows.cuh"
#include "specverify/cuda/workspace.cuh"
#include "specverify/rule.hpp"
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

/// Stride overflow as core::detail::check_stride words it: stride * rows beyond int64.
template <class Prob>
__device__ bool stride_overflows(std::int64_t stride, std::int64_t rows, const ChainBatch<Prob>& batch) {
  const std::int64_t s = stride ? stride : batch.vocab_size;
  return rows > 0 && s > (LLONG_MAX - batch.vocab_size) / rows;
}

/// Checks, in every thread alike, what the host could not: the batch-wide facts (offsets[0],
/// row count, strides, draft_tokens) and sequence b's own input, in core::validate's order.
/// Returns whether b's chain may be walked. A false return with rec.issue == none means b's arrays
/// are unsafe to read because of another sequence's fault, which that sequence records: only
/// sequence 0 records batch-wide faults, only b records its own, so the lowest faulting sequence
/// is well defined and nothing out of bounds is ever read.
template <int kThreads, class Rule, class Prob, class Rows>
__device__ bool check_sequence(const Rule& rule, const ChainBatch<Prob>& batch,
                               const Randomness& randomness, std::int32_t row_width,
                               std::int32_t b, Rows& rows, SequenceRecord& rec) {
  const std::int32_t* offsets = batch.draft_offsets;
  const std::int32_t B = batch.batch_size, first = offsets[b], next = offsets[b + 1];
  const std::int32_t drafts = offsets[B];
  const std::int64_t target_rows = std::int64_t{drafts} + B;
  const auto fault = [&](Issue issue, std::int64_t a = 0, std::int64_t c = 0) {
    rec.issue = issue;
    rec.a = a;
    rec.c = c;
    return false;
  };
  const auto name = [&](const char* what) {
    int i = 0;
    for (; what[i] && i + 1 < int(sizeof rec.what); ++i) rec.what[i] = what[i];
    rec.what[i] = '\0';
  };

  if (b == 0 && offsets[0] != 0) return fault(Issue::offsets_start, offsets[0]);
  if (next < first) return fault(Issue::offsets_decrease, first, next);
  if (b == 0 && drafts >= 0 && target_rows > INT_MAX) return fault(Issue::rows_overflow, target_rows);
  if (b == 0 && drafts >= 0 && stride_overflows(batch.target_stride, target_rows, batch)) {
    name("target_stride");
    return fault(Issue::stride_overflow, batch.target_stride ? batch.target_stride : batch.vocab_size,
                 target_rows);
  }
  if (b == 0 && drafts >= 0 && stride_overflows(batch.draft_stride, drafts, batch)) {
    name("draft_stride");
    return fault(Issue::stride_overflow, batch.draft_stride ? batch.draft_stride : batch.vocab_size,
                 drafts);
  }
  if (b == 0 && drafts > 0 && !batch.draft_tokens) return fault(Issue::draft_tokens_null);
  // Sequence 0 has recorded any batch-wide fault; with none, offsets outside [0, drafts] mean a
  // decrease that its sequence records.
  const bool batch_ok = offsets[0] == 0 && drafts >= 0 && target_rows <= INT_MAX &&
                        !stride_overflows(batch.target_stride, target_rows, batch) &&
                        !stride_overflows(batch.draft_stride, drafts, batch) &&
                        (drafts == 0 || batch.draft_tokens);
  if (!batch_ok || first < 0 || next > drafts) return false;

  if (std::int64_t{next} - first + 1 > row_width) {
    return fault(Issue::row_width, row_width, std::int64_t{next} - first + 1);
  }
  if (randomness.sample_uniforms && !core::detail::is_uniform(randomness.sample_uniforms[b])) {
    rec.value = randomness.sample_uniforms[b];
    return fault(Issue::sample_uniform);
  }

  // Per-draft inputs: the threads check the drafts in parallel and the first bad one is named.
  const auto draft_problem = [&](std::int32_t g) {
    Problem problem;
    if constexpr (specverify::detail::has_check_draft<Rule>::value) problem = rule.check_draft(g);
    return problem;
  };
  const auto bad_draft = [&](std::int32_t g) {
    const std::int32_t x = batch.draft_tokens[g];
    return x < 0 || x >= batch.vocab_size ||
           (randomness.accept_uniforms && !core::detail::is_uniform(randomness.accept_uniforms[g])) ||
           draft_problem(g).what != nullptr;
  };
  int bad = INT_MAX;
  for (std::int32_t g = first + std::int32_t(threadIdx.x); g < next && bad == INT_MAX; g += kThreads) {
    if (bad_draft(g)) bad = g;
  }
  bad = rows.min(bad);
  if (bad == INT_MAX) return true;
  rec.position = bad - first;
  const std::int32_t x = batch.draft_tokens[bad];
  if (x < 0 || x >= batch.vocab_size) return fault(Issue::draft_token, x, batch.vocab_size);
  if (randomness.accept_uniforms && !core::detail::is_uniform(randomness.accept_uniforms[bad])) {
    rec.value = randomness.accept_uniforms[bad];
    return fault(Issue::accept_uniform);
  }
  const Problem problem = draft_problem(bad);
  name(problem.what);
  rec.value = problem.value;
  return fault(Issue::rule_draft);
}

/// One block per sequence: check its input, walk its chain, keep the result in its record. On a
/// fault, the record says what and the header's first_fault names the lowest faulting sequence.
template <class Rule, class Prob, int kThreads>
__global__ void __launch_bounds__(kThreads)
    walk_kernel(const Rule rule, const ChainBatch<Prob> batch, const KernelRandomness randomness,
                const std::int32_t row_width, Header* header, SequenceRecord* records) {
  __shared__ typename BlockRows<Prob, kThreads>::Shared shared;
  BlockRows<Prob, kThreads> rows(shared, batch.vocab_size);
  const auto b = static_cast<std::int32_t>(blockIdx.x);
  const Randomness r = randomness.resolve();
  SequenceRecord rec;  // the same in every thread; thread 0 stores it

  if (check_sequence<kThreads>(rule, batch, r, row_width, b, rows, rec)) {
    const auto source = core::ProbSource<Prob>::of(batch);
    rec.result = core::walk(rule, core::ChainLayout::of(batch), source, r, b, rows);
    core::Fault& f = rec.result.fault;
    if (f.kind != core::FaultKind::none) rec.issue = Issue::walk;
    if (f.kind == core::FaultKind::bad_value && f.column < 0) {
      // A row pass knows only that its rows hold a bad value: name the first one, as the host does.
      const Prob* target = f.target_row >= 0 ? source.target_row(b, f.target_row) : nullptr;
      const Prob* draft = f.draft_row >= 0 ? source.draft_row(b, f.draft_row) : nullptr;
      if (target) f.column = rows.first_invalid(target);
      if (f.column >= 0) {
        f.value = rows.value(target, f.column);
      } else if (draft) {
        f.column = rows.first_invalid(draft);
        f.target_row = -1;  // core::report then names the draft row
        if (f.column >= 0) f.value = rows.value(draft, f.column);
      }
    }
  }
  if (threadIdx.x != 0) return;
  if (rec.issue == Issue::none) {
    records[b].result = rec.result;
  } else {
    records[b] = rec;
    atomicMax(&header->first_fault, ~static_cast<unsigned int>(b));
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

/// One thread per sequence writes its output row and count and adds its share of VerifyStats,
/// unless the walk kernel recorded a fault anywhere: then nothing is written at all.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    write_kernel(const std::int32_t* offsets, const std::int32_t* draft_tokens,
                 const std::int32_t batch_size, const ChainOutput out, Header* header,
                 const SequenceRecord* records) {
  if (header->first_fault != 0) return;
  const std::int64_t b = std::int64_t{blockIdx.x} * kThreads + threadIdx.x;
  core::WalkResult r;  // zero counts for the threads past the batch
  if (b < batch_size) {
    r = records[b].result;
    const core::ChainLayout layout{offsets, draft_tokens};
    core::write_sequence(layout, static_cast<std::int32_t>(b), r, core::OutputRows::of(out), nullptr);
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
