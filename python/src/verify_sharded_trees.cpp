// verify(..., all_gather=fn) over a sharded TreeBatch or LogitsTreeBatch (verify_sharded.hpp).
#include "verify_sharded.hpp"

namespace specverify::python {

VerifyStats verify_trees_sharded(py::handle rule, const PyTreeBatch& batch, const PyRandomness& randomness,
                                 const PyTreeOutput& out, const py::function& all_gather,
                                 const py::int_& max_threads) {
  return verify_sharded(rule, batch, randomness, out, all_gather, max_threads);
}

VerifyStats verify_logits_trees_sharded(py::handle rule, const PyLogitsTreeBatch& batch,
                                        const PyRandomness& randomness, const PyTreeOutput& out,
                                        const py::function& all_gather, const py::int_& max_threads) {
  return verify_sharded(rule, batch, randomness, out, all_gather, max_threads);
}

}  // namespace specverify::python
