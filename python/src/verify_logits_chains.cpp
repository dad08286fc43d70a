// verify() over a LogitsChainBatch, for every rule.
#include "verify_batch.hpp"

namespace specverify::python {

py::object verify_logits_chains(py::handle rule, const PyLogitsChainBatch& batch, const PyRandomness& randomness,
                                PyChainOutput& out, const py::int_& max_threads, const py::object& stream, bool synchronize) {
  return verify_batch(rule, batch, randomness, out, max_threads, stream, synchronize);
}

}  // namespace specverify::python
