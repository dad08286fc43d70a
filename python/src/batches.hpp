// The Python batch, output and randomness objects: each views its arrays at construction (shapes
// checked against each other, so mistakes show early), and every verify views them again with
// fresh() (a caller may have resized an array since) and builds its C++ struct from that with
// view(), with the GIL held. view() copies what the library reads as indices (offsets, tokens,
// parents, row numbers, the draft map, the history and bias lists' offsets and tokens) and the
// sampling parameters: the rule is that inputs do not change during a call, and a thread that
// breaks it while verify runs without the GIL can change the rows read, never the indices
// validated.
//
// A batch type is a struct with batch_size, drafts() (entries indexed like draft_tokens), fresh(),
// inputs() (extents of the arrays it reads), view(), device_view(), target_rows(), kShape (whether
// rules that cut chains apply to it) and CudaRule.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <specverify/specverify.hpp>

#include "arrays.hpp"
#include "cuda_verify.hpp"

namespace specverify::python {

/// Chains or trees: SpecDecPP (which decides chain lengths) has no tree form.
enum class Shape { chain, tree };

/// The call's own copy of a 1-D array (contiguous, as as_array requires), or nullptr when absent.
template <class T>
const T* snapshot(const Array& a, std::vector<T>& copy) {
  if (!a.present()) return nullptr;
  const T* data = a.as<const T>();
  copy.assign(data, data + a.rows());
  return copy.data();
}

/// draft_offsets (chains) or node_offsets (trees) int32 [B+1] and draft_tokens int32 [N].
struct PyOffsets {
  Array offsets, draft_tokens;
  const char* offsets_name;
  std::int32_t batch_size = 0;
  std::vector<std::int32_t> offsets_copy, tokens_copy;  // view()'s snapshot

  PyOffsets(py::handle offsets_, py::handle tokens, const char* name)
      : offsets(as_array(offsets_, name, Elem::int32, 1)),
        draft_tokens(as_array(tokens, "draft_tokens", Elem::int32, 1)),
        offsets_name(name) {
    if (offsets.rows() < 1) reject(name, " must hold B + 1 >= 1 offsets, got none");
    batch_size = as_int32(offsets.rows() - 1, "batch size");
  }

  std::int64_t drafts() const { return draft_tokens.rows(); }
  /// The offsets as snapshot() copied them.
  const std::int32_t* data() const { return offsets_copy.data(); }
  const std::int32_t* tokens() const { return tokens_copy.empty() ? nullptr : tokens_copy.data(); }

  /// Copies the offsets and tokens for this call, and checks the offsets' total (the caller may
  /// have rewritten the offsets since construction; the C++ side validates the offsets
  /// themselves).
  void snapshot() {
    python::snapshot(offsets, offsets_copy);
    python::snapshot(draft_tokens, tokens_copy);
    check_total();
  }
  void check_total() const {
    const std::int32_t total = data()[batch_size];
    if (batch_size > 0 && total != drafts()) throw invalid_input(OffsetsTotal{offsets_name, drafts()}.mismatch(total));
  }

  /// Sequence b's entries (drafts or nodes), or -1 where the offsets decrease (C++ rejects them).
  std::int64_t count(std::int32_t b) const {
    const std::int64_t n = std::int64_t{data()[b + 1]} - data()[b];
    return n < 0 ? -1 : n;
  }
};

/// Rows of V values: probabilities float32 [rows, V], or logits (Elem::logits) [rows, V]; rows
/// may be strided.
inline Array as_rows(py::handle obj, const char* name, std::int64_t rows, const std::string& why,
                     bool optional = false, Elem elem = Elem::float32) {
  Array a = as_array(obj, name, elem, 2, false, optional);
  if (!a.present()) return a;
  expect_extent(a, name, 0, rows, why);
  expect_rows_apart(a, name);
  return a;
}

/// `a`, once it holds what target_logits holds (`target`): a C++ logits batch has one Logit type.
inline Array with_target_dtype(Array a, const char* name, Elem target) {
  if (a.present() && a.elem != target) {
    reject(name, " holds ", elem_name(a.elem), ", but target_logits holds ", elem_name(target),
           " (a batch's rows share one dtype; nothing is converted)");
  }
  return a;
}

inline void expect_row_length(const Array& a, const char* name, std::int64_t length, const std::string& why) {
  if (a.present()) expect_extent(a, name, 1, length, why);
}

/// ChainBatch: draft_offsets int32 [B+1], draft_tokens int32 [N], target_probs float32 [N+B, V],
/// draft_probs float32 [N, V] or None, target_row_max float32 [N+B] or None.
struct PyChainBatch {
  static constexpr Shape kShape = Shape::chain;
  static constexpr const char* kName = "ChainBatch";
  PyOffsets offsets;
  Array target_probs, draft_probs, target_row_max;
  std::int32_t batch_size = 0;
  std::int32_t vocab_size = 0;  // the rows' length: this rank's slice where the batch is sharded
  VocabShard shard{};
  std::int32_t global_vocab = 0;  // V of a sharded batch (the rows hold shard.local_vocab_size)

  PyChainBatch(py::handle offsets_, py::handle tokens, py::handle target, py::handle draft, py::handle row_max,
               py::handle shard_ = py::none(), py::handle vocab_size_ = py::none());
  /// The target rows (a CUDA call runs on their framework's current stream).
  const Array& target_rows() const { return target_probs; }
  std::int64_t drafts() const { return offsets.drafts(); }
  PyChainBatch fresh() const;
  std::vector<Extent> inputs() const;
  ChainBatch<float> view();
  /// The batch over the arrays in place, indices included, for a device to read and check.
  ChainBatch<float> device_view() const;

 private:
  ChainBatch<float> in_place_with(const std::int32_t* offsets_data, const std::int32_t* tokens) const;
};

/// TreeBatch: node_offsets int32 [B+1], parents int32 [N], draft_tokens int32 [N], target_probs
/// float32 [N+B, V], draft_probs float32 [N+B, V] or None (deterministic children).
struct PyTreeBatch {
  static constexpr Shape kShape = Shape::tree;
  static constexpr const char* kName = "TreeBatch";
  PyOffsets offsets;
  Array parents, target_probs, draft_probs;
  Drafted drafted;
  std::int32_t batch_size = 0;
  std::int32_t vocab_size = 0;  // the rows' length: this rank's slice where the batch is sharded
  VocabShard shard{};
  std::int32_t global_vocab = 0;  // V of a sharded batch (the rows hold shard.local_vocab_size)

  std::vector<std::int32_t> parents_copy;

  PyTreeBatch(py::handle node_offsets, py::handle parents_, py::handle tokens, py::handle target,
              py::handle draft, Drafted drafted_, py::handle shard_ = py::none(), py::handle vocab_size_ = py::none());
  /// The target rows (a CUDA call runs on their framework's current stream).
  const Array& target_rows() const { return target_probs; }
  std::int64_t drafts() const { return offsets.drafts(); }
  PyTreeBatch fresh() const;
  std::vector<Extent> inputs() const;
  TreeBatch<float> view();
  /// The batch over the arrays in place, indices included, for a device to read and check.
  TreeBatch<float> device_view() const;

 private:
  TreeBatch<float> in_place_with(const std::int32_t* offsets_data, const std::int32_t* parents_data,
                                 const std::int32_t* tokens) const;
};

/// The argument names of a token list (history or logit bias) and the element type of its values.
struct ListNames {
  const char* offsets;
  const char* tokens;
  const char* values;
  Elem value_elem;
};
inline constexpr ListNames kHistory{"history_offsets", "history_tokens", "history_counts", Elem::int32};
inline constexpr ListNames kBias{"bias_offsets", "bias_tokens", "bias_values", Elem::float32};

/// A token list's entries: tokens int32 [M] and one value each (history counts int32, bias values
/// float32), or None (no entries). The tokens are indices, so fill() gives the call its own copy;
/// the values are read in place, like rows (a write during a call can change the result only).
struct PyListEntries {
  const ListNames* names;
  Array tokens, values;
  std::vector<std::int32_t> tokens_copy;

  PyListEntries(py::handle tokens_, py::handle values_, const ListNames& names_);
  std::int64_t size() const { return tokens.rows(); }
  template <class Value>
  void fill(const std::int32_t*& tokens_out, const Value*& values_out) {
    tokens_out = snapshot(tokens, tokens_copy);
    values_out = values.as<const Value>();
  }
};

/// A per-sequence ragged list of the logits batches: offsets int32 [B+1] (or None: no list) and
/// its entries, offsets[B] of them.
struct PyTokenList {
  Array offsets;
  PyListEntries entries;
  std::vector<std::int32_t> offsets_copy;

  PyTokenList(py::handle offsets_, py::handle tokens, py::handle values, const ListNames& names,
              std::int32_t batch_size);
  /// The C++ fields, with the call's copies of the offsets and tokens, once the offsets' total is
  /// the entries' count (C++ cannot know how many there are; it validates the offsets themselves).
  template <class Value>
  void fill(const std::int32_t*& offsets_out, const std::int32_t*& tokens_out, const Value*& values_out,
            std::int32_t batch_size) {
    offsets_out = snapshot(offsets, offsets_copy);
    check_total(batch_size);
    entries.fill(tokens_out, values_out);
  }
  void check_total(std::int32_t batch_size) const;
  /// The bound check_total checks (on CUDA, the device checks it).
  ListTotal bounds() const {
    return {entries.names->offsets, entries.names->tokens, entries.size(), entries.tokens.present()};
  }
  /// The C++ fields pointing at the arrays in place (on a CUDA device).
  template <class Value>
  void in_place(const std::int32_t*& offsets_out, const std::int32_t*& tokens_out, const Value*& values_out) const {
    offsets_out = offsets.as<const std::int32_t>();
    tokens_out = entries.tokens.as<const std::int32_t>();
    values_out = entries.values.as<const Value>();
  }
  void add_inputs(std::vector<Extent>& inputs) const;
};

/// What LogitsChainBatch and LogitsTreeBatch add to their layouts: sampling parameters, the
/// reduced draft vocabulary, guidance, the grammar bitmask, and the history and bias lists.
struct PyLogitsFields {
  Array target_params, draft_params, draft_to_target, unconditional_logits, unconditional_first_row,
      guidance_scale, allowed_tokens;
  PyTokenList history, bias;
  std::int32_t draft_vocab_size = 0;  // 0: the target's
  std::vector<SamplingParams> target_params_copy, draft_params_copy;
  std::vector<std::int32_t> draft_to_target_copy;
  std::vector<std::int64_t> first_row_copy;

  PyLogitsFields(py::handle target_params_, py::handle draft_params_, py::handle draft_to_target_,
                 py::handle unconditional_logits_, py::handle unconditional_first_row_,
                 py::handle guidance_scale_, py::handle allowed_tokens_, py::handle history_offsets,
                 py::handle history_tokens, py::handle history_counts, py::handle bias_offsets,
                 py::handle bias_tokens, py::handle bias_values, std::int32_t batch_size,
                 std::int32_t vocab_size, std::int64_t target_rows, Elem row_elem, std::int32_t bitmask_vocab);

  /// The draft rows' length: len(draft_to_target), else V.
  std::int32_t draft_row_length(std::int32_t vocab_size) const {
    return draft_vocab_size > 0 ? draft_vocab_size : vocab_size;
  }
  /// Every guided sequence's k_b + 1 rows lie within unconditional_logits (C++ cannot know its
  /// length), then the fields into the C++ batch (the parameters, draft map and first rows copied).
  template <class CppBatch>
  void fill(CppBatch& batch, const PyOffsets& offsets);
  /// The fields into the C++ batch in place, for CUDA: the device arrays' pointers, and the
  /// sampling parameters' host pointers (cuda_verify copies them).
  template <class CppBatch>
  void in_place(CppBatch& batch) const;
  /// The bounds fill() checks on its copies, for the device to check (cuda_verify.hpp).
  void add_bounds(DeviceBounds& bounds) const;
  void add_inputs(std::vector<Extent>& inputs) const;
};

/// LogitsChainBatch: ChainBatch's layout with rows of logits (float32, float16 or bfloat16, one
/// dtype for all), target_logits [N+B, V], draft_logits [N, Vd] or None (one-hot), and the
/// PyLogitsFields.
struct PyLogitsChainBatch {
  static constexpr Shape kShape = Shape::chain;
  static constexpr const char* kName = "LogitsChainBatch";
  PyOffsets offsets;
  Array target_logits, draft_logits;
  PyLogitsFields fields;
  std::int32_t batch_size = 0;
  std::int32_t vocab_size = 0;

  VocabShard shard{};
  std::int32_t global_vocab = 0;  // V of a sharded batch (the sliced rows hold shard.local_vocab_size)

  PyLogitsChainBatch(py::handle offsets_, py::handle tokens, py::handle target, py::handle draft,
                     py::handle target_params, py::handle draft_params, py::handle draft_to_target,
                     py::handle unconditional_logits, py::handle unconditional_first_row,
                     py::handle guidance_scale, py::handle allowed_tokens, py::handle history_offsets,
                     py::handle history_tokens, py::handle history_counts, py::handle bias_offsets,
                     py::handle bias_tokens, py::handle bias_values, py::handle shard_ = py::none(),
                     py::handle vocab_size_ = py::none());
  /// The target rows (a CUDA call runs on their framework's current stream).
  const Array& target_rows() const { return target_logits; }
  std::int64_t drafts() const { return offsets.drafts(); }
  PyLogitsChainBatch fresh() const;
  std::vector<Extent> inputs() const;
  RowTypes<LogitsChainBatch> view();
  /// The C++ batch over the arrays in place (on a CUDA device).
  RowTypes<LogitsChainBatch> device_view() const;
};

/// LogitsTreeBatch: TreeBatch's layout with rows of logits (as LogitsChainBatch's; draft_logits
/// [N+B, Vd] or None) and the PyLogitsFields.
struct PyLogitsTreeBatch {
  static constexpr Shape kShape = Shape::tree;
  static constexpr const char* kName = "LogitsTreeBatch";
  PyOffsets offsets;
  Array parents, target_logits, draft_logits;
  Drafted drafted;
  PyLogitsFields fields;
  std::int32_t batch_size = 0;
  std::int32_t vocab_size = 0;

  VocabShard shard{};
  std::int32_t global_vocab = 0;  // V of a sharded batch (the sliced rows hold shard.local_vocab_size)
  std::vector<std::int32_t> parents_copy;

  PyLogitsTreeBatch(py::handle node_offsets, py::handle parents_, py::handle tokens, py::handle target,
                    py::handle draft, Drafted drafted_, py::handle target_params, py::handle draft_params,
                    py::handle draft_to_target, py::handle unconditional_logits,
                    py::handle unconditional_first_row, py::handle guidance_scale, py::handle allowed_tokens,
                    py::handle history_offsets, py::handle history_tokens, py::handle history_counts,
                    py::handle bias_offsets, py::handle bias_tokens, py::handle bias_values,
                    py::handle shard_ = py::none(), py::handle vocab_size_ = py::none());
  /// The target rows (a CUDA call runs on their framework's current stream).
  const Array& target_rows() const { return target_logits; }
  std::int64_t drafts() const { return offsets.drafts(); }
  PyLogitsTreeBatch fresh() const;
  std::vector<Extent> inputs() const;
  RowTypes<LogitsTreeBatch> view();
  /// The C++ batch over the arrays in place (on a CUDA device).
  RowTypes<LogitsTreeBatch> device_view() const;
};

/// ChainOutput / TreeOutput: tokens int32 [B, row_width] with adjacent rows, num_accepted int32
/// [B]; optional logprobs float32 and (trees) accepted_nodes int32, both shaped like tokens.
struct PyOutput {
  Array tokens, num_accepted, accepted_nodes, logprobs;
  std::shared_ptr<CudaPending> pending;  // the last verify into it, where that ran on CUDA unsynchronised

  PyOutput(py::handle tokens_, py::handle num_accepted_, py::handle accepted_nodes_, py::handle logprobs_);
  std::int32_t row_width() const { return static_cast<std::int32_t>(tokens.shape[1]); }
  void expect_batch(std::int32_t batch_size) const;
  std::vector<Extent> outputs() const;
};

struct PyChainOutput : PyOutput {
  PyChainOutput(py::handle tokens_, py::handle num_accepted_, py::handle logprobs_)
      : PyOutput(tokens_, num_accepted_, py::none(), logprobs_) {}
  PyChainOutput fresh() const { return {tokens.source, num_accepted.source, source_or_none(logprobs)}; }
  ChainOutput view(std::int32_t batch_size) const {
    expect_batch(batch_size);
    return {tokens.as<std::int32_t>(), row_width(), num_accepted.as<std::int32_t>(), logprobs.as<float>()};
  }
};

struct PyTreeOutput : PyOutput {
  using PyOutput::PyOutput;
  PyTreeOutput fresh() const {
    return {tokens.source, num_accepted.source, source_or_none(accepted_nodes), source_or_none(logprobs)};
  }
  TreeOutput view(std::int32_t batch_size) const {
    expect_batch(batch_size);
    return {tokens.as<std::int32_t>(), row_width(), num_accepted.as<std::int32_t>(),
            accepted_nodes.as<std::int32_t>(), logprobs.as<float>()};
  }
};

/// Randomness: seed and offset, optional sequence_seeds uint64/int64 [B], accept_uniforms
/// float32 [N], sample_uniforms float32 [B], positions int64 [B].
struct PyRandomness {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  Array sequence_seeds, accept_uniforms, sample_uniforms, positions;

  PyRandomness fresh() const;
  std::vector<Extent> inputs() const;
  Randomness view(std::int64_t batch_size, std::int64_t drafts) const;
};

}  // namespace specverify::python
