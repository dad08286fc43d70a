// verify(..., all_gather=fn) over a sharded batch of any kind (docs/api.md "Sharded vocabulary"): fn(send)
// takes this rank's message as a 1-D uint8 NumPy array and returns every rank's, concatenated in
// rank order, so torch.distributed or mpi4py can serve. Instantiated by verify_sharded_chains.cpp
// and verify_sharded_trees.cpp (two translation units, so the module builds in parallel).
#pragma once

#include <pybind11/numpy.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "arrays.hpp"
#include "verify_batch.hpp"

namespace specverify::python {

/// What a Python call returned, in one line and never its values: its type, with the dtype and
/// shape of an array.
inline std::string describe_returned(py::handle result) {
  const py::handle type = py::type::handle_of(result);
  const std::string module = py::str(type.attr("__module__"));
  std::string text = (module == "builtins" ? "" : module + ".") + std::string(py::str(type.attr("__qualname__")));
  if (py::hasattr(result, "dtype") && py::hasattr(result, "shape")) {
    std::vector<std::int64_t> shape;
    try {
      const py::object extents = result.attr("shape");
      for (const py::handle n : extents) shape.push_back(n.cast<std::int64_t>());
      text += " of " + std::string(py::str(result.attr("dtype"))) + ", shape " + detail::describe_shape(shape);
    } catch (const py::error_already_set&) {
    } catch (const py::cast_error&) {
    }
  }
  return text;
}

/// The C++ communicator over a Python callable, called with the GIL (verify runs without it).
/// What fn returns is read as it is, never converted: a 1-D uint8 CPU array (NumPy, anything else
/// with the buffer protocol, or a DLPack tensor) of ranks * bytes. Not bytes is a TypeError; the
/// wrong number of them InvalidInput, the type the other ranks raise when the ranks disagree on
/// their number (they see it in the gathered headers).
struct PyCommunicator {
  const py::function* fn;
  std::int32_t ranks;

  void all_gather(const void* send, std::size_t bytes, void* recv) const {
    py::gil_scoped_acquire gil;
    py::array_t<std::uint8_t> message(static_cast<py::ssize_t>(bytes));
    if (bytes) std::memcpy(message.mutable_data(), send, bytes);
    const py::object result = (*fn)(message);
    const std::size_t expected = bytes * static_cast<std::size_t>(ranks);
    const auto refuse = [&](const std::string& why) {
      return "specverify: all_gather returned " + describe_returned(result) +
             "; it must return a 1-D uint8 array of batch.shard.ranks * len(send) = " + std::to_string(ranks) +
             " * " + std::to_string(bytes) + " = " + std::to_string(expected) +
             " bytes, every rank's message in rank order" + why;
    };
    Array gathered;
    try {
      gathered = as_array(result, "all_gather's result", Elem::uint8, 1);
    } catch (const py::type_error&) {
      throw py::type_error(refuse(" (nothing is converted)"));
    } catch (const invalid_input& e) {
      const std::string what = e.what();
      throw invalid_input(refuse(" (" + what.substr(what.find(": ") + 2) + ")"));
    }
    expect_host(gathered, "all_gather's result", "verify(..., all_gather=fn)");
    if (static_cast<std::size_t>(gathered.shape[0]) != expected) throw invalid_input(refuse(""));
    if (expected) std::memcpy(recv, gathered.data, expected);
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
