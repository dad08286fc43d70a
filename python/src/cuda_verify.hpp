// The CUDA backend as the module calls it. Declared without CUDA's headers, so that the rest of the
// module compiles with the host compiler alone; defined in cuda_verify.cu where nvcc is found,
// else in cuda_unavailable.cpp, whose calls raise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include <specverify/specverify.hpp>

namespace specverify::python {

/// The rules cuda::verify takes over probability rows. Coupled is not among them: its Gumbel race
/// runs over rows of logits on CUDA.
using CudaChainRule =
    std::variant<Standard, Greedy, Ears, Fsd, ReducibleFsd, Sprinter, Block, Traversal, SpecDecPP<Standard>,
                 SpecDecPP<Greedy>, SpecDecPP<Ears>, SpecDecPP<Fsd>, SpecDecPP<ReducibleFsd>, SpecDecPP<Sprinter>>;
/// The rules with a tree form among them.
using CudaTreeRule = std::variant<Standard, Greedy, Ears, Fsd, ReducibleFsd, Sprinter, Traversal>;

/// Where and how one verify runs.
struct CudaCall {
  int device = 0;
  std::uintptr_t stream = 0;  // a cudaStream_t of that device; 0: the legacy default stream
  bool synchronize = true;
};

/// The one bound the host cannot check without reading device memory: offsets[B] must be the
/// number of entries (draft_tokens' length). It is checked on the device, before the walk.
struct OffsetsTotal {
  const char* offsets_name;
  std::int64_t entries;

  /// The error where offsets[B] is `total` (the CPU path's words, checked on its copy).
  std::string mismatch(std::int64_t total) const {
    return std::string("specverify: ") + offsets_name + "[B] = " + std::to_string(total) +
           " but draft_tokens holds " + std::to_string(entries) + " tokens";
  }
};

/// A verify that has been enqueued and not yet checked (cuda_verify.cu).
struct CudaPending;

/// stats: set where the call synchronised; pending: where it did not, for cuda_check.
struct CudaResult {
  VerifyStats stats;
  std::shared_ptr<CudaPending> pending;
};

/// Whether this module was built with the CUDA backend.
bool cuda_built();

/// Enqueues cuda::verify on call.stream with this device and stream's workspace (kept by the
/// module, grown as needed); with call.synchronize, waits and raises invalid_input as the CPU does.
/// With `num_draft_tokens` (device int32 [B]), the chains are padded (core/padded_chain.hpp).
/// Call without the GIL.
CudaResult cuda_verify(const CudaChainRule& rule, const ChainBatch<float>& batch, const Randomness& randomness,
                       const ChainOutput& out, const OffsetsTotal& total, const CudaCall& call,
                       const std::int32_t* num_draft_tokens = nullptr);
CudaResult cuda_verify(const CudaTreeRule& rule, const TreeBatch<float>& batch, const Randomness& randomness,
                       const TreeOutput& out, const OffsetsTotal& total, const CudaCall& call);

/// Waits for the pending verify's stream and raises invalid_input if it found bad input (then it
/// wrote nothing). Raises std::runtime_error if another verify has used its workspace since.
/// Call without the GIL.
void cuda_check(const CudaPending& pending);

}  // namespace specverify::python
