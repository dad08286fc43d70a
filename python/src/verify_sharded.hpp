// verify(..., all_gather=fn) over a sharded batch of any kind (API.md "Sharded vocabulary"): fn(send)
// takes this rank's message as a 1-D uint8 NumPy array and returns every rank's, concatenated in
// rank order, so torch.distributed or mpi4py can serve. Instantiated by verify_sharded_chains.cpp
// and verify_sharded_trees.cpp (two translation units, so the module builds in parallel).
#pragma once

#include <pybind11/numpy.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "verify_batch.hpp"

namespace specverify::python {

/// The C++ communicator over a Python callable, called with the GIL (verify runs without it).
struct PyCommunicator {
  const py::function* fn;
  std::int32_t ranks;

  void all_gather(const void* send, std::size_t bytes, void* recv) const {
    py::gil_scoped_acquire gil;
    py::array_t<std::uint8_t> message(static_cast<py::ssize_t>(bytes));
    if (bytes) std::memcpy(message.mutable_data(), send, bytes);
    const py::object result = (*fn)(message);
    const auto gathered = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(result);
    const std::size_t expected = bytes * static_cast<std::size_t>(ranks);
    if (!gathered || gathered.ndim() != 1 || static_cast<std::size_t>(gathered.size()) != expected) {
      throw py::value_error("specverify: all_gather returned " + std::string(py::repr(result)).substr(0, 200) +
                            "; it must return a 1-D uint8 array of ranks * len(send) = " + std::to_string(expected) +
                            " bytes, every rank's message in rank order");
    }
    if (expected) std::memcpy(recv, gathered.data(), expected);
  }
};

/// verify_on_cpu over this rank's slice, the ranks gathered by all_gather.
template <class PyBatch, class PyOut>
VerifyStats verify_sharded(py::handle rule, const PyBatch& batch, const PyRandomness& randomness,
                           const PyOut& out, const py::function& all_gather, const py::int_& max_threads) {
  const std::int32_t threads = thread_cap(max_threads);
  Fresh<PyBatch, PyOut> now(rule, batch, randomness, out);
  now.expect_host("verify(..., all_gather=fn)");
  const PyCommunicator comm{&all_gather, std::max(1, batch.shard.ranks)};
  return verify_on_cpu(rule, now, threads,
                       [&](const auto& cpp_rule, const auto& rows, const Randomness& r, const auto& o,
                           const CpuOptions& options) -> VerifyStats {
                         return specverify::verify(cpp_rule, rows, r, o, comm, options);
                       });
}

}  // namespace specverify::python
