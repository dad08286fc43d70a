// verify() over padded chains (specverify.padded): a ChainBatch or LogitsChainBatch in which every
// sequence owns K draft slots and K + 1 target rows, of which sequence b uses its first counts[b].
// The ragged layout packs sequence b's rows right after sequence b - 1's, so a padded [B, K+1, V]
// tensor with counts below K has gaps it cannot address; walking the all-K batch with shorter
// chains reads the rows in place instead, with the ragged API's uniforms (keyed by sequence and
// position, never by row).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <specverify/specverify.hpp>

#include "arrays.hpp"
#include "batches.hpp"
#include "rules.hpp"
#include "verify_batch.hpp"

namespace specverify::python {

namespace {

/// The chain layout of the all-K batch, cut to counts[b] drafts per sequence. Rows and per-draft
/// entries keep their padded places: sequence b's target rows start at b (K + 1), its drafts at b K.
struct PaddedLayout : core::ChainLayout {
  const std::int32_t* counts{};

  std::int32_t count(std::int32_t b) const { return counts[b]; }
  std::int32_t child(std::int32_t b, std::int32_t node, std::int32_t after) const {
    const std::int32_t next = node + 1;
    return next > after && next < count(b) ? next : -1;
  }
};

/// As verify_batch, with num_draft_tokens int32 [B] (each within its sequence's slots) copied
/// for the call like the offsets.
template <class PyBatch>
VerifyStats verify_padded(py::handle rule, const PyBatch& batch, py::handle num_draft_tokens,
                          const PyRandomness& randomness, const PyChainOutput& out, const py::int_& max_threads) {
  const std::int32_t threads = thread_cap(max_threads);
  Fresh<PyBatch, PyChainOutput> now(rule, batch, randomness, out);
  now.expect_host("specverify.padded");
  PyBatch& batch_now = now.batch;
  const PyChainOutput& out_now = now.out;
  const PyRandomness& random_now = now.randomness;
  const auto batch_view = batch_now.view();
  const Array counts = as_array(num_draft_tokens, "num_draft_tokens", Elem::int32, 1);
  expect_host(counts, "num_draft_tokens", "specverify.padded");
  expect_extent(counts, "num_draft_tokens", 0, batch_now.batch_size, "it needs one count per sequence");
  std::vector<std::int32_t> counts_copy;
  snapshot(counts, counts_copy);
  for (std::int32_t b = 0; b < batch_now.batch_size; ++b) {
    const std::int64_t slots = batch_now.offsets.count(b);
    if (counts_copy[b] < 0 || counts_copy[b] > slots) {
      reject("num_draft_tokens[", std::to_string(b), "] = ", std::to_string(counts_copy[b]), " must be in [0, ",
             std::to_string(slots), "]");
    }
  }
  const ChainOutput out_view = out_now.view(batch_now.batch_size);
  const Randomness random_view = random_now.view(batch_now.batch_size, batch_now.drafts());
  return with_rule<PyBatch::kShape>(rule, batch_now.drafts(), [&](const auto& cpp_rule) {
    py::gil_scoped_release release;
    return with_view(batch_view, [&](const auto& rows) {
      PaddedLayout layout;
      static_cast<core::ChainLayout&>(layout) = core::ChainLayout::of(rows);
      layout.counts = counts_copy.data();
      const CpuOptions options{threads};
      if constexpr (std::is_same<PyBatch, PyChainBatch>::value) {
        return cpu::detail::verify_probs<core::ChainLayout>(cpp_rule, rows, layout, random_view, out_view, options);
      } else {
        return cpu::detail::verify_logits<core::ChainLayout>(cpp_rule, rows, layout, random_view, out_view, options);
      }
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
