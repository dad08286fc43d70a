// verify() over a LogitsChainBatch, for every rule.
#include "verify_batch.hpp"

namespace specverify::python {

VerifyStats verify_logits_chains(py::handle rule, const PyLogitsChainBatch& batch, const PyRandomness& randomness,
                                 const PyChainOutput& out, const py::int_& max_threads) {
  return verify_batch(rule, batch, randomness, out, max_threads);
}

}  // namespace specverify::python
