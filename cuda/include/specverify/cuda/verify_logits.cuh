// verify() on CUDA over logits (LogitsChainBatch, LogitsTreeBatch, PaddedLogitsChainBatch): the CPU backend's semantics,
// tokens and messages (cpu/verify.hpp, core/validate_logits.hpp), on device pointers, without a
// sync. Three steps on the stream:
//   1. with a reduced draft vocabulary, the inverse map target_to_draft is built in the workspace
//      (every entry -1, then atomicMin of each draft id at its target id) and checked: an entry
//      outside [0, V) or a target id claimed by a lower draft id is a fault (the lowest such draft
//      id is named, as the CPU's in-order build names it);
//   2. one block per sequence checks its input with the shared validator (core::check_sequence
//      over the batch's probability shape, then the logits' own checks in core/validate_logits.hpp)
//      and walks it with core::walk over core::LogitSource and BlockLogitRows, staging logprobs;
//   3. verify_kernel.cuh's write_kernel writes the outputs, only if nothing was found anywhere.
// Findings are core::Findings in the probability path's records, ranked alike, so check() throws
// the one the CPU throws, in its words; what the host can check (pointers, sizes, strides against
// V, the workspace) throws from verify() itself, before the device's checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "specverify/core/checks.hpp"
#include "specverify/core/logit_source.hpp"
#include "specverify/core/padded_chain.hpp"
#include "specverify/core/validate.hpp"
#include "specverify/core/validate_logits.hpp"
#include "specverify/core/walk.hpp"
#include "specverify/cuda/block_logit_rows.cuh"
#include "specverify/cuda/verify.cuh"
#include "specverify/cuda/verify_kernel.cuh"
#include "specverify/cuda/workspace.cuh"
#include "specverify/sampling.hpp"
#include "specverify/types.hpp"

namespace specverify::cuda {

namespace detail {

/// A logits verify's batch-wide word, in the workspace's header block after the Header (which
/// every verify resets).
struct LogitsState {
  unsigned int map_fault;  // ~(lowest faulting draft id) (atomicMax), 0: none
};
inline constexpr std::size_t kStateOffset = 128;
static_assert(sizeof(Header) <= kStateOffset && kStateOffset + sizeof(LogitsState) <= kAlign,
              "the logits word fits between the header and the records");

inline LogitsState* logits_state(const Workspace& w) {
  return reinterpret_cast<LogitsState*>(static_cast<char*>(w.data) + kStateOffset);
}

/// The workspace of a logits verify: header, records, staged logprobs (as verify.cuh lays them
/// out), then the inverse draft map ([V] int32, with a reduced draft vocabulary).
template <class Batch>
std::size_t map_offset(const Batch& batch, std::int32_t row_width, bool logprobs) {
  const std::size_t B = batch.batch_size > 0 ? std::size_t(batch.batch_size) : 0;
  const std::size_t staged = logprobs && row_width > 0 ? B * std::size_t(row_width) * sizeof(float) : 0;
  return kAlign + records_bytes(batch.batch_size) + aligned(staged);
}
template <class Batch>
std::size_t map_bytes(const Batch& batch) {
  return batch.draft_vocab_size > 0 && batch.vocab_size > 0
             ? aligned(std::size_t(batch.vocab_size) * sizeof(std::int32_t))
             : 0;
}

// ------------------------------------------------------------------ the inverse draft map

/// target_to_draft[draft_to_target[d]] = the lowest such d (entries start at -1 = UINT_MAX).
__global__ void scatter_draft_map(const std::int32_t* draft_to_target, std::int32_t draft_vocab_size,
                                  std::int32_t vocab_size, std::int32_t* target_to_draft) {
  const std::int64_t d = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (d >= draft_vocab_size) return;
  const std::int32_t v = draft_to_target[d];
  if (v >= 0 && v < vocab_size) {
    atomicMin(reinterpret_cast<unsigned int*>(target_to_draft + v), static_cast<unsigned int>(d));
  }
}

/// Records the lowest draft id whose entry is out of range or claimed by a lower draft id.
__global__ void check_draft_map(const std::int32_t* draft_to_target, std::int32_t draft_vocab_size,
                                std::int32_t vocab_size, const std::int32_t* target_to_draft,
                                LogitsState* state) {
  const std::int64_t d = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (d >= draft_vocab_size) return;
  const std::int32_t v = draft_to_target[d];
  if (v < 0 || v >= vocab_size || target_to_draft[v] != d) {
    atomicMax(&state->map_fault, ~static_cast<unsigned int>(d));
  }
}

/// The logits' own checks for sequence b, after check_sequence found nothing: its sampling
/// parameters, the draft rows' stride and the draft map (sequence 0 reports those), its guidance.
/// Clears `walkable` on any finding in the batch that makes b's rows unsafe to read.
template <class Batch>
__device__ core::Finding check_logit_inputs(const Batch& batch, std::int64_t draft_rows, std::int32_t b,
                                            const LogitsState* state, bool& walkable) {
  for (int draft = 0; draft < 2; ++draft) {
    if (draft && !batch.draft_params) break;
    const SamplingParams& params = draft ? batch.draft_params[b] : batch.target_params[b];
    if (const Problem problem = check_sampling_params(params)) {
      walkable = false;
      return core::detail::params_finding(problem, draft != 0, b);
    }
  }
  if (core::Finding f = core::detail::check_draft_rows(batch, draft_rows)) {
    walkable = false;
    return b == 0 ? f : core::Finding{};
  }
  if (state->map_fault != 0) {
    walkable = false;
    if (b != 0) return {};
    const auto d = static_cast<std::int32_t>(~state->map_fault);
    return core::detail::draft_map_finding(d, batch.draft_to_target[d], batch.vocab_size);
  }
  if (batch.unconditional_logits) {
    const float scale = batch.unconditional_first_row[b] >= 0 ? batch.guidance_scale[b] : 0.0f;
    if (core::Finding f = core::detail::guidance_finding(batch.unconditional_first_row[b], scale, b,
                                                         core::detail::sequence_rows(batch, b),
                                                         batch.unconditional_stride, batch.vocab_size)) {
      walkable = false;
      return f;
    }
  }
  if (core::Finding f = core::detail::penalty_lists_finding(batch, b)) {
    walkable = false;
    return f;
  }
  if (b != 0 && core::detail::penalty_lists_finding(batch, 0)) walkable = false;  // sequence 0 reports the lists' own facts
  return {};
}

/// Sequence b's lowest bias token entered twice, named as the CPU names it: threads split the
/// entries (each compared with those before it), a block minimum picks the token.
template <class Rows, class Batch>
__device__ core::Finding bias_twice(Rows& rows, const Batch& batch, std::int32_t b) {
  if (!batch.bias_offsets) return {};
  const std::int32_t first = batch.bias_offsets[b], size = batch.bias_offsets[b + 1] - first;
  const std::int32_t* tokens = batch.bias_tokens + first;
  int lowest = INT_MAX;
  for (std::int32_t k = threadIdx.x; k < size; k += blockDim.x) {
    for (std::int32_t j = 0; j < k; ++j) {
      if (tokens[j] == tokens[k]) {
        lowest = tokens[k] < lowest ? tokens[k] : lowest;
        break;
      }
    }
  }
  lowest = rows.min(lowest);
  if (lowest == INT_MAX) return {};
  std::int32_t entries[2] = {-1, -1}, found = 0;
  for (std::int32_t k = 0; k < size && found < 2; ++k) {
    if (tokens[k] == lowest) entries[found++] = k;
  }
  return core::detail::bias_twice_finding(b, lowest, first + entries[1], first + entries[0]);
}

/// One block per sequence: check its input, walk it, keep the outcome in its record (and its
/// logprobs in the staging rows), as verify_kernel.cuh's walk_kernel does for probabilities.
template <class Rule, class Batch, int kThreads>
__global__ void __launch_bounds__(kThreads)
    logits_walk_kernel(const Rule rule, const Batch batch, const KernelRandomness randomness,
                       const std::int32_t row_width, const std::int32_t* target_to_draft,
                       Header* header, const LogitsState* state, SequenceRecord* records, float* staging) {
  using Logit = std::remove_cv_t<std::remove_pointer_t<decltype(batch.target_logits)>>;
  using Rows = BlockLogitRows<Logit, kThreads>;
  __shared__ typename Rows::Shared shared;
  Rows rows(shared, batch.vocab_size);
  BlockItems<Rows, kThreads> items{rows};
  const auto b = static_cast<std::int32_t>(blockIdx.x);
  const Randomness r = randomness.resolve();
  const auto shape = core::detail::probability_shape(batch);
  using Checks = core::BatchChecks<std::remove_cv_t<decltype(shape)>>;

  bool walkable = false;
  core::Finding finding = core::check_sequence(rule, shape, r, row_width, b, items, walkable);
  if (walkable) finding = check_logit_inputs(batch, core::detail::draft_rows(batch), b, state, walkable);
  if (walkable) {
    finding = bias_twice(rows, batch, b);
    walkable = !finding;
  }
  core::WalkResult result;
  if (walkable) {
    const auto source = core::LogitSource<Logit>::of(batch, Checks::offsets(shape), target_to_draft);
    // Every thread walks alike and stages the same logprobs: the joint walks (Block, Traversal)
    // open rows for them, and an open is a block operation every thread must enter.
    float* stage = staging ? staging + std::int64_t{b} * row_width : nullptr;
    result = core::walk(rule, Checks::Layout::of(shape), source, r, b, rows, stage);
    if (result.fault.kind != core::FaultKind::none) {
      // A row's pre-pass knows only that it read a bad logit: name the first, as the host does.
      core::name_bad_value(result.fault, b, source, [&](const core::LogitRow<Logit>& row, float& value) {
        const std::int32_t column = rows.first_invalid(row);
        if (column >= 0) value = static_cast<float>(row.logits[column]);
        return column;
      });
      finding = core::detail::logits_fault_finding(result.fault, b, Checks::kItem);
      core::detail::name_guidance_fault(finding, result.fault, b, source);
      core::detail::name_penalty_fault(finding, result.fault, b, source);
    }
  }
  if (threadIdx.x != 0) return;
  records[b].result = result;
  if (finding) {
    records[b].finding = finding;
    atomicMax(&header->first_fault, ~static_cast<unsigned long long>(finding.rank()));
  }
}

// ------------------------------------------------------------------ host side

/// The logits fields the host can check (core::detail::check_logits without its reads), in the
/// CPU's words.
template <class Batch>
void check_logits_shape(const Batch& batch) {
  using core::detail::reject;
  if (batch.batch_size == 0) return;
  if (!batch.target_params) reject("target_params is null");
  if (batch.draft_vocab_size < 0) reject("draft_vocab_size = ", batch.draft_vocab_size, " must be >= 0");
  const std::int64_t draft_v = batch.draft_vocab_size > 0 ? batch.draft_vocab_size : batch.vocab_size;
  if (batch.draft_stride != 0 && batch.draft_stride < draft_v) {
    reject("draft_stride = ", batch.draft_stride, " must be 0 or at least the draft vocabulary size = ", draft_v);
  }
  if (batch.draft_vocab_size > 0 && !batch.draft_to_target) {
    reject("draft_to_target is null (draft_vocab_size = ", batch.draft_vocab_size, ")");
  }
  if (batch.unconditional_logits) {
    if (!batch.unconditional_first_row) reject("unconditional_first_row is null (guidance rows are given)");
    if (!batch.guidance_scale) reject("guidance_scale is null (guidance rows are given)");
    if (batch.unconditional_stride != 0 && batch.unconditional_stride < batch.vocab_size) {
      reject("unconditional_stride = ", batch.unconditional_stride, " must be 0 or at least vocab_size = ",
             batch.vocab_size);
    }
  }
}

template <class Rule, class Batch, class Output>
cudaError_t launch_logits(const Rule& rule, const Batch& batch, const KernelRandomness& randomness,
                          const Output& out, const Workspace& workspace, cudaStream_t stream) {
  using Logit = std::remove_cv_t<std::remove_pointer_t<decltype(batch.target_logits)>>;
  static_assert(std::is_same_v<Logit, float> || std::is_same_v<Logit, __half> ||
                    std::is_same_v<Logit, __nv_bfloat16>,
                "logits are float, __half or __nv_bfloat16");
  core::detail::check_logits_vocab(batch.vocab_size);
  if (batch.batch_size > 0 && !batch.target_logits) core::detail::reject("target_logits is null");
  const auto shape = core::detail::probability_shape(batch);
  core::validate_shape(rule, shape, out);
  core::check_positions<Rule>(randomness.values);
  check_logits_shape(batch);
  const std::size_t needed = map_offset(batch, out.row_width, out.logprobs != nullptr) + map_bytes(batch);
  if (!workspace.data || workspace.bytes < needed) {
    core::raise(core::batch_finding(core::Check::workspace, core::Stage::shape)
                    .ints(static_cast<std::int64_t>(workspace.bytes), static_cast<std::int64_t>(needed)));
  }

  Header* h = header(workspace);
  if (const cudaError_t status = cudaMemsetAsync(h, 0, kAlign, stream)) return status;
  const std::int32_t B = batch.batch_size;
  if (B == 0) return cudaSuccess;
  std::int32_t* target_to_draft = nullptr;
  if (batch.draft_vocab_size > 0) {
    constexpr int kMapThreads = 256;
    target_to_draft = reinterpret_cast<std::int32_t*>(static_cast<char*>(workspace.data) +
                                                      map_offset(batch, out.row_width, out.logprobs != nullptr));
    const auto blocks = static_cast<unsigned>((std::int64_t{batch.draft_vocab_size} + kMapThreads - 1) / kMapThreads);
    if (const cudaError_t status = cudaMemsetAsync(
            target_to_draft, 0xff, std::size_t(batch.vocab_size) * sizeof(std::int32_t), stream)) {
      return status;
    }
    scatter_draft_map<<<blocks, kMapThreads, 0, stream>>>(batch.draft_to_target, batch.draft_vocab_size,
                                                          batch.vocab_size, target_to_draft);
    check_draft_map<<<blocks, kMapThreads, 0, stream>>>(batch.draft_to_target, batch.draft_vocab_size,
                                                        batch.vocab_size, target_to_draft, logits_state(workspace));
  }
  float* staged = out.logprobs ? staging(workspace, B) : nullptr;
  logits_walk_kernel<Rule, Batch, kBlockThreads><<<B, kBlockThreads, 0, stream>>>(
      rule, batch, randomness, out.row_width, target_to_draft, h, logits_state(workspace), records(workspace),
      staged);
  using Checks = core::BatchChecks<std::remove_cv_t<decltype(shape)>>;
  write_kernel<kBlockThreads><<<(B + kBlockThreads - 1) / kBlockThreads, kBlockThreads, 0, stream>>>(
      Checks::Layout::of(shape), B, core::OutputRows::of(out), staged, h, records(workspace));
  return cudaGetLastError();
}

}  // namespace detail

/// Device bytes verify() needs for this rule and batch of logits and this output: verify.cuh's
/// (a header, one record per sequence, [B][row_width] floats to stage logprobs when out.logprobs
/// is set) and the inverse draft map ([V] int32, with a reduced draft vocabulary).
template <class Rule, class Logit>
std::size_t workspace_bytes(const Rule&, const LogitsChainBatch<Logit>& batch, const ChainOutput& out) {
  return detail::map_offset(batch, out.row_width, out.logprobs != nullptr) + detail::map_bytes(batch);
}
template <class Rule, class Logit>
std::size_t workspace_bytes(const Rule&, const LogitsTreeBatch<Logit>& batch, const TreeOutput& out) {
  return detail::map_offset(batch, out.row_width, out.logprobs != nullptr) + detail::map_bytes(batch);
}
/// The bytes for outputs without logprobs.
template <class Rule, class Logit>
std::size_t workspace_bytes(const Rule& rule, const LogitsChainBatch<Logit>& batch) {
  return workspace_bytes(rule, batch, ChainOutput{});
}
template <class Rule, class Logit>
std::size_t workspace_bytes(const Rule& rule, const LogitsTreeBatch<Logit>& batch) {
  return workspace_bytes(rule, batch, TreeOutput{});
}

/// Verifies a batch of draft chains given as logits on `stream`, all pointers on the device: each
/// sequence's sampling parameters (guidance, bitmask, reduced draft vocabulary) are applied row by
/// row as docs/api.md's nine steps say, with the CPU backend's tokens. Never synchronises; what lies in
/// device memory (offsets, tokens, parameters, the draft map, logits, uniforms) is checked on the
/// device, and a fault there writes no output and is reported by check() in the CPU's words.
///
///   specverify::LogitsChainBatch<__nv_bfloat16> batch{B, V, d_offsets, d_drafts, d_target, d_draft};
///   batch.target_params = d_params;
///   std::size_t bytes = specverify::cuda::workspace_bytes(rule, batch, out);
///   specverify::cuda::verify(rule, batch, {seed, step}, out, {d_ws, bytes}, stream);
///   specverify::cuda::check({d_ws, bytes}, stream);  // optional: syncs, throws on bad input
template <class Rule, class Logit>
cudaError_t verify(const Rule& rule, const LogitsChainBatch<Logit>& batch, const Randomness& randomness,
                   const ChainOutput& out, const Workspace& workspace, cudaStream_t stream) {
  return detail::launch_logits(rule, batch, detail::KernelRandomness{randomness}, out, workspace, stream);
}

/// As above, with seed and offset read from device memory when the kernel runs (CUDA graphs).
template <class Rule, class Logit>
cudaError_t verify(const Rule& rule, const LogitsChainBatch<Logit>& batch, const DeviceRandomness& randomness,
                   const ChainOutput& out, const Workspace& workspace, cudaStream_t stream) {
  return detail::launch_logits(rule, batch, detail::from_device(randomness), out, workspace, stream);
}

/// As above, over padded chains of logits (core/padded_chain.hpp): sequence b walks its first
/// num_draft_tokens[b] drafts, which stay in their slots; the counts are read and checked on the
/// device like the offsets (Python's specverify.padded with params= on CUDA tensors).
template <class Rule, class Logit>
cudaError_t verify(const Rule& rule, const core::PaddedLogitsChainBatch<Logit>& batch, const Randomness& randomness,
                   const ChainOutput& out, const Workspace& workspace, cudaStream_t stream) {
  return detail::launch_logits(rule, batch, detail::KernelRandomness{randomness}, out, workspace, stream);
}

/// Verifies a batch of draft trees given as logits (LogitsChainBatch's parameters, TreeBatch's
/// layout).
template <class Rule, class Logit>
cudaError_t verify(const Rule& rule, const LogitsTreeBatch<Logit>& batch, const Randomness& randomness,
                   const TreeOutput& out, const Workspace& workspace, cudaStream_t stream) {
  detail::require_tree_form<Rule>();
  return detail::launch_logits(rule, batch, detail::KernelRandomness{randomness}, out, workspace, stream);
}

/// Trees of logits with seed and offset read from device memory when the kernel runs.
template <class Rule, class Logit>
cudaError_t verify(const Rule& rule, const LogitsTreeBatch<Logit>& batch, const DeviceRandomness& randomness,
                   const TreeOutput& out, const Workspace& workspace, cudaStream_t stream) {
  detail::require_tree_form<Rule>();
  return detail::launch_logits(rule, batch, detail::from_device(randomness), out, workspace, stream);
}

}  // namespace specverify::cuda
