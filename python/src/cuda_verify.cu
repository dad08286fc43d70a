// The module's CUDA backend: cuda::verify on the caller's stream, with a workspace the module
// keeps per device and stream, and the checks the CPU path makes on its copies of the indices that
// the host cannot make without waiting for the stream (DeviceBounds), made on the device.
#include <specverify/cuda.cuh>

#include <climits>
#include <cstddef>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
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

/// Start of the module's workspace: the first bound the device found broken (DeviceBounds' order).
struct BoundFinding {
  enum Kind : long long { none, offsets_total, guided_rows, history_total, bias_total };
  long long kind;
  long long a;  // the total; guided rows: the sequence
  long long c;  // guided rows: its first row
  long long d;  // guided rows: its row count
};

/// DeviceBounds' pointers and counts, as the kernel takes them.
struct BoundInputs {
  const std::int32_t* offsets;
  std::int32_t B;
  std::int64_t entries;
  const std::int64_t* first_row;
  std::int64_t unconditional_rows;
  const std::int32_t* history_offsets;
  std::int64_t history_entries;
  const std::int32_t* bias_offsets;
  std::int64_t bias_entries;
};

/// Copies offsets[0..B] into the workspace, which the walk then reads, and checks DeviceBounds in
/// the CPU's order. Where one fails, the copy starts at 1 instead of 0: every sequence's checks
/// then stop at offsets[0], before reading any entry, list or row, and nothing is written; check()
/// reports the bound.
__global__ void check_bounds(BoundInputs in, std::int32_t* copy, BoundFinding* finding) {
  __shared__ int unfit;  // the lowest guided sequence whose rows do not fit
  if (threadIdx.x == 0) unfit = INT_MAX;
  for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i <= in.B; i += static_cast<std::int32_t>(blockDim.x)) {
    copy[i] = in.offsets[i];
  }
  __syncthreads();
  if (in.first_row) {
    for (std::int32_t b = static_cast<std::int32_t>(threadIdx.x); b < in.B; b += static_cast<std::int32_t>(blockDim.x)) {
      const std::int64_t count = std::int64_t{in.offsets[b + 1]} - in.offsets[b], first = in.first_row[b];
      // -1: not guided; below -1 or decreasing offsets: the shared checks name them.
      if (first >= 0 && count >= 0 && first > in.unconditional_rows - (count + 1)) atomicMin(&unfit, b);
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  BoundFinding found{BoundFinding::none, 0, 0, 0};
  if (in.B > 0) {
    if (in.offsets[in.B] != in.entries) {
      found = {BoundFinding::offsets_total, in.offsets[in.B], 0, 0};
    } else if (unfit != INT_MAX) {
      found = {BoundFinding::guided_rows, unfit, in.first_row[unfit], in.offsets[unfit + 1] - in.offsets[unfit] + 1};
    } else if (in.history_offsets && in.history_offsets[in.B] != in.history_entries) {
      found = {BoundFinding::history_total, in.history_offsets[in.B], 0, 0};
    } else if (in.bias_offsets && in.bias_offsets[in.B] != in.bias_entries) {
      found = {BoundFinding::bias_total, in.bias_offsets[in.B], 0, 0};
    }
  }
  *finding = found;
  if (found.kind != BoundFinding::none) copy[0] = 1;
}

/// The batch's offsets, which the walk reads from the workspace's copy (a PaddedChainBatch's are
/// its ChainBatch's).
template <class Prob>
const std::int32_t*& offsets_of(ChainBatch<Prob>& batch) { return batch.draft_offsets; }
template <class Prob>
const std::int32_t*& offsets_of(TreeBatch<Prob>& batch) { return batch.node_offsets; }
template <class Logit>
const std::int32_t*& offsets_of(LogitsChainBatch<Logit>& batch) { return batch.draft_offsets; }
template <class Logit>
const std::int32_t*& offsets_of(LogitsTreeBatch<Logit>& batch) { return batch.node_offsets; }

/// The module's float16 and bfloat16 are CUDA's __half and __nv_bfloat16, bit for bit.
template <class T> struct DeviceType { using type = T; };
template <> struct DeviceType<float16> { using type = __half; };
template <> struct DeviceType<bfloat16> { using type = __nv_bfloat16; };
static_assert(sizeof(float16) == sizeof(__half) && sizeof(bfloat16) == sizeof(__nv_bfloat16),
              "16-bit rows are reinterpreted, not converted");

template <class Logit, class Device = typename DeviceType<Logit>::type>
const Device* on_device(const Logit* p) { return reinterpret_cast<const Device*>(p); }

/// A logits batch of the module's row type as cuda::verify takes it: the same pointers, rows of
/// CUDA's 16-bit types.
template <template <class> class CppBatch, class Logit>
CppBatch<typename DeviceType<Logit>::type> device_rows(const CppBatch<Logit>& batch) {
  CppBatch<typename DeviceType<Logit>::type> d{};
  d.batch_size = batch.batch_size;
  d.vocab_size = batch.vocab_size;
  if constexpr (std::is_same_v<CppBatch<Logit>, LogitsTreeBatch<Logit>>) {
    d.node_offsets = batch.node_offsets;
    d.parents = batch.parents;
    d.drafted = batch.drafted;
  } else {
    d.draft_offsets = batch.draft_offsets;
  }
  d.draft_tokens = batch.draft_tokens;
  d.target_logits = on_device(batch.target_logits);
  d.draft_logits = on_device(batch.draft_logits);
  d.target_stride = batch.target_stride;
  d.draft_stride = batch.draft_stride;
  d.target_params = batch.target_params;
  d.draft_params = batch.draft_params;
  d.draft_vocab_size = batch.draft_vocab_size;
  d.draft_to_target = batch.draft_to_target;
  d.unconditional_logits = on_device(batch.unconditional_logits);
  d.unconditional_stride = batch.unconditional_stride;
  d.unconditional_first_row = batch.unconditional_first_row;
  d.guidance_scale = batch.guidance_scale;
  d.allowed_tokens = batch.allowed_tokens;
  d.history_offsets = batch.history_offsets;
  d.history_tokens = batch.history_tokens;
  d.history_counts = batch.history_counts;
  d.bias_offsets = batch.bias_offsets;
  d.bias_tokens = batch.bias_tokens;
  d.bias_values = batch.bias_values;
  d.shard = batch.shard;
  return d;
}

/// Whether a batch holds rows of logits (padded chains' too).
template <class Batch, class = void>
struct IsLogits : std::false_type {};
template <class Batch>
struct IsLogits<Batch, std::void_t<decltype(std::declval<Batch>().target_logits)>> : std::true_type {};

/// The module's bytes at the start of a slot: the finding, the offsets' copy and, for logits, the
/// sampling parameters' copies; the verify's workspace follows.
struct SlotLayout {
  std::size_t offsets_at, target_params_at, draft_params_at, verify_at;

  SlotLayout(std::size_t B, bool logits) {
    const std::size_t params = logits ? aligned(B * sizeof(SamplingParams)) : 0;
    offsets_at = kAlign;
    target_params_at = offsets_at + aligned((B + 1) * sizeof(std::int32_t));
    draft_params_at = target_params_at + params;
    verify_at = draft_params_at + params;
  }
};

}  // namespace cuda_detail

struct CudaPending {
  std::shared_ptr<cuda_detail::Slot> slot;
  std::uint64_t generation;
  CudaCall call;
  DeviceBounds bounds;
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
  BoundFinding found{};
  throw_on_error(cudaMemcpyAsync(&found, pending.slot->data, sizeof found, cudaMemcpyDeviceToHost, stream), "check");
  throw_on_error(cudaStreamSynchronize(stream), "check");
  const DeviceBounds& bounds = pending.bounds;
  switch (found.kind) {
    case BoundFinding::offsets_total: throw invalid_input(bounds.total.mismatch(found.a));
    case BoundFinding::guided_rows: throw invalid_input(bounds.guided.mismatch(found.a, found.c, found.d));
    case BoundFinding::history_total: throw invalid_input(bounds.history.mismatch(found.a));
    case BoundFinding::bias_total: throw invalid_input(bounds.bias.mismatch(found.a));
    default: break;
  }
  cuda::check(pending.workspace, stream);
}

/// Copies `B` sampling parameters from the host to `to` on the stream (nullptr stays nullptr). A
/// copy from pageable memory has read it when the call returns.
const SamplingParams* params_to_device(const SamplingParams* from, std::size_t B, char* to, cudaStream_t stream) {
  if (!from || B == 0) return from;
  throw_on_error(cudaMemcpyAsync(to, from, B * sizeof(SamplingParams), cudaMemcpyHostToDevice, stream),
                 "copying the sampling parameters");
  return reinterpret_cast<const SamplingParams*>(to);
}

template <class RuleVariant, class Batch, class Output>
CudaResult run(const RuleVariant& rule, Batch batch, const Randomness& randomness, const Output& out,
               const DeviceBounds& bounds, const CudaCall& call) {
  constexpr bool kLogits = IsLogits<Batch>::value;
  const DeviceScope scope(call.device);
  const auto stream = reinterpret_cast<cudaStream_t>(call.stream);
  const std::shared_ptr<Slot> slot = slot_for(call);
  const std::lock_guard<std::mutex> lock(slot->busy);

  // What the host can judge is judged before the workspace is touched (it throws as the CPU does).
  std::visit(
      [&](const auto& r) {
        core::check_positions<std::decay_t<decltype(r)>>(randomness);
        if constexpr (kLogits) {
          core::validate_shape(r, core::detail::probability_shape(batch), out);
          cuda::detail::check_logits_shape(batch);
        } else {
          core::validate_shape(r, batch, out);
        }
      },
      rule);
  ++slot->generation;  // from here on, an earlier verify's findings may be overwritten

  const std::size_t B = static_cast<std::size_t>(batch.batch_size > 0 ? batch.batch_size : 0);
  const std::size_t verify_bytes =
      std::visit([&](const auto& r) { return cuda::workspace_bytes(r, batch, out); }, rule);
  const SlotLayout at(B, kLogits);
  if (slot->bytes < at.verify_at + verify_bytes) {
    // cudaFree waits for the work still using the old workspace.
    if (slot->data) throw_on_error(cudaFree(slot->data), "cudaFree");
    slot->data = nullptr;
    slot->bytes = 0;
    throw_on_error(cudaMalloc(&slot->data, at.verify_at + verify_bytes), "cudaMalloc of the workspace");
    slot->bytes = at.verify_at + verify_bytes;
  }
  char* base = static_cast<char*>(slot->data);
  auto* finding = reinterpret_cast<BoundFinding*>(base);
  auto* copy = reinterpret_cast<std::int32_t*>(base + at.offsets_at);
  const cuda::Workspace workspace{base + at.verify_at, verify_bytes};

  const BoundInputs inputs{offsets_of(batch),       batch.batch_size,         bounds.total.entries,
                           bounds.first_row,        bounds.guided.available,  bounds.history_offsets,
                           bounds.history.entries,  bounds.bias_offsets,      bounds.bias.entries};
  check_bounds<<<1, 256, 0, stream>>>(inputs, copy, finding);
  throw_on_error(cudaGetLastError(), "launch");
  offsets_of(batch) = copy;
  if constexpr (kLogits) {
    batch.target_params = params_to_device(batch.target_params, B, base + at.target_params_at, stream);
    batch.draft_params = params_to_device(batch.draft_params, B, base + at.draft_params_at, stream);
  }
  throw_on_error(std::visit([&](const auto& r) { return cuda::verify(r, batch, randomness, out, workspace, stream); },
                            rule),
                 "verify");
  auto pending = std::make_shared<CudaPending>(CudaPending{slot, slot->generation, call, bounds, workspace});
  if (!call.synchronize) return {{}, pending};
  check_locked(*pending);
  return {cuda::read_stats(workspace, stream), nullptr};
}

}  // namespace cuda_detail

bool cuda_built() { return true; }

CudaResult cuda_verify(const CudaChainRule& rule, const ChainBatch<float>& batch, const Randomness& randomness,
                       const ChainOutput& out, const DeviceBounds& bounds, const CudaCall& call,
                       const std::int32_t* num_draft_tokens) {
  if (num_draft_tokens) return cuda_detail::run(rule, core::padded(batch, num_draft_tokens), randomness, out, bounds, call);
  return cuda_detail::run(rule, batch, randomness, out, bounds, call);
}
CudaResult cuda_verify(const CudaTreeRule& rule, const TreeBatch<float>& batch, const Randomness& randomness,
                       const TreeOutput& out, const DeviceBounds& bounds, const CudaCall& call) {
  return cuda_detail::run(rule, batch, randomness, out, bounds, call);
}
CudaResult cuda_verify(const CudaChainRule& rule, const RowTypes<LogitsChainBatch>& batch,
                       const Randomness& randomness, const ChainOutput& out, const DeviceBounds& bounds,
                       const CudaCall& call, const std::int32_t* num_draft_tokens) {
  return std::visit(
      [&](const auto& b) {
        const auto rows = cuda_detail::device_rows(b);
        if (num_draft_tokens) return cuda_detail::run(rule, core::padded(rows, num_draft_tokens), randomness, out, bounds, call);
        return cuda_detail::run(rule, rows, randomness, out, bounds, call);
      },
      batch);
}
CudaResult cuda_verify(const CudaTreeRule& rule, const RowTypes<LogitsTreeBatch>& batch,
                       const Randomness& randomness, const TreeOutput& out, const DeviceBounds& bounds,
                       const CudaCall& call) {
  return std::visit(
      [&](const auto& b) { return cuda_detail::run(rule, cuda_detail::device_rows(b), randomness, out, bounds, call); },
      batch);
}

void cuda_check(const CudaPending& pending) {
  const cuda_detail::DeviceScope scope(pending.call.device);
  const std::lock_guard<std::mutex> lock(pending.slot->busy);
  cuda_detail::check_locked(pending);
}

}  // namespace specverify::python
