// verify(..., all_gather=fn) over a sharded ChainBatch or LogitsChainBatch (verify_sharded.hpp).
#include "verify_sharded.hpp"

namespace specverify::python {

VerifyStats verify_chains_sharded(py::handle rule, const PyChainBatch& batch, const PyRandomness& randomness,
                                  const PyChainOutput& out, const py::function& all_gather,
                                  const py::int_& max_threads) {
  return verify_sharded(rule, batch, randomness, out, all_gather, max_threads);
}

VerifyStats verify_logits_chains_sharded(py::handle rule, const PyLogitsChainBatch& batch,
                                         const PyRandomness& randomness, const PyChainOutput& out,
                                         const py::function& all_gather, const py::int_& max_threads) {
  return verify_sharded(rule, batch, randomness, out, all_gather, max_threads);
}

}  // namespace specverify::python
