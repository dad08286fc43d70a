// The CUDA backend's workspace: caller-owned device memory where verify() leaves what the host
// reads afterwards (the first fault found, the batch's VerifyStats), and the host functions that
// read it (check, read_stats).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "specverify/core/validate.hpp"
#include "specverify/core/walk.hpp"
#include "specverify/types.hpp"

namespace specverify::cuda {

/// Device memory for verify(), owned by the caller: at least workspace_bytes() bytes, aligned as
/// cudaMalloc aligns. One verify at a time per workspace (check() reads the last one's faults).
struct Workspace {
  void* data{};
  std::size_t bytes = 0;
};

namespace detail {

/// What the device found wrong with a sequence's input before walking it; `walk` defers to the
/// walk's core::Fault. Messages are worded as core::validate words them.
enum class Issue : std::uint8_t {
  none,
  offsets_start,     // draft_offsets[0] != 0                     (a: offsets[0])
  rows_overflow,     // draft_offsets[B] + B > INT32_MAX           (a: that sum)
  stride_overflow,   // stride * rows overflows int64              (a: stride, c: rows, what: name)
  draft_tokens_null, // draft tokens needed but null
  offsets_decrease,  // offsets[b + 1] < offsets[b]                (a, c: the two offsets)
  row_width,         // k_b + 1 > row_width                        (a: row_width, c: k_b + 1)
  sample_uniform,    // sample_uniforms[b] outside [0, 1)          (value)
  draft_token,       // token outside [0, V)                       (a: token, c: V)
  accept_uniform,    // accept_uniforms[g] outside [0, 1)          (value)
  rule_draft,        // rule.check_draft(g) found a problem        (what, value)
  walk,              // see result.fault
};

/// One sequence's outcome. Only the sequence that faulted writes its issue, so no two blocks race.
struct SequenceRecord {
  core::WalkResult result;
  Issue issue = Issue::none;
  std::int32_t position = 0;
  std::int64_t a = 0, c = 0;
  double value = 0;
  char what[48] = {};
};

/// Start of the workspace: reset by every verify before its kernels run.
struct Header {
  unsigned int first_fault;  // ~b of the lowest faulting sequence b (atomicMax), 0: no fault
  unsigned int unused;
  VerifyStats stats;         // accumulated by the output kernel when no fault was found
};

inline constexpr std::size_t kRecordsOffset = 256;  // keeps the records' alignment generous
static_assert(sizeof(Header) <= kRecordsOffset, "header fits before the records");

inline Header* header(const Workspace& w) { return static_cast<Header*>(w.data); }
inline SequenceRecord* records(const Workspace& w) {
  return reinterpret_cast<SequenceRecord*>(static_cast<char*>(w.data) + kRecordsOffset);
}

inline void throw_on_error(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("specverify::cuda::") + what + ": " +
                             cudaGetErrorString(status));
  }
}

/// Throws the invalid_input that describes sequence b's record.
[[noreturn]] inline void report(const SequenceRecord& r, std::int32_t b) {
  using core::detail::reject;
  switch (r.issue) {
    case Issue::offsets_start: reject("draft_offsets[0] = ", r.a, " must be 0");
    case Issue::rows_overflow: reject("draft_offsets[B] + B = ", r.a, " target rows overflow int32");
    case Issue::stride_overflow:
      reject(r.what, " = ", r.a, " times ", r.c, " rows overflows the address range");
    case Issue::draft_tokens_null: reject("draft_tokens is null");
    case Issue::offsets_decrease:
      reject("sequence ", b, ": draft_offsets decrease (", r.a, " then ", r.c, ")");
    case Issue::row_width:
      reject("sequence ", b, ": row_width = ", r.a, " must be at least its chain + 1 = ", r.c);
    case Issue::sample_uniform:
      reject("sequence ", b, ": sample uniform ", static_cast<float>(r.value), " is outside [0, 1)");
    case Issue::draft_token:
      reject("sequence ", b, ", position ", r.position, ": draft token ", r.a, " is outside [0, ",
             r.c, ")");
    case Issue::accept_uniform:
      reject("sequence ", b, ", position ", r.position, ": accept uniform ",
             static_cast<float>(r.value), " is outside [0, 1)");
    case Issue::rule_draft: reject("sequence ", b, ", position ", r.position, ": ", r.what, " = ", r.value);
    case Issue::none:
    case Issue::walk: break;
  }
  // The device named the bad value already (the host cannot read the rows); the empty batch
  // (vocab_size 0) keeps core::report from scanning any row.
  core::report<core::ChainLayout>(r.result.fault, b, ChainBatch<float>{});
}

}  // namespace detail

/// Device bytes verify() needs for this rule and batch: a header and one record per sequence.
///
///   std::size_t bytes = specverify::cuda::workspace_bytes(rule, batch);
///   void* data;  cudaMalloc(&data, bytes);
///   specverify::cuda::Workspace workspace{data, bytes};
template <class Rule, class Prob>
std::size_t workspace_bytes(const Rule&, const ChainBatch<Prob>& batch) {
  const std::size_t sequences = batch.batch_size > 0 ? static_cast<std::size_t>(batch.batch_size) : 0;
  return detail::kRecordsOffset + sequences * sizeof(detail::SequenceRecord);
}

/// Waits for `stream` and throws invalid_input if the last verify() on this workspace found bad
/// input (then it wrote no output). The message names the lowest faulting sequence, the position
/// and the value, in core::validate's words. A CUDA error on the stream throws std::runtime_error.
///
///   specverify::cuda::verify(rule, batch, randomness, out, workspace, stream);
///   specverify::cuda::check(workspace, stream);  // where the engine can afford a sync
inline void check(const Workspace& workspace, cudaStream_t stream) {
  detail::Header h;
  detail::throw_on_error(
      cudaMemcpyAsync(&h, workspace.data, sizeof h, cudaMemcpyDeviceToHost, stream), "check");
  detail::throw_on_error(cudaStreamSynchronize(stream), "check");
  if (h.first_fault == 0) return;
  const auto b = static_cast<std::int32_t>(~h.first_fault);
  detail::SequenceRecord r;
  detail::throw_on_error(cudaMemcpyAsync(&r, detail::records(workspace) + b, sizeof r,
                                         cudaMemcpyDeviceToHost, stream),
                         "check");
  detail::throw_on_error(cudaStreamSynchronize(stream), "check");
  detail::report(r, b);
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
