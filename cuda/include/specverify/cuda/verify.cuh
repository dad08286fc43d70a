// verify() on CUDA: the CPU backend's semantics and tokens, on device pointers, without a sync.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "specverify/core/validate.hpp"
#include "specverify/cuda/verify_kernel.cuh"
#include "specverify/cuda/workspace.cuh"
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
  const float* accept_uniforms{};           // optional device [offsets[B]]
  const float* sample_uniforms{};           // optional device [B]
};

namespace detail {

inline constexpr int kBlockThreads = 256;

template <class Rule, class Prob>
cudaError_t launch(const Rule& rule, const ChainBatch<Prob>& batch,
                   const KernelRandomness& randomness, const ChainOutput& out,
                   const Workspace& workspace, cudaStream_t stream) {
  static_assert(std::is_same_v<Prob, float> || std::is_same_v<Prob, __half> ||
                    std::is_same_v<Prob, __nv_bfloat16>,
                "probabilities are float, __half or __nv_bfloat16");
  // What the host can check without reading device memory throws here, as on the CPU.
  core::validate_shape(rule, batch, out);
  core::detail::check_stride("target_stride", batch.target_stride, 0, batch);
  core::detail::check_stride("draft_stride", batch.draft_stride, 0, batch);
  const std::size_t needed = workspace_bytes(rule, batch);
  if (!workspace.data || workspace.bytes < needed) {
    core::detail::reject("workspace holds ", workspace.bytes, " bytes, workspace_bytes() = ", needed);
  }

  Header* h = header(workspace);
  if (const cudaError_t status = cudaMemsetAsync(h, 0, sizeof(Header), stream)) return status;
  const std::int32_t B = batch.batch_size;
  if (B == 0) return cudaSuccess;
  walk_kernel<Rule, Prob, kBlockThreads><<<B, kBlockThreads, 0, stream>>>(
      rule, batch, randomness, out.row_width, h, records(workspace));
  write_kernel<kBlockThreads><<<(B + kBlockThreads - 1) / kBlockThreads, kBlockThreads, 0, stream>>>(
      batch.draft_offsets, batch.draft_tokens, B, out, h, records(workspace));
  return cudaGetLastError();
}

}  // namespace detail

/// Verifies a batch of draft chains with `rule` on `stream`, all pointers on the device: writes
/// n_b accepted drafts, one more token and kNoToken padding per sequence, and the batch's
/// VerifyStats into the workspace (read_stats, device_stats). The tokens are the CPU backend's
/// for the same input. Never synchronises. Input the host can judge without reading device
/// memory (sizes, null pointers, strides, rule parameters, a small workspace) throws
/// invalid_input here; what lies in device memory (offsets, tokens, rows, uniforms, per-draft
/// rule inputs) is checked on the device, and a fault there writes no output at all and is
/// reported by check(). Returns the launch status.
///
///   specverify::ChainBatch<__half> batch{B, V, d_offsets, d_drafts, d_p, d_q};
///   specverify::ChainOutput out{d_tokens, K + 1, d_accepted};
///   specverify::cuda::Workspace ws{d_ws, specverify::cuda::workspace_bytes(rule, batch)};
///   specverify::cuda::verify(specverify::Standard{}, batch, {seed, step}, out, ws, stream);
///   specverify::cuda::check(ws, stream);  // optional: syncs, throws on bad input
template <class Rule, class Prob>
cudaError_t verify(const Rule& rule, const ChainBatch<Prob>& batch, const Randomness& randomness,
                   const ChainOutput& out, const Workspace& workspace, cudaStream_t stream) {
  return detail::launch(rule, batch, detail::KernelRandomness{randomness}, out, workspace, stream);
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
                   const Workspace& workspace, cudaStream_t stream) {
  if (!randomness.seed) core::detail::reject("device seed is null");
  if (!randomness.offset) core::detail::reject("device offset is null");
  Randomness values;
  values.sequence_seeds = randomness.sequence_seeds;
  values.accept_uniforms = randomness.accept_uniforms;
  values.sample_uniforms = randomness.sample_uniforms;
  return detail::launch(rule, batch, detail::KernelRandomness{values, randomness.seed, randomness.offset},
                        out, workspace, stream);
}

}  // namespace specverify::cuda
