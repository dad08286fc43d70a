// verify() on CUDA: the CPU backend's semantics and tokens, on device pointers, without a sync.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "specverify/core/checks.hpp"
#include "specverify/core/padded_chain.hpp"
#include "specverify/core/validate.hpp"
#include "specverify/core/validate_logits.hpp"
#include "specverify/cuda/verify_kernel.cuh"
#include "specverify/cuda/workspace.cuh"
#include "specverify/rule.hpp"
#include "specverify/types.hpp"

namespace specverify::cuda {

/// Randomness whose seed and offset live in device memory and are read when the kernel runs, so
/// a step captured in a CUDA graph replays with whatever the engine has written there since (an
/// offset advanced by a kernel or a cudaMemcpyAsync before each replay). The other members are
/// those of Randomness, on the device. Both pointers are required.
struct DeviceRandomness {
  const std::uint64_t* seed{};              // device [1]
  const std::uint64_t* offset{};            // device [1]: advance between steps
  const std::uint64_t* sequence_seeds{};    // optional device [B]
  const float* accept_uniforms{};           // optional device [drafts or nodes]
  const float* sample_uniforms{};           // optional device [B]
  const std::int64_t* positions{};          // device [B]: absolute position of sequence b's first
                                            //   draft (Coupled keys its samples by it)
};

/// How cuda::verify spreads a batch over the GPU. The outputs are the same bits for every choice.
///   blocks_per_row 0: chosen by the batch: where the GPU and the kernels have thread block
///     clusters (compute capability 9.0 and later, built for it), a batch of fewer sequences than
///     the GPU has multiprocessors spreads each sequence's rows over 2, 4 or 8 blocks (a cluster),
///     doubling while the blocks stay within two per multiprocessor, so that small batches use
///     the whole GPU; elsewhere one block per sequence.
///   1: one block per sequence; 2 .. 8: that many where clusters exist (else 1).
/// Rows of logits take one block per sequence for now.
struct Launch {
  std::int32_t blocks_per_row = 0;
};

namespace detail {

inline constexpr int kBlockThreads = 256;
inline constexpr int kMaxBlocksPerRow = 8;  // the portable cluster size

/// The blocks per row a launch of `kernel` over B sequences takes (Launch's rule).
template <class Kernel>
cudaError_t blocks_per_row(Kernel* kernel, std::int32_t B, const Launch& launch, int& blocks) {
  blocks = 1;
  if (launch.blocks_per_row == 1) return cudaSuccess;
  int device = 0, major = 0, sms = 0;
  if (const cudaError_t e = cudaGetDevice(&device)) return e;
  if (const cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device)) return e;
  if (const cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) return e;
  cudaFuncAttributes attributes{};
  if (const cudaError_t e = cudaFuncGetAttributes(&attributes, kernel)) return e;
  if (major < 9 || attributes.ptxVersion < 90) return cudaSuccess;  // built without clusters
  if (launch.blocks_per_row > 1) {
    blocks = launch.blocks_per_row;
    return cudaSuccess;
  }
  while (blocks < kMaxBlocksPerRow && std::int64_t{blocks} * B <= sms) blocks *= 2;
  return cudaSuccess;
}

inline KernelRandomness from_device(const DeviceRandomness& randomness) {
  core::raise_if(core::check_pointer(randomness.seed, "device seed"));
  core::raise_if(core::check_pointer(randomness.offset, "device offset"));
  Randomness values;
  values.sequence_seeds = randomness.sequence_seeds;
  values.accept_uniforms = randomness.accept_uniforms;
  values.sample_uniforms = randomness.sample_uniforms;
  values.positions = randomness.positions;
  return KernelRandomness{values, randomness.seed, randomness.offset};
}

/// Checks what the host can judge, then launches the walk and the write for any batch kind.
template <class Rule, class Batch, class Output>
cudaError_t launch(const Rule& rule, const Batch& batch, const KernelRandomness& randomness,
                   const Output& out, const Workspace& workspace, cudaStream_t stream,
                   const Launch& spread) {
  using Prob = std::remove_cv_t<std::remove_pointer_t<decltype(batch.target_probs)>>;
  static_assert(std::is_same_v<Prob, float> || std::is_same_v<Prob, __half> ||
                    std::is_same_v<Prob, __nv_bfloat16>,
                "probabilities are float, __half or __nv_bfloat16");
  // What the host can check without reading device memory throws here, as on the CPU.
  core::validate_shape(rule, batch, out);
  core::check_positions<Rule>(randomness.values);
  if (spread.blocks_per_row < 0 || spread.blocks_per_row > kMaxBlocksPerRow) {
    core::detail::reject("blocks_per_row = ", spread.blocks_per_row, " must be in [0, ", kMaxBlocksPerRow,
                         "] (0: chosen by the batch)");
  }
  const std::size_t needed = workspace_bytes(rule, batch, out);
  if (!workspace.data || workspace.bytes < needed) {
    core::raise(core::batch_finding(core::Check::workspace, core::Stage::shape)
                    .ints(static_cast<std::int64_t>(workspace.bytes), static_cast<std::int64_t>(needed)));
  }

  Header* h = header(workspace);
  if (const cudaError_t status = cudaMemsetAsync(h, 0, sizeof(Header), stream)) return status;
  const std::int32_t B = batch.batch_size;
  if (B == 0) return cudaSuccess;
  float* staged = out.logprobs ? staging(workspace, B) : nullptr;
  const auto walk = walk_kernel<Rule, Batch, kBlockThreads>;
  int blocks = 1;
  if (const cudaError_t status = blocks_per_row(walk, B, spread, blocks)) return status;
  if (blocks == 1) {
    walk<<<B, kBlockThreads, 0, stream>>>(rule, batch, randomness, 1, out.row_width, staged, h,
                                          records(workspace));
  } else {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(B) * static_cast<unsigned>(blocks));
    config.blockDim = dim3(kBlockThreads);
    config.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = static_cast<unsigned>(blocks);
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    if (const cudaError_t status = cudaLaunchKernelEx(&config, walk, rule, batch, randomness, blocks,
                                                      out.row_width, staged, h, records(workspace))) {
      return status;
    }
  }
  write_kernel<kBlockThreads><<<(B + kBlockThreads - 1) / kBlockThreads, kBlockThreads, 0, stream>>>(
      core::BatchChecks<Batch>::Layout::of(batch), B, core::OutputRows::of(out), staged, h,
      records(workspace));
  return cudaGetLastError();
}

template <class Rule>
constexpr void require_tree_form() {
  static_assert(!specverify::detail::has_cut<Rule>::value,
                "a rule that cuts chains (SpecDecPP) decides chain lengths: it has no tree form");
}

}  // namespace detail

/// Verifies a batch of draft chains with `rule` on `stream`, all pointers on the device: writes
/// n_b accepted drafts, one more token and kNoToken padding per sequence (and logprobs where
/// out.logprobs is set), and the batch's VerifyStats into the workspace (read_stats,
/// device_stats). The tokens are the CPU backend's for the same input. Never synchronises. Input
/// the host can judge without reading device memory (sizes, null pointers, strides, rule
/// parameters, a small workspace) throws invalid_input here; what lies in device memory (offsets,
/// tokens, rows, uniforms, per-draft rule inputs) is checked on the device by the CPU's checks,
/// and a fault there writes no output at all and is reported by check() in the CPU's words.
/// Returns the launch status.
///
///   specverify::ChainBatch<__half> batch{B, V, d_offsets, d_drafts, d_p, d_q};
///   specverify::ChainOutput out{d_tokens, K + 1, d_accepted};
///   specverify::cuda::Workspace ws{d_ws, specverify::cuda::workspace_bytes(rule, batch, out)};
///   specverify::cuda::verify(specverify::Standard{}, batch, {seed, step}, out, ws, stream);
///   specverify::cuda::check(ws, stream);  // optional: syncs, throws on bad input
template <class Rule, class Prob>
cudaError_t verify(const Rule& rule, const ChainBatch<Prob>& batch, const Randomness& randomness,
                   const ChainOutput& out, const Workspace& workspace, cudaStream_t stream,
                   const Launch& launch = {}) {
  return detail::launch(rule, batch, detail::KernelRandomness{randomness}, out, workspace, stream, launch);
}

/// As above, with seed and offset read from device memory when the kernel runs (CUDA graphs).
///
///   specverify::cuda::DeviceRandomness r{d_seed, d_offset};
///   cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
///   specverify::cuda::verify(rule, batch, r, out, ws, stream);
///   cudaStreamEndCapture(stream, &graph);  // replays read *d_seed and *d_offset afresh
template <class Rule, class Prob>
cudaError_t verify(const Rule& rule, const ChainBatch<Prob>& batch,
                   const DeviceRandomness& randomness, const ChainOutput& out,
                   const Workspace& workspace, cudaStream_t stream, const Launch& launch = {}) {
  return detail::launch(rule, batch, detail::from_device(randomness), out, workspace, stream, launch);
}

/// As above, over padded chains (core/padded_chain.hpp): sequence b walks its first
/// num_draft_tokens[b] drafts, which stay in their slots; the counts are read and checked on the
/// device like the offsets (Python's specverify.padded on CUDA tensors).
template <class Rule, class Prob>
cudaError_t verify(const Rule& rule, const core::PaddedChainBatch<Prob>& batch, const Randomness& randomness,
                   const ChainOutput& out, const Workspace& workspace, cudaStream_t stream,
                   const Launch& launch = {}) {
  return detail::launch(rule, batch, detail::KernelRandomness{randomness}, out, workspace, stream, launch);
}

/// Verifies a batch of draft trees with `rule` on `stream`, as the CPU's verify over TreeBatch
/// (docs/api.md "Trees") with the same tokens, and with the chains' device semantics above: the
/// accepted path's tokens (and accepted_nodes, logprobs where set), one more token, kNoToken
/// padding; bad parent links, tokens, uniforms or a row_width below a path are found on the
/// device and reported by check().
///
///   specverify::TreeBatch<float> batch{B, V, d_node_offsets, d_parents, d_drafts, d_p, d_q};
///   batch.drafted = specverify::Drafted::sampled;
///   specverify::TreeOutput out{d_tokens, depth + 1, d_accepted, d_accepted_nodes};
///   specverify::cuda::Workspace ws{d_ws, specverify::cuda::workspace_bytes(rule, batch, out)};
///   specverify::cuda::verify(specverify::Standard{}, batch, {seed, step}, out, ws, stream);
template <class Rule, class Prob>
cudaError_t verify(const Rule& rule, const TreeBatch<Prob>& batch, const Randomness& randomness,
                   const TreeOutput& out, const Workspace& workspace, cudaStream_t stream,
                   const Launch& launch = {}) {
  detail::require_tree_form<Rule>();
  return detail::launch(rule, batch, detail::KernelRandomness{randomness}, out, workspace, stream, launch);
}

/// Trees with seed and offset read from device memory when the kernel runs (CUDA graphs).
template <class Rule, class Prob>
cudaError_t verify(const Rule& rule, const TreeBatch<Prob>& batch,
                   const DeviceRandomness& randomness, const TreeOutput& out,
                   const Workspace& workspace, cudaStream_t stream, const Launch& launch = {}) {
  detail::require_tree_form<Rule>();
  return detail::launch(rule, batch, detail::from_device(randomness), out, workspace, stream, launch);
}

}  // namespace specverify::cuda
