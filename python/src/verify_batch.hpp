// The one verify path every batch type goes through, and the entry points that instantiate it
// (one translation unit per batch type, so the module builds in parallel).
#pragma once

#include <pybind11/pybind11.h>

#include <climits>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <specverify/specverify.hpp>

#include "batches.hpp"
#include "rules.hpp"

namespace specverify::python {

/// max_threads as the C++ options take it: any Python int that fits in int32 (a negative one is
/// the C++ library's invalid_input, as in C++).
inline std::int32_t thread_cap(const py::int_& max_threads) {
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(max_threads.ptr(), &overflow);
  if (overflow != 0 || n < INT32_MIN || n > INT32_MAX) {
    reject("max_threads = ", std::string(py::repr(max_threads)), " does not fit in int32");
  }
  return static_cast<std::int32_t>(n);
}

/// Calls fn with the C++ batch: a logits batch's view holds the batch of its rows' type.
template <class View, class Fn>
decltype(auto) with_view(const View& view, Fn&& fn) {
  return fn(view);
}
template <class... Views, class Fn>
decltype(auto) with_view(const std::variant<Views...>& view, Fn&& fn) {
  return std::visit(fn, view);
}

/// A call's arguments viewed as they are now (a caller may have resized an array since its object
/// was built), outputs refused where they share memory with an input or another output. Built with
/// the GIL; the fresh views hold the arrays' exporters until the call returns.
template <class PyBatch, class PyOut>
struct Fresh {
  PyBatch batch;
  PyOut out;
  PyRandomness randomness;

  Fresh(py::handle rule, const PyBatch& batch_, const PyRandomness& randomness_, const PyOut& out_)
      : batch(batch_.fresh()), out(out_.fresh()), randomness(randomness_.fresh()) {
    std::vector<Extent> inputs = batch.inputs();
    for (const Extent& e : randomness.inputs()) inputs.push_back(e);
    add_rule_inputs(rule, inputs);
    expect_apart(out.outputs(), inputs);
  }
};

/// The arguments made fresh, the C++ views built with their copies of the indices (with the GIL),
/// then call(rule, batch, randomness, out, options) without the GIL (specverify::verify, or its
/// sharded form).
template <class PyBatch, class PyOut, class Call>
VerifyStats verify_batch_with(py::handle rule, const PyBatch& batch, const PyRandomness& randomness,
                              const PyOut& out, const py::int_& max_threads, const Call& call) {
  const std::int32_t threads = thread_cap(max_threads);
  Fresh<PyBatch, PyOut> now(rule, batch, randomness, out);
  PyBatch& batch_now = now.batch;
  const PyOut& out_now = now.out;
  const PyRandomness& random_now = now.randomness;
  const auto batch_view = batch_now.view();
  const auto out_view = out_now.view(batch_now.batch_size);
  const Randomness random_view = random_now.view(batch_now.batch_size, batch_now.drafts());
  return with_rule<PyBatch::kShape>(rule, batch_now.drafts(), [&](const auto& cpp_rule) {
    py::gil_scoped_release release;
    return with_view(batch_view, [&](const auto& rows) {
      return call(cpp_rule, rows, random_view, out_view, CpuOptions{threads});
    });
  });
}

template <class PyBatch, class PyOut>
VerifyStats verify_batch(py::handle rule, const PyBatch& batch, const PyRandomness& randomness,
                         const PyOut& out, const py::int_& max_threads) {
  return verify_batch_with(rule, batch, randomness, out, max_threads, [](const auto&... args) {
    return specverify::verify(args...);
  });
}

VerifyStats verify_chains(py::handle rule, const PyChainBatch& batch, const PyRandomness& randomness,
                          const PyChainOutput& out, const py::int_& max_threads);
VerifyStats verify_logits_chains(py::handle rule, const PyLogitsChainBatch& batch, const PyRandomness& randomness,
                                 const PyChainOutput& out, const py::int_& max_threads);
VerifyStats verify_trees(py::handle rule, const PyTreeBatch& batch, const PyRandomness& randomness,
                         const PyTreeOutput& out, const py::int_& max_threads);
VerifyStats verify_logits_trees(py::handle rule, const PyLogitsTreeBatch& batch, const PyRandomness& randomness,
                                const PyTreeOutput& out, const py::int_& max_threads);

/// verify(..., all_gather=fn): this rank's slice of a sharded ChainBatch, the ranks gathered by fn.
VerifyStats verify_chains_sharded(py::handle rule, const PyChainBatch& batch, const PyRandomness& randomness,
                                  const PyChainOutput& out, const py::function& all_gather,
                                  const py::int_& max_threads);
/// verify(..., all_gather=fn) over a sharded LogitsChainBatch.
VerifyStats verify_logits_chains_sharded(py::handle rule, const PyLogitsChainBatch& batch,
                                         const PyRandomness& randomness, const PyChainOutput& out,
                                         const py::function& all_gather, const py::int_& max_threads);
/// verify(..., all_gather=fn) over a sharded TreeBatch.
VerifyStats verify_trees_sharded(py::handle rule, const PyTreeBatch& batch, const PyRandomness& randomness,
                                 const PyTreeOutput& out, const py::function& all_gather,
                                 const py::int_& max_threads);
/// verify(..., all_gather=fn) over a sharded LogitsTreeBatch.
VerifyStats verify_logits_trees_sharded(py::handle rule, const PyLogitsTreeBatch& batch,
                                        const PyRandomness& randomness, const PyTreeOutput& out,
                                        const py::function& all_gather, const py::int_& max_threads);

/// Binds _verify_padded and _accept_uniforms, the C++ half of specverify.padded.
void bind_padded(py::module_& m);

}  // namespace specverify::python
