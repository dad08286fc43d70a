// The module's CUDA backend: cuda::verify on the caller's stream, with a workspace the module
// keeps per device and stream, and the one check the host cannot make (the offsets' total).
#include <specverify/cuda.cuh>

#include <cstddef>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda_verify.hpp"

namespace specverify::python {

namespace cuda_detail {

void throw_on_error(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("specverify (CUDA): ") + what + ": " + cudaGetErrorString(status));
  }
}

/// One workspace per device and stream: the verifies of one stream run in order, so they can
/// share it. `generation` counts the verifies that used it, so a late check can tell its
/// findings were overwritten. `busy` keeps two host threads from using it at once.
struct Slot {
  std::mutex busy;
  void* data = nullptr;
  std::size_t bytes = 0;
  std::uint64_t generation = 0;
};

std::mutex slots_mutex;
std::map<std::pair<int, std::uintptr_t>, std::shared_ptr<Slot>>& slots() {
  static auto* kept = new std::map<std::pair<int, std::uintptr_t>, std::shared_ptr<Slot>>;  // never freed:
  return *kept;  // the CUDA runtime may be gone by the time static destructors run
}

std::shared_ptr<Slot> slot_for(const CudaCall& call) {
  const std::lock_guard<std::mutex> lock(slots_mutex);
  std::shared_ptr<Slot>& slot = slots()[{call.device, call.stream}];
  if (!slot) slot = std::make_shared<Slot>();
  return slot;
}

/// The calling thread's current device, `device` until the scope ends.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    throw_on_error(cudaGetDevice(&previous_), "no CUDA device is usable");
    throw_on_error(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

constexpr std::size_t kAlign = 256;
constexpr std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Start of the module's workspace: what the offsets' check found.
struct TotalFinding {
  long long wrong;  // 1 where offsets[B] != entries
  long long total;  // offsets[B]
};

/// Copies offsets[0..B] into the workspace, which the walk then reads. Where offsets[B] is not the
/// number of entries, the copy starts at 1 instead of 0: every sequence's checks then stop at
/// offsets[0], before reading any entry, and nothing is written; check() reports the total.
__global__ void copy_offsets(const std::int32_t* offsets, std::int32_t B, std::int64_t entries,
                             std::int32_t* copy, TotalFinding* finding) {
  for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i <= B; i += static_cast<std::int32_t>(blockDim.x)) {
    copy[i] = offsets[i];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const std::int32_t total = offsets[B];
    const bool wrong = B > 0 && total != entries;
    *finding = {wrong ? 1 : 0, total};
    if (wrong) copy[0] = 1;
  }
}

/// (A PaddedChainBatch's are its ChainBatch's.)
const std::int32_t*& offsets_of(ChainBatch<float>& batch) { return batch.draft_offsets; }
const std::int32_t*& offsets_of(TreeBatch<float>& batch) { return batch.node_offsets; }

}  // namespace cuda_detail

struct CudaPending {
  std::shared_ptr<cuda_detail::Slot> slot;
  std::uint64_t generation;
  CudaCall call;
  OffsetsTotal total;
  cuda::Workspace workspace;
};

namespace cuda_detail {

/// cuda_check with the slot held.
void check_locked(const CudaPending& pending) {
  if (pending.slot->generation != pending.generation) {
    throw std::runtime_error(
        "specverify: check(out): another verify has run on this device and stream since the one that wrote out, "
        "and its findings are gone (call check before the next verify on the stream)");
  }
  const auto stream = reinterpret_cast<cudaStream_t>(pending.call.stream);
  TotalFinding found{};
  throw_on_error(cudaMemcpyAsync(&found, pending.slot->data, sizeof found, cudaMemcpyDeviceToHost, stream), "check");
  throw_on_error(cudaStreamSynchronize(stream), "check");
  if (found.wrong) throw invalid_input(pending.total.mismatch(found.total));
  cuda::check(pending.workspace, stream);
}

template <class RuleVariant, class Batch, class Output>
CudaResult run(const RuleVariant& rule, Batch batch, const Randomness& randomness, const Output& out,
               const OffsetsTotal& total, const CudaCall& call) {
  const DeviceScope scope(call.device);
  const auto stream = reinterpret_cast<cudaStream_t>(call.stream);
  const std::shared_ptr<Slot> slot = slot_for(call);
  const std::lock_guard<std::mutex> lock(slot->busy);

  // What the host can judge is judged before the workspace is touched (it throws as the CPU does).
  std::visit([&](const auto& r) { core::validate_shape(r, batch, out); }, rule);
  ++slot->generation;  // from here on, an earlier verify's findings may be overwritten

  const std::size_t B = static_cast<std::size_t>(batch.batch_size > 0 ? batch.batch_size : 0);
  const std::size_t verify_bytes =
      std::visit([&](const auto& r) { return cuda::workspace_bytes(r, batch, out); }, rule);
  const std::size_t offsets_at = kAlign, verify_at = offsets_at + aligned((B + 1) * sizeof(std::int32_t));
  if (slot->bytes < verify_at + verify_bytes) {
    // cudaFree waits for the work still using the old workspace.
    if (slot->data) throw_on_error(cudaFree(slot->data), "cudaFree");
    slot->data = nullptr;
    slot->bytes = 0;
    throw_on_error(cudaMalloc(&slot->data, verify_at + verify_bytes), "cudaMalloc of the workspace");
    slot->bytes = verify_at + verify_bytes;
  }
  char* base = static_cast<char*>(slot->data);
  auto* finding = reinterpret_cast<TotalFinding*>(base);
  auto* copy = reinterpret_cast<std::int32_t*>(base + offsets_at);
  const cuda::Workspace workspace{base + verify_at, verify_bytes};

  copy_offsets<<<1, 256, 0, stream>>>(offsets_of(batch), batch.batch_size, total.entries, copy, finding);
  throw_on_error(cudaGetLastError(), "launch");
  offsets_of(batch) = copy;
  throw_on_error(std::visit([&](const auto& r) { return cuda::verify(r, batch, randomness, out, workspace, stream); },
                            rule),
                 "verify");
  auto pending = std::make_shared<CudaPending>(CudaPending{slot, slot->generation, call, total, workspace});
  if (!call.synchronize) return {{}, pending};
  check_locked(*pending);
  return {cuda::read_stats(workspace, stream), nullptr};
}

}  // namespace cuda_detail

bool cuda_built() { return true; }

CudaResult cuda_verify(const CudaChainRule& rule, const ChainBatch<float>& batch, const Randomness& randomness,
                       const ChainOutput& out, const OffsetsTotal& total, const CudaCall& call,
                       const std::int32_t* num_draft_tokens) {
  if (num_draft_tokens) {
    return cuda_detail::run(rule, core::PaddedChainBatch<float>{batch, num_draft_tokens}, randomness, out, total, call);
  }
  return cuda_detail::run(rule, batch, randomness, out, total, call);
}
CudaResult cuda_verify(const CudaTreeRule& rule, const TreeBatch<float>& batch, const Randomness& randomness,
                       const TreeOutput& out, const OffsetsTotal& total, const CudaCall& call) {
  return cuda_detail::run(rule, batch, randomness, out, total, call);
}

void cuda_check(const CudaPending& pending) {
  const cuda_detail::DeviceScope scope(pending.call.device);
  const std::lock_guard<std::mutex> lock(pending.slot->busy);
  cuda_detail::check_locked(pending);
}

}  // namespace specverify::python
