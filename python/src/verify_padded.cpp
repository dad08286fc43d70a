// verify() over padded chains (specverify.padded): a ChainBatch or LogitsChainBatch in which every
// sequence owns K draft slots and K + 1 target rows, of which sequence b uses its first counts[b]
// (core/padded_chain.hpp), read in place with the ragged API's uniforms (keyed by sequence and
// position, never by row), on the CPU or CUDA.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include <specverify/core/padded_chain.hpp>
#include <specverify/specverify.hpp>

#include "arrays.hpp"
#include "batches.hpp"
#include "rules.hpp"
#include "verify_batch.hpp"

namespace specverify::python {

namespace {

/// As verify_batch, with num_draft_tokens int32 [B] (each within its sequence's slots), on the
/// arrays' device: on the CPU copied for the call like the offsets; on CUDA read and checked on
/// the device (the call synchronises and raises like the CPU). Either way the counts are checked
/// with the batch by the shared checks (core/padded_chain.hpp).
template <class PyBatch>
VerifyStats verify_padded(py::handle rule, const PyBatch& batch, py::handle num_draft_tokens,
                          const PyRandomness& randomness, PyChainOutput& out, const py::int_& max_threads) {
  const std::int32_t threads = thread_cap(max_threads);
  const Array counts = as_array(num_draft_tokens, "num_draft_tokens", Elem::int32, 1);
  Fresh<PyBatch, PyChainOutput> now(rule, batch, randomness, out, {extent_of(counts, "num_draft_tokens", Elem::int32)});
  PyBatch& batch_now = now.batch;
  expect_extent(counts, "num_draft_tokens", 0, batch_now.batch_size, "it needs one count per sequence");
  if (now.device.cuda) {
    const py::object stats = verify_on_cuda(rule, now, out, py::none(), true, static_cast<const std::int32_t*>(counts.data));
    return stats.cast<VerifyStats>();
  }
  out.pending.reset();
  const PyChainOutput& out_now = now.out;
  const PyRandomness& random_now = now.randomness;
  const auto batch_view = batch_now.view();
  std::vector<std::int32_t> counts_copy;
  snapshot(counts, counts_copy);
  const ChainOutput out_view = out_now.view(batch_now.batch_size);
  const Randomness random_view = random_now.view(batch_now.batch_size, batch_now.drafts());
  return with_rule<PyBatch::kShape>(rule, batch_now.drafts(), [&](const auto& cpp_rule) {
    py::gil_scoped_release release;
    return with_view(batch_view, [&](const auto& rows) {
      const CpuOptions options{threads};
      return verify(cpp_rule, core::padded(rows, counts_copy.data()), random_view, out_view, options);
    });
  });
}

}  // namespace

void bind_padded(py::module_& m) {
  using namespace pybind11::literals;
  constexpr const char* doc =
      "verify() over a batch in which every sequence owns K draft slots (draft_offsets b K) and K + 1\n"
      "rows, walking only its first num_draft_tokens[b] drafts (specverify.padded builds the batch).";
  m.def("_verify_padded", &verify_padded<PyChainBatch>, "rule"_a, "batch"_a, "num_draft_tokens"_a,
        "randomness"_a, "out"_a, py::kw_only(), "max_threads"_a = 0, doc);
  m.def("_verify_padded", &verify_padded<PyLogitsChainBatch>, "rule"_a, "batch"_a, "num_draft_tokens"_a,
        "randomness"_a, "out"_a, py::kw_only(), "max_threads"_a = 0);
  m.def(
      "_accept_uniforms",
      [](const PyRandomness& randomness, std::int32_t batch_size, std::int32_t k) {
        if (batch_size < 0 || k < 0) reject("batch_size and k must be >= 0");
        const PyRandomness now = randomness.fresh();
        const Randomness r = now.view(batch_size, std::int64_t{batch_size} * k);
        py::array_t<float> u({batch_size, k});
        float* data = u.mutable_data();
        for (std::int32_t b = 0; b < batch_size; ++b) {
          for (std::int32_t j = 0; j < k; ++j) {
            data[std::int64_t{b} * k + j] = core::accept_uniform(r, b, j, std::int32_t(std::int64_t{b} * k + j));
          }
        }
        return u;
      },
      "randomness"_a, "batch_size"_a, "k"_a,
      "The acceptance uniforms verify uses at positions 0 .. k-1 of sequences 0 .. B-1 (float32 [B, k]).");
}

}  // namespace specverify::python
