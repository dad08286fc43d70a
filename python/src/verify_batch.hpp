// The one verify path every batch type goes through, and the entry points that instantiate it
// (one translation unit per batch type, so the module builds in parallel).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <type_traits>

#include <specverify/specverify.hpp>

#include "batches.hpp"
#include "rules.hpp"

namespace specverify::python {

/// Builds the C++ views (all checks, with the GIL), then runs without the GIL. The Python objects
/// stay referenced by the call's arguments, so the arrays they hold outlive it.
template <class PyBatch, class PyOut>
VerifyStats verify_batch(py::handle rule, const PyBatch& batch, const PyRandomness& randomness,
                         const PyOut& out, std::int32_t max_threads) {
  if (max_threads < 0) reject("max_threads = ", std::to_string(max_threads), " must be >= 0");
  const auto batch_view = batch.view();
  const auto out_view = out.view(batch.batch_size);
  const Randomness random_view = randomness.view(batch.batch_size, batch.drafts());
  return with_rule<PyBatch::kShape>(rule, batch.drafts(), [&](const auto& cpp_rule) {
    using Rule = std::decay_t<decltype(cpp_rule)>;
    // The C++ library checks this for logits batches only; over probability rows it would read
    // through the null pointer (reported upstream).
    if constexpr (rule_traits<Rule>::on_reject == Draw::coupled) {
      if (!random_view.positions) {
        throw invalid_input("specverify::verify: randomness.positions is null (Coupled keys its samples by position)");
      }
    }
    py::gil_scoped_release release;
    return specverify::verify(cpp_rule, batch_view, random_view, out_view, CpuOptions{max_threads});
  });
}

VerifyStats verify_chains(py::handle rule, const PyChainBatch& batch, const PyRandomness& randomness,
                          const PyChainOutput& out, std::int32_t max_threads);
VerifyStats verify_logits_chains(py::handle rule, const PyLogitsChainBatch& batch, const PyRandomness& randomness,
                                 const PyChainOutput& out, std::int32_t max_threads);
VerifyStats verify_trees(py::handle rule, const PyTreeBatch& batch, const PyRandomness& randomness,
                         const PyTreeOutput& out, std::int32_t max_threads);
VerifyStats verify_logits_trees(py::handle rule, const PyLogitsTreeBatch& batch, const PyRandomness& randomness,
                                const PyTreeOutput& out, std::int32_t max_threads);

}  // namespace specverify::python
