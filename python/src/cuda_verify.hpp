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

/// Every rule of a chain, over rows of probabilities or logits.
using CudaChainRule =
    std::variant<Standard, Greedy, Ears, Fsd, ReducibleFsd, Sprinter, Coupled, Block, Traversal, SpecDecPP<Standard>,
                 SpecDecPP<Greedy>, SpecDecPP<Ears>, SpecDecPP<Fsd>, SpecDecPP<ReducibleFsd>, SpecDecPP<Sprinter>,
                 SpecDecPP<Coupled>>;
/// Every rule with a tree form.
using CudaTreeRule = std::variant<Standard, Greedy, Ears, Fsd, ReducibleFsd, Sprinter, Coupled, Traversal>;
/// A C++ logits batch of each row type (on CUDA, float16 and bfloat16 are __half and
/// __nv_bfloat16).
template <template <class> class CppBatch>
using RowTypes = std::variant<CppBatch<float>, CppBatch<float16>, CppBatch<bfloat16>>;

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

/// "NAME holds M entries", or "NAME is None".
inline std::string holds_entries(const char* name, bool given, std::int64_t entries) {
  if (!given) return std::string(name) + " is None";
  return std::string(name) + " holds " + std::to_string(entries) + (entries == 1 ? " entry" : " entries");
}

/// A ragged list's bound (the history or bias list of a logits batch): offsets[B] must be the
/// number of entries.
struct ListTotal {
  const char* offsets_name;
  const char* tokens_name;
  std::int64_t entries;  // len(tokens)
  bool tokens_given;     // false: tokens is None

  /// The error where offsets[B] is `total`.
  std::string mismatch(std::int64_t total) const {
    return std::string("specverify: ") + offsets_name + "[B] = " + std::to_string(total) + " but " +
           holds_entries(tokens_name, tokens_given, entries);
  }
};

/// Guidance's bound: a guided sequence's k_b + 1 rows from unconditional_first_row[b] lie within
/// unconditional_logits' rows.
struct GuidedRows {
  std::int64_t available;  // unconditional_logits' rows

  /// The error where sequence b's `rows` rows from `first` do not fit.
  std::string mismatch(std::int64_t b, std::int64_t first, std::int64_t rows) const {
    return "specverify: sequence " + std::to_string(b) + ": unconditional_first_row = " + std::to_string(first) +
           ", but its " + std::to_string(rows) + " rows do not fit in unconditional_logits' " +
           std::to_string(available) + " rows";
  }
};

/// What the CPU path checks on its copies of a batch's indices and the device checks on CUDA, in
/// the CPU's order: the offsets' total, guided rows, the history's total, the bias's total. The
/// pointers are device arrays, null where the batch has no such list.
struct DeviceBounds {
  OffsetsTotal total;
  const std::int64_t* first_row = nullptr;  // [B]; with `guided`
  GuidedRows guided{0};
  const std::int32_t* history_offsets = nullptr;
  ListTotal history{"", "", 0, false};
  const std::int32_t* bias_offsets = nullptr;
  ListTotal bias{"", "", 0, false};
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
                       const ChainOutput& out, const DeviceBounds& bounds, const CudaCall& call,
                       const std::int32_t* num_draft_tokens = nullptr);
CudaResult cuda_verify(const CudaTreeRule& rule, const TreeBatch<float>& batch, const Randomness& randomness,
                       const TreeOutput& out, const DeviceBounds& bounds, const CudaCall& call);
/// Logits batches: every pointer on the device but target_params and draft_params, host arrays
/// [B] that the call copies to the device on the stream (NumPy's SamplingParams have no CUDA form).
/// With `num_draft_tokens`, padded chains as above.
CudaResult cuda_verify(const CudaChainRule& rule, const RowTypes<LogitsChainBatch>& batch,
                       const Randomness& randomness, const ChainOutput& out, const DeviceBounds& bounds,
                       const CudaCall& call, const std::int32_t* num_draft_tokens = nullptr);
CudaResult cuda_verify(const CudaTreeRule& rule, const RowTypes<LogitsTreeBatch>& batch,
                       const Randomness& randomness, const TreeOutput& out, const DeviceBounds& bounds,
                       const CudaCall& call);

/// Waits for the pending verify's stream and raises invalid_input if it found bad input (then it
/// wrote nothing). Raises std::runtime_error if another verify has used its workspace since.
/// Call without the GIL.
void cuda_check(const CudaPending& pending);

}  // namespace specverify::python
