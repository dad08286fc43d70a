// verify() over a LogitsTreeBatch, for every rule.
#include "verify_batch.hpp"

namespace specverify::python {

VerifyStats verify_logits_trees(py::handle rule, const PyLogitsTreeBatch& batch, const PyRandomness& randomness,
                                const PyTreeOutput& out, const py::int_& max_threads) {
  return verify_batch(rule, batch, randomness, out, max_threads);
}

}  // namespace specverify::python
