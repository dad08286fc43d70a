// The CUDA backend's workspace: caller-owned device memory where verify() leaves what the host
// reads afterwards (the first finding, the batch's VerifyStats) and stages the logprobs until the
// whole batch is known to be valid; and the host functions that read it (check, read_stats).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "specverify/core/checks.hpp"
#include "specverify/core/validate.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/types.hpp"

namespace specverify::cuda {

/// Device memory for verify(), owned by the caller: at least workspace_bytes() bytes, aligned as
/// cudaMalloc aligns. One verify at a time per workspace (check() reads the last one's findings).
struct Workspace {
  void* data{};
  std::size_t bytes = 0;
};

namespace detail {

/// One sequence's outcome: its walk, or what the shared checks (core/checks.hpp) or its walk
/// found. Only block b writes record b, so no two blocks race.
struct SequenceRecord {
  core::WalkResult result;
  core::Finding finding;
};

/// Start of the workspace: reset by every verify before its kernels run.
struct Header {
  unsigned long long first_fault;  // ~rank of the first finding (atomicMax; rank's low word is
                                   //   the record), 0: none
  VerifyStats stats;               // accumulated by the output kernel when nothing was found
};

inline constexpr std::size_t kAlign = 256;  // keeps each part's alignment generous
inline constexpr std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
static_assert(sizeof(Header) <= kAlign, "the header fits before the records");

inline std::size_t records_bytes(std::int32_t batch_size) {
  return aligned((batch_size > 0 ? std::size_t(batch_size) : 0) * sizeof(SequenceRecord));
}

inline Header* header(const Workspace& w) { return static_cast<Header*>(w.data); }
inline SequenceRecord* records(const Workspace& w) {
  return reinterpret_cast<SequenceRecord*>(static_cast<char*>(w.data) + kAlign);
}
/// [B][row_width] logprobs of the walks, copied to the output only once nothing was found.
inline float* staging(const Workspace& w, std::int32_t batch_size) {
  return reinterpret_cast<float*>(static_cast<char*>(w.data) + kAlign + records_bytes(batch_size));
}

inline void throw_on_error(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("specverify::cuda::") + what + ": " +
                             cudaGetErrorString(status));
  }
}

}  // namespace detail

/// Device bytes verify() needs for this rule, batch and output: a header, one record per sequence,
/// and [B][row_width] floats to stage logprobs when out.logprobs is set.
///
///   std::size_t bytes = specverify::cuda::workspace_bytes(rule, batch, out);
///   void* data;  cudaMalloc(&data, bytes);
///   specverify::cuda::Workspace workspace{data, bytes};
template <class Rule, class Batch, class Output>
std::size_t workspace_bytes(const Rule&, const Batch& batch, const Output& out) {
  const std::size_t staged = out.logprobs && batch.batch_size > 0 && out.row_width > 0
                                 ? std::size_t(batch.batch_size) * std::size_t(out.row_width) * sizeof(float)
                                 : 0;
  return detail::kAlign + detail::records_bytes(batch.batch_size) + staged;
}

/// The bytes for outputs without logprobs.
template <class Rule, class Prob>
std::size_t workspace_bytes(const Rule& rule, const ChainBatch<Prob>& batch) {
  return workspace_bytes(rule, batch, ChainOutput{});
}
template <class Rule, class Prob>
std::size_t workspace_bytes(const Rule& rule, const TreeBatch<Prob>& batch) {
  return workspace_bytes(rule, batch, TreeOutput{});
}

/// Waits for `stream` and throws invalid_input if the last verify() on this workspace found bad
/// input (then it wrote no output). The message is the one the CPU backend gives for the same
/// input: the first finding in core/checks.hpp's order. A CUDA error on the stream throws
/// std::runtime_error.
///
///   specverify::cuda::verify(rule, batch, randomness, out, workspace, stream);
///   specverify::cuda::check(workspace, stream);  // where the engine can afford a sync
inline void check(const Workspace& workspace, cudaStream_t stream) {
  detail::Header h;
  detail::throw_on_error(
      cudaMemcpyAsync(&h, workspace.data, sizeof h, cudaMemcpyDeviceToHost, stream), "check");
  detail::throw_on_error(cudaStreamSynchronize(stream), "check");
  if (h.first_fault == 0) return;
  const auto b = static_cast<std::uint32_t>(~h.first_fault);
  detail::SequenceRecord r;
  detail::throw_on_error(cudaMemcpyAsync(&r, detail::records(workspace) + b, sizeof r,
                                         cudaMemcpyDeviceToHost, stream),
                         "check");
  detail::throw_on_error(cudaStreamSynchronize(stream), "check");
  core::raise(r.finding);
}

/// The last verify()'s statistics where device code can read them (all zero after a fault);
/// valid once that verify has run on its stream, until the next verify on this workspace.
inline const VerifyStats* device_stats(const Workspace& workspace) {
  return &detail::header(workspace)->stats;
}

/// Waits for `stream` and returns the last verify()'s statistics (all zero after a fault).
inline VerifyStats read_stats(const Workspace& workspace, cudaStream_t stream) {
  VerifyStats s;
  detail::throw_on_error(cudaMemcpyAsync(&s, device_stats(workspace), sizeof s,
                                         cudaMemcpyDeviceToHost, stream),
                         "read_stats");
  detail::throw_on_error(cudaStreamSynchronize(stream), "read_stats");
  return s;
}

}  // namespace specverify::cuda
