// verify() over a TreeBatch, for every rule.
#include "verify_batch.hpp"

namespace specverify::python {

py::object verify_trees(py::handle rule, const PyTreeBatch& batch, const PyRandomness& randomness,
                        PyTreeOutput& out, const py::int_& max_threads, const py::object& stream, bool synchronize) {
  return verify_batch(rule, batch, randomness, out, max_threads, stream, synchronize);
}

}  // namespace specverify::python
