// specverify for Python: the API.md names over NumPy arrays and PyTorch CPU tensors, zero-copy.
//
// Each batch type is a class that views its arrays once (shapes checked against each other at
// construction) and builds its C++ struct per call (checks that read data, such as
// draft_offsets[B], happen then, with the GIL held). verify() has one overload per batch type,
// all going through verify_batch(). A new batch type is a Py*Batch struct with drafts() and
// view(), its class binding, and one more verify overload.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <sstream>
#include <string>

#include <specverify/specverify.hpp>

#include "arrays.hpp"
#include "rules.hpp"

namespace specverify::python {

namespace {

using namespace pybind11::literals;

/// ChainBatch: draft_offsets int32 [B+1], draft_tokens int32 [N], target_probs float32 [N+B, V]
/// (rows may be strided), draft_probs float32 [N, V] or None, target_row_max float32 [N+B] or None.
struct PyChainBatch {
  Array draft_offsets, draft_tokens, target_probs, draft_probs, target_row_max;
  std::int32_t batch_size = 0;
  std::int32_t vocab_size = 0;

  PyChainBatch(py::handle offsets, py::handle tokens, py::handle target, py::handle draft,
               py::handle row_max)
      : draft_offsets(as_array(offsets, "draft_offsets", Elem::int32, 1)),
        draft_tokens(as_array(tokens, "draft_tokens", Elem::int32, 1)),
        target_probs(as_array(target, "target_probs", Elem::float32, 2)),
        draft_probs(as_array(draft, "draft_probs", Elem::float32, 2, false, true)),
        target_row_max(as_array(row_max, "target_row_max", Elem::float32, 1, false, true)) {
    if (draft_offsets.rows() < 1) reject("draft_offsets must hold B + 1 >= 1 offsets, got none");
    batch_size = as_int32(draft_offsets.rows() - 1, "batch size");
    vocab_size = as_int32(target_probs.shape[1], "vocab size");
    const std::int64_t rows = drafts() + batch_size;
    const std::string n = std::to_string(drafts()), b = std::to_string(batch_size);
    expect_extent(target_probs, "target_probs", 0, rows,
                  "it needs N + B = " + n + " + " + b + " rows (one per draft token plus one bonus row per sequence)");
    expect_rows_apart(target_probs, "target_probs");
    if (draft_probs.present()) {
      expect_extent(draft_probs, "draft_probs", 0, drafts(), "it needs N = " + n + " rows (one per draft token)");
      expect_extent(draft_probs, "draft_probs", 1, vocab_size,
                    "its rows must be as long as target_probs' (V = " + std::to_string(vocab_size) + ")");
      expect_rows_apart(draft_probs, "draft_probs");
    }
    if (target_row_max.present()) {
      expect_extent(target_row_max, "target_row_max", 0, rows,
                    "it needs one value per target row (" + std::to_string(rows) + ")");
    }
  }

  std::int64_t drafts() const { return draft_tokens.rows(); }

  /// The C++ view, once draft_offsets agrees with draft_tokens (read now: the caller may have
  /// rewritten it since construction). The C++ side validates the offsets themselves.
  ChainBatch<float> view() const {
    const std::int32_t total = draft_offsets.as<const std::int32_t>()[batch_size];
    if (batch_size > 0 && total != drafts()) {
      reject("draft_offsets[B] = ", std::to_string(total), " but draft_tokens holds ",
             std::to_string(drafts()), " tokens");
    }
    return {batch_size,
            vocab_size,
            draft_offsets.as<const std::int32_t>(),
            draft_tokens.as<const std::int32_t>(),
            target_probs.as<const float>(),
            draft_probs.as<const float>(),
            target_probs.row_stride(),
            draft_probs.present() ? draft_probs.row_stride() : 0,
            target_row_max.as<const float>()};
  }
};

/// ChainOutput: tokens int32 [B, row_width] with contiguous rows, num_accepted int32 [B].
struct PyChainOutput {
  Array tokens, num_accepted;

  PyChainOutput(py::handle tokens_, py::handle num_accepted_)
      : tokens(as_array(tokens_, "tokens", Elem::int32, 2, true)),
        num_accepted(as_array(num_accepted_, "num_accepted", Elem::int32, 1, true)) {
    // ChainOutput has no row stride: row b starts at b * row_width.
    if (tokens.shape[0] > 1 && tokens.strides[0] != tokens.shape[1]) {
      reject("tokens: rows must be contiguous and adjacent (row stride ",
             std::to_string(tokens.strides[0]), " != row width ", std::to_string(tokens.shape[1]), ")");
    }
    as_int32(tokens.shape[1], "tokens row width");
    expect_extent(num_accepted, "num_accepted", 0, tokens.shape[0],
                  "tokens has " + std::to_string(tokens.shape[0]) + " rows");
  }

  ChainOutput view(std::int32_t batch_size) const {
    expect_extent(tokens, "tokens", 0, batch_size,
                  "the batch has B = " + std::to_string(batch_size) + " sequences");
    return {tokens.as<std::int32_t>(), static_cast<std::int32_t>(tokens.shape[1]),
            num_accepted.as<std::int32_t>()};
  }
};

/// Randomness: seed and offset, optional sequence_seeds uint64/int64 [B], accept_uniforms
/// float32 [N], sample_uniforms float32 [B].
struct PyRandomness {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  Array sequence_seeds, accept_uniforms, sample_uniforms;

  Randomness view(std::int64_t batch_size, std::int64_t drafts) const {
    const std::string b = std::to_string(batch_size);
    if (sequence_seeds.present()) {
      expect_extent(sequence_seeds, "sequence_seeds", 0, batch_size, "the batch has B = " + b + " sequences");
    }
    if (accept_uniforms.present()) {
      expect_extent(accept_uniforms, "accept_uniforms", 0, drafts,
                    "it needs one uniform per draft token (" + std::to_string(drafts) + ")");
    }
    if (sample_uniforms.present()) {
      expect_extent(sample_uniforms, "sample_uniforms", 0, batch_size, "the batch has B = " + b + " sequences");
    }
    return {seed, offset, sequence_seeds.as<const std::uint64_t>(),
            accept_uniforms.as<const float>(), sample_uniforms.as<const float>()};
  }
};

/// The one verify path every batch type goes through: build the C++ views (all checks, with the
/// GIL), then run without the GIL. The Python objects stay referenced by the call's arguments,
/// so the arrays they hold outlive it.
template <class PyBatch, class PyOutput>
VerifyStats verify_batch(py::handle rule, const PyBatch& batch, const PyRandomness& randomness,
                         const PyOutput& out, std::int32_t max_threads) {
  if (max_threads < 0) reject("max_threads = ", std::to_string(max_threads), " must be >= 0");
  const auto batch_view = batch.view();
  const auto out_view = out.view(batch.batch_size);
  const Randomness random_view = randomness.view(batch.batch_size, batch.drafts());
  return with_rule(rule, batch.drafts(), [&](const auto& cpp_rule) {
    py::gil_scoped_release release;
    return specverify::verify(cpp_rule, batch_view, random_view, out_view, CpuOptions{max_threads});
  });
}

std::string stats_repr(const VerifyStats& s) {
  std::ostringstream r;
  r << "VerifyStats(drafted=" << s.drafted << ", accepted=" << s.accepted
    << ", relaxed=" << s.relaxed << ", target_checked=" << s.target_checked << ")";
  return r.str();
}

}  // namespace

void bind_module(py::module_& m) {
  m.doc() = "specverify: speculative-decoding verification rules over NumPy arrays and PyTorch CPU "
            "tensors, zero-copy.";
  m.attr("kNoToken") = kNoToken;
  py::register_exception<invalid_input>(m, "InvalidInput", PyExc_ValueError);

  bind_rules(m);

  py::class_<PyChainBatch>(m, "ChainBatch",
                           "Draft chains and their rows, viewed in place (held until this object dies).\n"
                           "draft_offsets: int32 [B+1]; draft_tokens: int32 [N];\n"
                           "target_probs: float32 [N+B, V] (row stride free, elements contiguous);\n"
                           "draft_probs: float32 [N, V] or None (one-hot drafts);\n"
                           "target_row_max: float32 [N+B] or None.")
      .def(py::init<py::handle, py::handle, py::handle, py::handle, py::handle>(), py::kw_only(),
           "draft_offsets"_a, "draft_tokens"_a, "target_probs"_a, "draft_probs"_a = py::none(),
           "target_row_max"_a = py::none())
      .def_readonly("batch_size", &PyChainBatch::batch_size)
      .def_readonly("vocab_size", &PyChainBatch::vocab_size)
      .def_property_readonly("target_stride", [](const PyChainBatch& b) { return b.target_probs.row_stride(); })
      .def_property_readonly("draft_stride", [](const PyChainBatch& b) {
        return b.draft_probs.present() ? b.draft_probs.row_stride() : 0;
      })
      .def_property_readonly("draft_offsets", [](const PyChainBatch& b) { return b.draft_offsets.source; })
      .def_property_readonly("draft_tokens", [](const PyChainBatch& b) { return b.draft_tokens.source; })
      .def_property_readonly("target_probs", [](const PyChainBatch& b) { return b.target_probs.source; })
      .def_property_readonly("draft_probs", [](const PyChainBatch& b) { return source_or_none(b.draft_probs); })
      .def_property_readonly("target_row_max",
                             [](const PyChainBatch& b) { return source_or_none(b.target_row_max); })
      .def("__repr__", [](const PyChainBatch& b) {
        return "ChainBatch(batch_size=" + std::to_string(b.batch_size) + ", vocab_size=" +
               std::to_string(b.vocab_size) + ", drafts=" + std::to_string(b.drafts()) + ")";
      });

  py::class_<PyChainOutput>(m, "ChainOutput",
                            "Where verify writes: tokens int32 [B, row_width] (contiguous rows; n_b\n"
                            "accepted drafts, one more token, then kNoToken), num_accepted int32 [B].")
      .def(py::init<py::handle, py::handle>(), py::kw_only(), "tokens"_a, "num_accepted"_a)
      .def_property_readonly("tokens", [](const PyChainOutput& o) { return o.tokens.source; })
      .def_property_readonly("num_accepted", [](const PyChainOutput& o) { return o.num_accepted.source; })
      .def_property_readonly("row_width", [](const PyChainOutput& o) { return o.tokens.shape[1]; });

  py::class_<PyRandomness>(m, "Randomness",
                           "Seed and step offset (advance it between steps) for the built-in Philox\n"
                           "streams; optional sequence_seeds uint64/int64 [B] (batch-invariant results),\n"
                           "accept_uniforms float32 [N] and sample_uniforms float32 [B] in [0, 1).")
      .def(py::init([](std::uint64_t seed, std::uint64_t offset, py::handle sequence_seeds,
                       py::handle accept_uniforms, py::handle sample_uniforms) {
             return PyRandomness{
                 seed, offset,
                 as_array(sequence_seeds, "sequence_seeds", Elem::seed64, 1, false, true),
                 as_array(accept_uniforms, "accept_uniforms", Elem::float32, 1, false, true),
                 as_array(sample_uniforms, "sample_uniforms", Elem::float32, 1, false, true)};
           }),
           "seed"_a = 0, "offset"_a = 0, py::kw_only(), "sequence_seeds"_a = py::none(),
           "accept_uniforms"_a = py::none(), "sample_uniforms"_a = py::none())
      .def_readwrite("seed", &PyRandomness::seed)
      .def_readwrite("offset", &PyRandomness::offset)
      .def_property_readonly("sequence_seeds", [](const PyRandomness& r) { return source_or_none(r.sequence_seeds); })
      .def_property_readonly("accept_uniforms",
                             [](const PyRandomness& r) { return source_or_none(r.accept_uniforms); })
      .def_property_readonly("sample_uniforms",
                             [](const PyRandomness& r) { return source_or_none(r.sample_uniforms); })
      .def("__repr__", [](const PyRandomness& r) {
        return "Randomness(seed=" + std::to_string(r.seed) + ", offset=" + std::to_string(r.offset) + ", ...)";
      });

  py::class_<VerifyStats>(m, "VerifyStats", "Counts over the batch from one verify call.")
      .def(py::init<>())
      .def_readonly("drafted", &VerifyStats::drafted, "positions offered: sum of k_b")
      .def_readonly("accepted", &VerifyStats::accepted, "sum of n_b")
      .def_readonly("relaxed", &VerifyStats::relaxed, "accepted only through a lossy path")
      .def_readonly("target_checked", &VerifyStats::target_checked, "positions whose decision consulted p")
      .def("__eq__", [](const VerifyStats& a, const VerifyStats& b) {
        return a.drafted == b.drafted && a.accepted == b.accepted && a.relaxed == b.relaxed &&
               a.target_checked == b.target_checked;
      })
      .def("__repr__", &stats_repr);

  m.def(
      "verify",
      [](py::handle rule, const PyChainBatch& batch, const PyRandomness& randomness,
         const PyChainOutput& out, std::int32_t max_threads) {
        return verify_batch(rule, batch, randomness, out, max_threads);
      },
      "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(), "max_threads"_a = 0,
      "Verifies the batch with `rule`, writes `out` and returns VerifyStats. Raises InvalidInput\n"
      "(a ValueError) before writing anything when the input is malformed. Releases the GIL while\n"
      "it runs. max_threads: 0 uses every hardware thread once the batch is large enough.");
}

}  // namespace specverify::python

PYBIND11_MODULE(_core, m) { specverify::python::bind_module(m); }
