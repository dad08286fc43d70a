// verify() over a TreeBatch, for every rule.
#include "verify_batch.hpp"

namespace specverify::python {

VerifyStats verify_trees(py::handle rule, const PyTreeBatch& batch, const PyRandomness& randomness,
                         const PyTreeOutput& out, const py::int_& max_threads) {
  return verify_batch(rule, batch, randomness, out, max_threads);
}

}  // namespace specverify::python
