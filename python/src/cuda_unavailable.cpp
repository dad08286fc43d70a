// The module without the CUDA backend (no nvcc where it was built): CUDA arrays are refused.
#include <stdexcept>

#include "cuda_verify.hpp"

namespace specverify::python {

struct CudaPending {};

namespace {
[[noreturn]] void unavailable() {
  throw invalid_input(
      "specverify: the arrays are on a CUDA device, but this specverify module was built without CUDA "
      "(no nvcc was found; rebuild where the CUDA toolkit is installed)");
}
}  // namespace

bool cuda_built() { return false; }
CudaResult cuda_verify(const CudaChainRule&, const ChainBatch<float>&, const Randomness&, const ChainOutput&,
                       const DeviceBounds&, const CudaCall&, const std::int32_t*) {
  unavailable();
}
CudaResult cuda_verify(const CudaTreeRule&, const TreeBatch<float>&, const Randomness&, const TreeOutput&,
                       const DeviceBounds&, const CudaCall&) {
  unavailable();
}
CudaResult cuda_verify(const CudaChainRule&, const RowTypes<LogitsChainBatch>&, const Randomness&,
                       const ChainOutput&, const DeviceBounds&, const CudaCall&, const std::int32_t*) {
  unavailable();
}
CudaResult cuda_verify(const CudaTreeRule&, const RowTypes<LogitsTreeBatch>&, const Randomness&,
                       const TreeOutput&, const DeviceBounds&, const CudaCall&) {
  unavailable();
}
void cuda_check(const CudaPending&) { unavailable(); }

}  // namespace specverify::python
