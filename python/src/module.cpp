// specverify for Python: the C++ API's names (docs/api.md) over NumPy arrays and PyTorch tensors, zero-copy.
//
// Each batch type (batches.hpp) is a class that views its arrays once and builds its C++ struct
// per call. verify() has one overload per batch type, all going through verify_batch()
// (verify_batch.hpp), which runs the CPU backend, or the CUDA one for CUDA arrays
// (cuda_verify.hpp). A new batch type is a Py*Batch struct with drafts(), view() and kShape, its
// class binding, and one more verify overload.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <sstream>
#include <string>

#include <specverify/specverify.hpp>

#include "arrays.hpp"
#include "batches.hpp"
#include "rules.hpp"
#include "verify_batch.hpp"

namespace specverify::python {

namespace {

using namespace pybind11::literals;

std::string stats_repr(const VerifyStats& s) {
  std::ostringstream r;
  r << "VerifyStats(drafted=" << s.drafted << ", accepted=" << s.accepted
    << ", relaxed=" << s.relaxed << ", target_checked=" << s.target_checked << ")";
  return r.str();
}

/// Properties returning the arrays an object was given (None where absent).
template <class Base, class T = Base>
auto source_of(Array Base::*member) {
  return [member](const T& self) { return source_or_none(self.*member); };
}
template <class T>
auto offsets_source(const T& self) { return self.offsets.offsets.source; }
template <class T>
auto tokens_source(const T& self) { return self.offsets.draft_tokens.source; }
template <class T>
auto field_source(Array PyLogitsFields::*member) {
  return [member](const T& self) { return source_or_none(self.fields.*member); };
}

/// The size and stride properties every batch class has.
template <class T, class Class>
void batch_sizes(Class& cls, Array T::*target, Array T::*draft) {
  cls.def_readonly("batch_size", &T::batch_size)
      .def_readonly("vocab_size", &T::vocab_size)
      .def_property_readonly("target_stride", [target](const T& b) { return (b.*target).row_stride(); })
      .def_property_readonly("draft_stride", [draft](const T& b) {
        return (b.*draft).present() ? (b.*draft).row_stride() : 0;
      })
      .def("__repr__", [name = std::string(py::str(cls.attr("__name__")))](const T& b) {
        return name + "(batch_size=" + std::to_string(b.batch_size) + ", vocab_size=" + std::to_string(b.vocab_size) +
               ", drafts=" + std::to_string(b.drafts()) + ")";
      });
}

/// The properties LogitsChainBatch and LogitsTreeBatch share.
template <class T, class Class>
void logits_fields(Class& cls) {
  cls.def_property_readonly("draft_vocab_size",
                            [](const T& b) { return b.fields.draft_row_length(b.vocab_size); })
      .def_property_readonly("unconditional_stride", [](const T& b) {
        return b.fields.unconditional_logits.present() ? b.fields.unconditional_logits.row_stride() : 0;
      })
      .def_property_readonly("target_params", field_source<T>(&PyLogitsFields::target_params))
      .def_property_readonly("draft_params", field_source<T>(&PyLogitsFields::draft_params))
      .def_property_readonly("draft_to_target", field_source<T>(&PyLogitsFields::draft_to_target))
      .def_property_readonly("unconditional_logits", field_source<T>(&PyLogitsFields::unconditional_logits))
      .def_property_readonly("unconditional_first_row", field_source<T>(&PyLogitsFields::unconditional_first_row))
      .def_property_readonly("guidance_scale", field_source<T>(&PyLogitsFields::guidance_scale))
      .def_property_readonly("allowed_tokens", field_source<T>(&PyLogitsFields::allowed_tokens));
  for (const auto& [list, names] : {std::pair{&PyLogitsFields::history, &kHistory}, {&PyLogitsFields::bias, &kBias}}) {
    const auto of = [list = list](const T& b) -> const PyTokenList& { return b.fields.*list; };
    cls.def_property_readonly(names->offsets, [of](const T& b) { return source_or_none(of(b).offsets); })
        .def_property_readonly(names->tokens, [of](const T& b) { return source_or_none(of(b).entries.tokens); })
        .def_property_readonly(names->values, [of](const T& b) { return source_or_none(of(b).entries.values); });
  }
}

constexpr const char* kLogitsFieldsDoc =
    "target_params: the sequences' SamplingParams, a NumPy array of SamplingParams.dtype [B]\n"
    "  (sv.sampling_params builds one); draft_params: likewise, what the drafter sampled with, or\n"
    "  None (the target's);\n"
    "draft_to_target: int32 [Vd], the target id of each draft id (reduced draft vocabulary; the\n"
    "  draft rows are then Vd long), or None;\n"
    "unconditional_logits: [U, V] classifier-free guidance rows (target_logits' dtype), with\n"
    "  unconditional_first_row int64 [B] (sequence b's first row, its k_b + 1 rows follow; -1: no\n"
    "  guidance) and guidance_scale float32 [B], or None;\n"
    "allowed_tokens: uint32 (or int32) [N+B, ceil(V/32)] grammar bitmask, adjacent rows (the\n"
    "  xgrammar layout: bit v % 32 of word v / 32 set = token v allowed), or None;\n"
    "history_offsets: int32 [B+1] with history_tokens int32 (sequence b's entries\n"
    "  history_offsets[b] ..: every token of its prompt and output, ascending, unique) and\n"
    "  history_counts int32 (times each was generated, >= 0), for the penalties of its\n"
    "  SamplingParams (the drafts on a row's path count too), or None;\n"
    "bias_offsets: int32 [B+1] with bias_tokens int32 (unique per sequence) and bias_values\n"
    "  float32 (finite, added to the target logit), or None.";

}  // namespace

void bind_module(py::module_& m) {
  m.doc() = "specverify: speculative-decoding verification rules over NumPy arrays and PyTorch "
            "tensors (CPU and CUDA), zero-copy.";
  m.attr("kNoToken") = kNoToken;
  py::register_exception<invalid_input>(m, "InvalidInput", PyExc_ValueError);
  PYBIND11_NUMPY_DTYPE(SamplingParams, temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
                       frequency_penalty);
  static_assert(sizeof(SamplingParams) == 28 && offsetof(SamplingParams, top_k) == 4 &&
                    offsetof(SamplingParams, top_p) == 8 && offsetof(SamplingParams, min_p) == 12 &&
                    offsetof(SamplingParams, repetition_penalty) == 16 &&
                    offsetof(SamplingParams, presence_penalty) == 20 && offsetof(SamplingParams, frequency_penalty) == 24,
                "SamplingParams.dtype documents this layout");

  bind_rules(m);

  py::class_<SamplingParams> sampling_params(
      m, "SamplingParams",
      "One sequence's sampling parameters; the defaults change nothing.\n"
      "temperature >= 0 (0: greedy), top_k >= 0 (0: off), top_p in (0, 1] (1: off),\n"
      "min_p in [0, 1] (0: off), repetition_penalty > 0 (1: off), presence_penalty and\n"
      "frequency_penalty finite (0: off). Batches take them per sequence as a NumPy array of\n"
      "SamplingParams.dtype (viewed in place): see sampling_params().");
  // Floats taken as double and rounded here: pybind11's float conversion would make 1e40 inf and
  // 1e-50 0 without a word.
  sampling_params
      .def(py::init([](double temperature, std::int32_t top_k, double top_p, double min_p, double repetition_penalty,
                       double presence_penalty, double frequency_penalty) {
             return SamplingParams{as_float32(temperature, "SamplingParams temperature"), top_k,
                                   as_float32(top_p, "SamplingParams top_p"), as_float32(min_p, "SamplingParams min_p"),
                                   as_float32(repetition_penalty, "SamplingParams repetition_penalty"),
                                   as_float32(presence_penalty, "SamplingParams presence_penalty"),
                                   as_float32(frequency_penalty, "SamplingParams frequency_penalty")};
           }),
           py::kw_only(), "temperature"_a = 1.0, "top_k"_a = 0, "top_p"_a = 1.0, "min_p"_a = 0.0,
           "repetition_penalty"_a = 1.0, "presence_penalty"_a = 0.0, "frequency_penalty"_a = 0.0)
      .def_readwrite("top_k", &SamplingParams::top_k);
  float32_property(sampling_params, "temperature", "SamplingParams temperature", &SamplingParams::temperature);
  float32_property(sampling_params, "top_p", "SamplingParams top_p", &SamplingParams::top_p);
  float32_property(sampling_params, "min_p", "SamplingParams min_p", &SamplingParams::min_p);
  float32_property(sampling_params, "repetition_penalty", "SamplingParams repetition_penalty",
                   &SamplingParams::repetition_penalty);
  float32_property(sampling_params, "presence_penalty", "SamplingParams presence_penalty",
                   &SamplingParams::presence_penalty);
  float32_property(sampling_params, "frequency_penalty", "SamplingParams frequency_penalty",
                   &SamplingParams::frequency_penalty);
  sampling_params
      .def("__eq__", [](const SamplingParams& a, const SamplingParams& b) {
        return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p && a.min_p == b.min_p &&
               a.repetition_penalty == b.repetition_penalty && a.presence_penalty == b.presence_penalty &&
               a.frequency_penalty == b.frequency_penalty;
      })
      .def("__repr__", [](const SamplingParams& p) {
        std::ostringstream r;
        r << "SamplingParams(temperature=" << p.temperature << ", top_k=" << p.top_k << ", top_p=" << p.top_p
          << ", min_p=" << p.min_p << ", repetition_penalty=" << p.repetition_penalty
          << ", presence_penalty=" << p.presence_penalty << ", frequency_penalty=" << p.frequency_penalty << ")";
        return r.str();
      })
      .attr("dtype") = py::dtype::of<SamplingParams>();

  py::enum_<Drafted>(m, "Drafted", "How the children of each tree node were drafted.")
      .value("sampled", Drafted::sampled, "independently from q (with replacement; duplicates allowed)")
      .value("sampled_without_replacement", Drafted::sampled_without_replacement,
             "one after another from q with earlier siblings removed")
      .value("deterministic", Drafted::deterministic, "chosen without sampling (top-k of q, beam, lookup)");

  py::class_<VocabShard>(m, "VocabShard",
                         "This rank's slice of the vocabulary (sharded verify): element i of the batch's rows\n"
                         "is token vocab_start + i; rank 0 of 1 holding everything is the default.")
      .def(py::init([](std::int32_t rank, std::int32_t ranks, std::int32_t vocab_start, std::int32_t local_vocab_size) {
             return VocabShard{rank, ranks, vocab_start, local_vocab_size};
           }),
           py::kw_only(), "rank"_a = 0, "ranks"_a = 1, "vocab_start"_a = 0, "local_vocab_size"_a = 0)
      .def_readwrite("rank", &VocabShard::rank)
      .def_readwrite("ranks", &VocabShard::ranks)
      .def_readwrite("vocab_start", &VocabShard::vocab_start)
      .def_readwrite("local_vocab_size", &VocabShard::local_vocab_size)
      .def("__repr__", [](const VocabShard& s) {
        return "VocabShard(rank=" + std::to_string(s.rank) + ", ranks=" + std::to_string(s.ranks) +
               ", vocab_start=" + std::to_string(s.vocab_start) + ", local_vocab_size=" +
               std::to_string(s.local_vocab_size) + ")";
      });

  py::class_<PyChainBatch> chain(m, "ChainBatch",
                                 "Draft chains and their rows, viewed in place (held until this object dies).\n"
                                 "draft_offsets: int32 [B+1]; draft_tokens: int32 [N];\n"
                                 "target_probs: float32 [N+B, V] (row stride free, elements contiguous);\n"
                                 "draft_probs: float32 [N, V] or None (one-hot drafts);\n"
                                 "target_row_max: float32 [N+B] or None;\n"
                                 "shard: a VocabShard or None, vocab_size: V where the rows hold a shard's slice.");
  chain.def(py::init<py::handle, py::handle, py::handle, py::handle, py::handle, py::handle, py::handle>(),
            py::kw_only(), "draft_offsets"_a, "draft_tokens"_a, "target_probs"_a, "draft_probs"_a = py::none(),
            "target_row_max"_a = py::none(), "shard"_a = py::none(), "vocab_size"_a = py::none())
      .def_property_readonly("shard", [](const PyChainBatch& b) { return b.shard; })
      .def_property_readonly("draft_offsets", &offsets_source<PyChainBatch>)
      .def_property_readonly("draft_tokens", &tokens_source<PyChainBatch>)
      .def_property_readonly("target_probs", source_of(&PyChainBatch::target_probs))
      .def_property_readonly("draft_probs", source_of(&PyChainBatch::draft_probs))
      .def_property_readonly("target_row_max", source_of(&PyChainBatch::target_row_max));
  batch_sizes(chain, &PyChainBatch::target_probs, &PyChainBatch::draft_probs);

  py::class_<PyTreeBatch> tree(m, "TreeBatch",
                               "Draft trees and their rows, viewed in place (held until this object dies).\n"
                               "node_offsets: int32 [B+1] (sequence b owns nodes node_offsets[b] ..);\n"
                               "parents: int32 [N], sequence-local, -1 = child of the root, parents[i] < i;\n"
                               "draft_tokens: int32 [N]; target_probs: float32 [N+B, V] (sequence b's rows\n"
                               "start at node_offsets[b] + b: p at the root, then p after each node);\n"
                               "draft_probs: float32 [N+B, V] laid out alike (the q each node's children were\n"
                               "drafted from), or None for Drafted.deterministic; drafted: a Drafted;\n"
                               "shard: a VocabShard or None, vocab_size: V where the rows hold a shard's slice.");
  tree.def(py::init<py::handle, py::handle, py::handle, py::handle, py::handle, Drafted, py::handle, py::handle>(),
           py::kw_only(), "node_offsets"_a, "parents"_a, "draft_tokens"_a, "target_probs"_a,
           "draft_probs"_a = py::none(), "drafted"_a = Drafted::sampled, "shard"_a = py::none(),
           "vocab_size"_a = py::none())
      .def_property_readonly("shard", [](const PyTreeBatch& b) { return b.shard; })
      .def_readonly("drafted", &PyTreeBatch::drafted)
      .def_property_readonly("node_offsets", &offsets_source<PyTreeBatch>)
      .def_property_readonly("parents", [](const PyTreeBatch& b) { return b.parents.source; })
      .def_property_readonly("draft_tokens", &tokens_source<PyTreeBatch>)
      .def_property_readonly("target_probs", source_of(&PyTreeBatch::target_probs))
      .def_property_readonly("draft_probs", source_of(&PyTreeBatch::draft_probs));
  batch_sizes(tree, &PyTreeBatch::target_probs, &PyTreeBatch::draft_probs);

  py::class_<PyLogitsChainBatch> logits_chain(
      m, "LogitsChainBatch",
      (std::string("Draft chains whose rows are logits; verify applies each sequence's sampling parameters\n"
                   "(guidance, logit bias, penalties, bitmask, temperature, top_k, top_p, min_p) itself,\n"
                   "writing no probability rows.\n"
                   "draft_offsets, draft_tokens: as ChainBatch; target_logits: float32, float16 or bfloat16\n"
                   "[N+B, V] (read in place in the model's dtype, widened exactly);\n"
                   "draft_logits: [N, Vd] of the same dtype, or None (one-hot drafts);\n") + kLogitsFieldsDoc).c_str());
  logits_chain
      .def(py::init<py::handle, py::handle, py::handle, py::handle, py::handle, py::handle, py::handle, py::handle,
                    py::handle, py::handle, py::handle, py::handle, py::handle, py::handle, py::handle, py::handle,
                    py::handle, py::handle, py::handle>(),
           py::kw_only(), "draft_offsets"_a, "draft_tokens"_a, "target_logits"_a, "draft_logits"_a = py::none(),
           "target_params"_a, "draft_params"_a = py::none(), "draft_to_target"_a = py::none(),
           "unconditional_logits"_a = py::none(), "unconditional_first_row"_a = py::none(),
           "guidance_scale"_a = py::none(), "allowed_tokens"_a = py::none(), "history_offsets"_a = py::none(),
           "history_tokens"_a = py::none(), "history_counts"_a = py::none(), "bias_offsets"_a = py::none(),
           "bias_tokens"_a = py::none(), "bias_values"_a = py::none(), "shard"_a = py::none(),
           "vocab_size"_a = py::none())
      .def_property_readonly("shard", [](const PyLogitsChainBatch& b) { return b.shard; })
      .def_property_readonly("draft_offsets", &offsets_source<PyLogitsChainBatch>)
      .def_property_readonly("draft_tokens", &tokens_source<PyLogitsChainBatch>)
      .def_property_readonly("target_logits", source_of(&PyLogitsChainBatch::target_logits))
      .def_property_readonly("draft_logits", source_of(&PyLogitsChainBatch::draft_logits));
  batch_sizes(logits_chain, &PyLogitsChainBatch::target_logits, &PyLogitsChainBatch::draft_logits);
  logits_fields<PyLogitsChainBatch>(logits_chain);

  py::class_<PyLogitsTreeBatch> logits_tree(
      m, "LogitsTreeBatch",
      (std::string("Draft trees whose rows are logits: TreeBatch's layout (node_offsets, parents,\n"
                   "draft_tokens, drafted; target_logits float32, float16 or bfloat16 [N+B, V], draft_logits\n"
                   "[N+B, Vd] of the same dtype or None) with LogitsChainBatch's per-sequence fields:\n") +
       kLogitsFieldsDoc).c_str());
  logits_tree
      .def(py::init<py::handle, py::handle, py::handle, py::handle, py::handle, Drafted, py::handle, py::handle,
                    py::handle, py::handle, py::handle, py::handle, py::handle, py::handle, py::handle, py::handle,
                    py::handle, py::handle, py::handle, py::handle, py::handle>(),
           py::kw_only(), "node_offsets"_a, "parents"_a, "draft_tokens"_a, "target_logits"_a,
           "draft_logits"_a = py::none(), "drafted"_a = Drafted::sampled, "target_params"_a,
           "draft_params"_a = py::none(), "draft_to_target"_a = py::none(), "unconditional_logits"_a = py::none(),
           "unconditional_first_row"_a = py::none(), "guidance_scale"_a = py::none(),
           "allowed_tokens"_a = py::none(), "history_offsets"_a = py::none(), "history_tokens"_a = py::none(),
           "history_counts"_a = py::none(), "bias_offsets"_a = py::none(), "bias_tokens"_a = py::none(),
           "bias_values"_a = py::none(), "shard"_a = py::none(), "vocab_size"_a = py::none())
      .def_property_readonly("shard", [](const PyLogitsTreeBatch& b) { return b.shard; })
      .def_readonly("drafted", &PyLogitsTreeBatch::drafted)
      .def_property_readonly("node_offsets", &offsets_source<PyLogitsTreeBatch>)
      .def_property_readonly("parents", [](const PyLogitsTreeBatch& b) { return b.parents.source; })
      .def_property_readonly("draft_tokens", &tokens_source<PyLogitsTreeBatch>)
      .def_property_readonly("target_logits", source_of(&PyLogitsTreeBatch::target_logits))
      .def_property_readonly("draft_logits", source_of(&PyLogitsTreeBatch::draft_logits));
  batch_sizes(logits_tree, &PyLogitsTreeBatch::target_logits, &PyLogitsTreeBatch::draft_logits);
  logits_fields<PyLogitsTreeBatch>(logits_tree);

  py::class_<PyChainOutput>(m, "ChainOutput",
                            "Where verify writes for chains: tokens int32 [B, row_width] (adjacent rows; n_b\n"
                            "accepted drafts, one more token, then kNoToken), num_accepted int32 [B], and\n"
                            "optionally logprobs float32 [B, row_width]: log p(token) under the (processed)\n"
                            "target row each token was emitted from; kNoToken slots are left as they are.")
      .def(py::init<py::handle, py::handle, py::handle>(), py::kw_only(), "tokens"_a, "num_accepted"_a,
           "logprobs"_a = py::none())
      .def_property_readonly("tokens", [](const PyChainOutput& o) { return o.tokens.source; })
      .def_property_readonly("num_accepted", [](const PyChainOutput& o) { return o.num_accepted.source; })
      .def_property_readonly("logprobs", source_of<PyOutput, PyChainOutput>(&PyOutput::logprobs))
      .def_property_readonly("row_width", [](const PyChainOutput& o) { return o.row_width(); });

  py::class_<PyTreeOutput>(m, "TreeOutput",
                           "Where verify writes for trees: tokens int32 [B, row_width] (the accepted path,\n"
                           "one more token, then kNoToken), num_accepted int32 [B]; optionally\n"
                           "accepted_nodes int32 [B, row_width] (the sequence-local node of each accepted\n"
                           "token, then kNoToken: for KV-cache compaction) and logprobs float32 [B, row_width].")
      .def(py::init<py::handle, py::handle, py::handle, py::handle>(), py::kw_only(), "tokens"_a,
           "num_accepted"_a, "accepted_nodes"_a = py::none(), "logprobs"_a = py::none())
      .def_property_readonly("tokens", [](const PyTreeOutput& o) { return o.tokens.source; })
      .def_property_readonly("num_accepted", [](const PyTreeOutput& o) { return o.num_accepted.source; })
      .def_property_readonly("accepted_nodes", source_of<PyOutput, PyTreeOutput>(&PyOutput::accepted_nodes))
      .def_property_readonly("logprobs", source_of<PyOutput, PyTreeOutput>(&PyOutput::logprobs))
      .def_property_readonly("row_width", [](const PyTreeOutput& o) { return o.row_width(); });

  py::class_<PyRandomness>(m, "Randomness",
                           "Seed and step offset (advance it between steps) for the built-in Philox\n"
                           "streams; optional sequence_seeds uint64/int64 [B] (batch-invariant results),\n"
                           "accept_uniforms float32 [N] and sample_uniforms float32 [B] in [0, 1), and\n"
                           "positions int64 [B] (absolute position of each sequence's first draft: Coupled).")
      .def(py::init([](std::uint64_t seed, std::uint64_t offset, py::handle sequence_seeds,
                       py::handle accept_uniforms, py::handle sample_uniforms, py::handle positions) {
             return PyRandomness{
                 seed, offset,
                 as_array(sequence_seeds, "sequence_seeds", Elem::seed64, 1, false, true),
                 as_array(accept_uniforms, "accept_uniforms", Elem::float32, 1, false, true),
                 as_array(sample_uniforms, "sample_uniforms", Elem::float32, 1, false, true),
                 as_array(positions, "positions", Elem::int64, 1, false, true)};
           }),
           "seed"_a = 0, "offset"_a = 0, py::kw_only(), "sequence_seeds"_a = py::none(),
           "accept_uniforms"_a = py::none(), "sample_uniforms"_a = py::none(), "positions"_a = py::none())
      .def_readwrite("seed", &PyRandomness::seed)
      .def_readwrite("offset", &PyRandomness::offset)
      .def_property_readonly("sequence_seeds", source_of(&PyRandomness::sequence_seeds))
      .def_property_readonly("accept_uniforms", source_of(&PyRandomness::accept_uniforms))
      .def_property_readonly("sample_uniforms", source_of(&PyRandomness::sample_uniforms))
      .def_property_readonly("positions", source_of(&PyRandomness::positions))
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

  constexpr const char* verify_doc =
      "Verifies the batch with `rule`, writes `out` and returns VerifyStats. ChainBatch and\n"
      "LogitsChainBatch write a ChainOutput, TreeBatch and LogitsTreeBatch a TreeOutput. Raises\n"
      "InvalidInput (a ValueError) before writing anything when the input is malformed. Releases the\n"
      "GIL while it runs. max_threads: 0 uses every hardware thread once the batch is large enough.\n"
      "Arrays on a CUDA device (every array of the call on that device; a logits batch's sampling\n"
      "parameters stay on the host) "
      "are verified there, on `stream` (an int cudaStream_t or a torch.cuda.Stream; default: PyTorch's\n"
      "current stream for torch tensors, else the default stream). synchronize=True waits and raises\n"
      "InvalidInput as on the CPU; synchronize=False returns None at once, and check(out) waits and\n"
      "raises later.";
  m.def("verify", &verify_chains, "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(),
        "max_threads"_a = 0, "stream"_a = py::none(), "synchronize"_a = true, verify_doc);
  m.def("verify", &verify_chains_sharded, "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(),
        "all_gather"_a, "max_threads"_a = 0,
        "verify(..., all_gather=fn): this rank's slice of a sharded ChainBatch (batch.shard). fn(send) takes\n"
        "this rank's message, a 1-D uint8 array, and returns every rank's concatenated in rank order.");
  m.def("verify", &verify_logits_chains, "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(),
        "max_threads"_a = 0, "stream"_a = py::none(), "synchronize"_a = true);
  m.def("verify", &verify_logits_chains_sharded, "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(),
        "all_gather"_a, "max_threads"_a = 0,
        "verify(..., all_gather=fn) over this rank's slice of a sharded LogitsChainBatch (batch.shard): the\n"
        "target, draft and unconditional rows sliced alike, allowed_tokens in its whole-vocabulary layout,\n"
        "draft rows over a reduced draft vocabulary whole on every rank.");
  m.def("verify", &verify_trees, "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(),
        "max_threads"_a = 0, "stream"_a = py::none(), "synchronize"_a = true);
  m.def("verify", &verify_trees_sharded, "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(),
        "all_gather"_a, "max_threads"_a = 0,
        "verify(..., all_gather=fn) over this rank's slice of a sharded TreeBatch (batch.shard), every rule\n"
        "with a tree form.");
  m.def("verify", &verify_logits_trees, "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(),
        "max_threads"_a = 0, "stream"_a = py::none(), "synchronize"_a = true);
  m.def("verify", &verify_logits_trees_sharded, "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(),
        "all_gather"_a, "max_threads"_a = 0,
        "verify(..., all_gather=fn) over this rank's slice of a sharded LogitsTreeBatch (batch.shard), sliced\n"
        "as a sharded LogitsChainBatch is.");
  // Anything else: say which pairs go together, rather than pybind11's list of signatures.
  m.def(
      "verify",
      [](py::handle, py::handle batch, py::handle randomness, py::handle out, py::handle max_threads, py::handle,
         py::handle) {
        const auto name = [](py::handle h) { return std::string(py::str(py::type::handle_of(h).attr("__name__"))); };
        throw py::type_error("specverify: verify(rule, batch, randomness, out, max_threads=0) takes a ChainBatch or "
                             "LogitsChainBatch with a ChainOutput, or a TreeBatch or LogitsTreeBatch with a "
                             "TreeOutput, a Randomness and an int max_threads; got batch=" + name(batch) +
                             ", randomness=" + name(randomness) + ", out=" + name(out) +
                             ", max_threads=" + name(max_threads));
      },
      "rule"_a, "batch"_a, "randomness"_a, "out"_a, py::kw_only(), "max_threads"_a = 0, "stream"_a = py::none(),
      "synchronize"_a = true);
  constexpr const char* check_doc =
      "Waits for the last verify into `out` where it ran on CUDA with synchronize=False, and raises\n"
      "InvalidInput if it found bad input (it then wrote nothing), as verify would have. Call it before\n"
      "the next verify on the same device and stream (they share a workspace). Otherwise it does nothing.";
  const auto check = [](PyOutput& out) {
    const std::shared_ptr<CudaPending> pending = std::move(out.pending);
    if (!pending) return;
    py::gil_scoped_release release;
    cuda_check(*pending);
  };
  m.def("check", [check](PyChainOutput& out) { check(out); }, "out"_a, check_doc);
  m.def("check", [check](PyTreeOutput& out) { check(out); }, "out"_a);
  m.attr("cuda_built") = cuda_built();
  bind_padded(m);

  m.def(
      "sample",
      [](py::handle logits, const SamplingParams& params, std::uint64_t seed, std::int64_t position,
         py::handle history_tokens, py::handle history_counts, py::handle bias_tokens, py::handle bias_values) {
        const Array row = as_array(logits, "logits", Elem::float32, 1);
        const std::int32_t vocab = as_int32(row.rows(), "vocab size");
        PyListEntries history(history_tokens, history_counts, kHistory), bias(bias_tokens, bias_values, kBias);
        for (const auto& [a, name] : {std::pair{&row, "logits"}, {&history.tokens, "history_tokens"},
                                      {&history.values, "history_counts"}, {&bias.tokens, "bias_tokens"},
                                      {&bias.values, "bias_values"}}) {
          expect_host(*a, name, "sample()");
        }
        const std::int32_t *history_data = nullptr, *counts = nullptr, *bias_data = nullptr;
        const float* values = nullptr;
        history.fill(history_data, counts);
        bias.fill(bias_data, values);
        const std::int32_t history_size = as_int32(history.size(), "history size");
        const std::int32_t bias_size = as_int32(bias.size(), "bias size");
        py::gil_scoped_release release;
        return specverify::sample(row.as<const float>(), vocab, params, seed, position, history_data, counts,
                                  history_size, bias_data, values, bias_size);
      },
      "logits"_a, "params"_a = SamplingParams{}, "seed"_a = 0, "position"_a = 0, py::kw_only(),
      "history_tokens"_a = py::none(), "history_counts"_a = py::none(), "bias_tokens"_a = py::none(),
      "bias_values"_a = py::none(),
      "One plain (non-speculative) draw from a row of logits (float32 [V]) with its SamplingParams, by\n"
      "Gumbel-max with noise keyed only by (seed, position, token): the tokens Coupled verification emits.\n"
      "history_tokens int32 [M] (ascending, unique; a draft row's own drafts included) with\n"
      "history_counts int32 [M] (>= 0), and bias_tokens int32 [L] (unique) with bias_values float32 [L]\n"
      "(finite): the row's penalties and logit bias, or None.\n"
      "Raises InvalidInput for parameters out of range, a NaN or +inf logit, a row that is all -inf, a\n"
      "bad list entry, or a logit that bias or penalties overflow.");
}

}  // namespace specverify::python

PYBIND11_MODULE(_core, m) { specverify::python::bind_module(m); }
