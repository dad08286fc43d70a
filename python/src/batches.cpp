// Construction checks and per-call views of the batch, output and randomness objects.
#include "batches.hpp"

namespace specverify::python {

namespace {

std::string rows_needed(std::int64_t drafts, std::int32_t batch_size, const char* what) {
  return "it needs N + B = " + std::to_string(drafts) + " + " + std::to_string(batch_size) + " rows (" + what + ")";
}

constexpr const char* kChainRows = "one per draft token plus one bonus row per sequence";
constexpr const char* kTreeRows = "one per node plus one root row per sequence";

/// parents int32 [N], like draft_tokens.
Array as_parents(py::handle obj, const PyOffsets& offsets) {
  Array a = as_array(obj, "parents", Elem::int32, 1);
  expect_extent(a, "parents", 0, offsets.drafts(),
                "it needs one parent per node (draft_tokens holds " + std::to_string(offsets.drafts()) + ")");
  return a;
}

/// Points a C++ row field at an array's rows, of the field's type (the dtype the array was viewed with).
template <class T>
void point(const T*& field, const Array& a) {
  field = a.as<const T>();
}

/// The C++ logits batch over `py`'s rows in place, of their dtype (with their strides and shard),
/// its layout and fields set by set(batch).
template <template <class> class CppBatch, class PyBatch, class Set>
RowTypes<CppBatch> logits_in_place(const PyBatch& py, const Set& set) {
  const auto build = [&](auto logit) -> RowTypes<CppBatch> {
    CppBatch<decltype(logit)> b;
    b.batch_size = py.batch_size;
    b.vocab_size = py.global_vocab;
    point(b.target_logits, py.target_logits);
    point(b.draft_logits, py.draft_logits);
    b.target_stride = py.target_logits.row_stride();
    b.draft_stride = py.draft_logits.present() ? py.draft_logits.row_stride() : 0;
    b.shard = py.shard;
    set(b);
    return b;
  };
  switch (py.target_logits.elem) {
    case Elem::float16: return build(float16{});
    case Elem::bfloat16: return build(bfloat16{});
    default: return build(float{});
  }
}

/// "NAME holds M entries", or "NAME is None".
std::string holds(const Array& a, const char* name) { return holds_entries(name, a.present(), a.rows()); }

/// An optional per-sequence array [B].
Array per_sequence(py::handle obj, const char* name, Elem elem, std::int32_t batch_size, bool optional = true) {
  Array a = as_array(obj, name, elem, 1, false, optional);
  if (a.present()) {
    expect_extent(a, name, 0, batch_size, "the batch has B = " + std::to_string(batch_size) + " sequences");
  }
  return a;
}

/// A sharded batch's slice and the whole vocabulary's size (vocab_size; without it the rows'
/// length): the rows, `row_length` long, must hold the slice.
void take_shard(py::handle shard_, py::handle vocab_size_, std::int32_t row_length, const char* rows,
                VocabShard& shard, std::int32_t& global_vocab) {
  if (!shard_.is_none()) shard = shard_.cast<VocabShard>();
  global_vocab = vocab_size_.is_none() ? row_length : as_int32(vocab_size_.cast<std::int64_t>(), "vocab_size");
  const std::int32_t slice = shard.whole() ? global_vocab : shard.local_vocab_size;
  if (row_length != slice) {
    reject(rows, " rows hold ", row_length, " values, but the batch's slice of the vocabulary has ", slice,
           " (shard.local_vocab_size, or vocab_size without a shard)");
  }
}

}  // namespace

PyChainBatch::PyChainBatch(py::handle offsets_, py::handle tokens, py::handle target, py::handle draft,
                           py::handle row_max, py::handle shard_, py::handle vocab_size_)
    : offsets(offsets_, tokens, "draft_offsets"), batch_size(offsets.batch_size) {
  const std::int64_t rows = drafts() + batch_size;
  target_probs = as_rows(target, "target_probs", rows, rows_needed(drafts(), batch_size, kChainRows));
  vocab_size = as_int32(target_probs.shape[1], "vocab size");
  draft_probs = as_rows(draft, "draft_probs", drafts(),
                        "it needs N = " + std::to_string(drafts()) + " rows (one per draft token)", true);
  expect_row_length(draft_probs, "draft_probs", vocab_size,
                    "its rows must be as long as target_probs' (V = " + std::to_string(vocab_size) + ")");
  target_row_max = as_array(row_max, "target_row_max", Elem::float32, 1, false, true);
  if (target_row_max.present()) {
    expect_extent(target_row_max, "target_row_max", 0, rows,
                  "it needs one value per target row (" + std::to_string(rows) + ")");
  }
  take_shard(shard_, vocab_size_, vocab_size, "target_probs", shard, global_vocab);
}

PyChainBatch PyChainBatch::fresh() const {
  return {offsets.offsets.source, offsets.draft_tokens.source, target_probs.source, source_or_none(draft_probs),
          source_or_none(target_row_max), py::cast(shard), py::int_(global_vocab)};
}

std::vector<Extent> PyChainBatch::inputs() const {
  return {extent_of(offsets.offsets, "draft_offsets", Elem::int32),
          extent_of(offsets.draft_tokens, "draft_tokens", Elem::int32),
          extent_of(target_probs, "target_probs", Elem::float32), extent_of(draft_probs, "draft_probs", Elem::float32),
          extent_of(target_row_max, "target_row_max", Elem::float32)};
}

ChainBatch<float> PyChainBatch::view() {
  offsets.snapshot();
  return in_place_with(offsets.data(), offsets.tokens());
}

ChainBatch<float> PyChainBatch::device_view() const {
  return in_place_with(offsets.offsets.as<const std::int32_t>(),
                       drafts() ? offsets.draft_tokens.as<const std::int32_t>() : nullptr);
}

ChainBatch<float> PyChainBatch::in_place_with(const std::int32_t* offsets_data, const std::int32_t* tokens) const {
  return {batch_size,
          global_vocab,
          offsets_data,
          tokens,
          target_probs.as<const float>(),
          draft_probs.as<const float>(),
          target_probs.row_stride(),
          draft_probs.present() ? draft_probs.row_stride() : 0,
          target_row_max.as<const float>(),
          shard};
}

PyTreeBatch::PyTreeBatch(py::handle node_offsets, py::handle parents_, py::handle tokens, py::handle target,
                         py::handle draft, Drafted drafted_, py::handle shard_, py::handle vocab_size_)
    : offsets(node_offsets, tokens, "node_offsets"),
      parents(as_parents(parents_, offsets)),
      drafted(drafted_),
      batch_size(offsets.batch_size) {
  const std::int64_t rows = drafts() + batch_size;
  target_probs = as_rows(target, "target_probs", rows, rows_needed(drafts(), batch_size, kTreeRows));
  vocab_size = as_int32(target_probs.shape[1], "vocab size");
  draft_probs = as_rows(draft, "draft_probs", rows, rows_needed(drafts(), batch_size, kTreeRows) +
                        ", laid out like target_probs", true);
  expect_row_length(draft_probs, "draft_probs", vocab_size,
                    "its rows must be as long as target_probs' (V = " + std::to_string(vocab_size) + ")");
  take_shard(shard_, vocab_size_, vocab_size, "target_probs", shard, global_vocab);
}

PyTreeBatch PyTreeBatch::fresh() const {
  return {offsets.offsets.source, parents.source, offsets.draft_tokens.source, target_probs.source,
          source_or_none(draft_probs), drafted, py::cast(shard), py::int_(global_vocab)};
}

std::vector<Extent> PyTreeBatch::inputs() const {
  return {extent_of(offsets.offsets, "node_offsets", Elem::int32), extent_of(parents, "parents", Elem::int32),
          extent_of(offsets.draft_tokens, "draft_tokens", Elem::int32),
          extent_of(target_probs, "target_probs", Elem::float32), extent_of(draft_probs, "draft_probs", Elem::float32)};
}

TreeBatch<float> PyTreeBatch::view() {
  offsets.snapshot();
  return in_place_with(offsets.data(), snapshot(parents, parents_copy), offsets.tokens());
}

TreeBatch<float> PyTreeBatch::device_view() const {
  const bool any = drafts() > 0;
  return in_place_with(offsets.offsets.as<const std::int32_t>(), any ? parents.as<const std::int32_t>() : nullptr,
                       any ? offsets.draft_tokens.as<const std::int32_t>() : nullptr);
}

TreeBatch<float> PyTreeBatch::in_place_with(const std::int32_t* offsets_data, const std::int32_t* parents_data,
                                            const std::int32_t* tokens) const {
  TreeBatch<float> b;
  b.batch_size = batch_size;
  b.vocab_size = global_vocab;
  b.node_offsets = offsets_data;
  b.parents = parents_data;
  b.draft_tokens = tokens;
  b.target_probs = target_probs.as<const float>();
  b.draft_probs = draft_probs.as<const float>();
  b.target_stride = target_probs.row_stride();
  b.draft_stride = draft_probs.present() ? draft_probs.row_stride() : 0;
  b.drafted = drafted;
  b.shard = shard;
  return b;
}

PyListEntries::PyListEntries(py::handle tokens_, py::handle values_, const ListNames& names_)
    : names(&names_),
      tokens(as_array(tokens_, names_.tokens, Elem::int32, 1, false, true)),
      values(as_array(values_, names_.values, names_.value_elem, 1, false, true)) {
  if (values.rows() != tokens.rows()) {
    reject(holds(values, names_.values), ", but ", holds(tokens, names_.tokens), " (one value per token)");
  }
}

PyTokenList::PyTokenList(py::handle offsets_, py::handle tokens, py::handle values, const ListNames& names,
                         std::int32_t batch_size)
    : offsets(as_array(offsets_, names.offsets, Elem::int32, 1, false, true)), entries(tokens, values, names) {
  if (offsets.present()) {
    expect_extent(offsets, names.offsets, 0, std::int64_t{batch_size} + 1,
                  "it needs B + 1 = " + std::to_string(std::int64_t{batch_size} + 1) + " offsets");
  } else if (entries.tokens.present() || entries.values.present()) {
    reject(entries.tokens.present() ? names.tokens : names.values, " is given, but ", names.offsets,
           " is None (a list needs its offsets)");
  }
}

void PyTokenList::check_total(std::int32_t batch_size) const {
  if (!offsets.present() || batch_size == 0) return;  // an empty batch reads no list
  const std::int32_t total = offsets_copy[static_cast<std::size_t>(batch_size)];
  if (total != entries.size()) throw invalid_input(bounds().mismatch(total));
}

void PyTokenList::add_inputs(std::vector<Extent>& inputs) const {
  inputs.push_back(extent_of(offsets, entries.names->offsets, Elem::int32));
  inputs.push_back(extent_of(entries.tokens, entries.names->tokens, Elem::int32));
  inputs.push_back(extent_of(entries.values, entries.names->values, entries.names->value_elem));
}

PyLogitsFields::PyLogitsFields(py::handle target_params_, py::handle draft_params_, py::handle draft_to_target_,
                               py::handle unconditional_logits_, py::handle unconditional_first_row_,
                               py::handle guidance_scale_, py::handle allowed_tokens_, py::handle history_offsets,
                               py::handle history_tokens, py::handle history_counts, py::handle bias_offsets,
                               py::handle bias_tokens, py::handle bias_values, std::int32_t batch_size,
                               std::int32_t vocab_size, std::int64_t target_rows, Elem row_elem,
                               std::int32_t bitmask_vocab)
    : target_params(per_sequence(target_params_, "target_params", Elem::sampling_params, batch_size, false)),
      draft_params(per_sequence(draft_params_, "draft_params", Elem::sampling_params, batch_size)),
      draft_to_target(as_array(draft_to_target_, "draft_to_target", Elem::int32, 1, false, true)),
      unconditional_logits(with_target_dtype(
          as_array(unconditional_logits_, "unconditional_logits", Elem::logits, 2, false, true),
          "unconditional_logits", row_elem)),
      unconditional_first_row(per_sequence(unconditional_first_row_, "unconditional_first_row", Elem::int64, batch_size)),
      guidance_scale(per_sequence(guidance_scale_, "guidance_scale", Elem::float32, batch_size)),
      allowed_tokens(as_array(allowed_tokens_, "allowed_tokens", Elem::bits32, 2, false, true)),
      history(history_offsets, history_tokens, history_counts, kHistory, batch_size),
      bias(bias_offsets, bias_tokens, bias_values, kBias, batch_size) {
  if (draft_to_target.present()) {
    if (draft_to_target.rows() < 1) reject("draft_to_target must hold at least one target id, got none");
    draft_vocab_size = as_int32(draft_to_target.rows(), "draft vocab size");
  }
  const std::string v = std::to_string(vocab_size);
  if (unconditional_logits.present()) {
    expect_row_length(unconditional_logits, "unconditional_logits", vocab_size,
                      "its rows must be as long as the target's (V = " + v + ")");
    expect_rows_apart(unconditional_logits, "unconditional_logits");
  } else {
    for (const Array* a : {&unconditional_first_row, &guidance_scale}) {
      if (a->present()) {
        reject(a == &guidance_scale ? "guidance_scale" : "unconditional_first_row",
               " is given, but unconditional_logits is None (guidance needs the unconditional rows)");
      }
    }
  }
  if (allowed_tokens.present()) {
    const std::int64_t words = (std::int64_t{bitmask_vocab} + 31) / 32;  // the whole vocabulary's
    expect_extent(allowed_tokens, "allowed_tokens", 0, target_rows,
                  "it needs one bitmask per target row (" + std::to_string(target_rows) + ")");
    expect_extent(allowed_tokens, "allowed_tokens", 1, words,
                  "it needs ceil(V / 32) = " + std::to_string(words) + " words per row (V = " +
                      std::to_string(bitmask_vocab) + ")");
    // The C++ field has no row stride.
    if (allowed_tokens.shape[0] > 1 && allowed_tokens.strides[0] != words) {
      reject("allowed_tokens: rows must be contiguous and adjacent (row stride ",
             std::to_string(allowed_tokens.strides[0]), " != ", std::to_string(words), " words)");
    }
  }
}

template <class CppBatch>
void PyLogitsFields::fill(CppBatch& batch, const PyOffsets& offsets) {
  const std::int64_t* first = snapshot(unconditional_first_row, first_row_copy);
  if (unconditional_logits.present() && first) {
    const std::int64_t available = unconditional_logits.rows();
    for (std::int32_t b = 0; b < offsets.batch_size; ++b) {
      const std::int64_t count = offsets.count(b);
      if (first[b] < 0 || count < 0) continue;  // -1: no guidance; below -1 or bad offsets: C++ says
      if (first[b] > available - (count + 1)) throw invalid_input(GuidedRows{available}.mismatch(b, first[b], count + 1));
    }
  }
  batch.target_params = snapshot(target_params, target_params_copy);
  batch.draft_params = snapshot(draft_params, draft_params_copy);
  batch.draft_vocab_size = draft_vocab_size;
  batch.draft_to_target = snapshot(draft_to_target, draft_to_target_copy);
  point(batch.unconditional_logits, unconditional_logits);
  batch.unconditional_stride = unconditional_logits.present() ? unconditional_logits.row_stride() : 0;
  batch.unconditional_first_row = first;
  batch.guidance_scale = guidance_scale.as<const float>();
  batch.allowed_tokens = allowed_tokens.as<const std::uint32_t>();
  history.fill(batch.history_offsets, batch.history_tokens, batch.history_counts, offsets.batch_size);
  bias.fill(batch.bias_offsets, batch.bias_tokens, batch.bias_values, offsets.batch_size);
}

template <class CppBatch>
void PyLogitsFields::in_place(CppBatch& batch) const {
  point(batch.target_params, target_params);
  point(batch.draft_params, draft_params);
  batch.draft_vocab_size = draft_vocab_size;
  point(batch.draft_to_target, draft_to_target);
  point(batch.unconditional_logits, unconditional_logits);
  batch.unconditional_stride = unconditional_logits.present() ? unconditional_logits.row_stride() : 0;
  point(batch.unconditional_first_row, unconditional_first_row);
  point(batch.guidance_scale, guidance_scale);
  point(batch.allowed_tokens, allowed_tokens);
  history.in_place(batch.history_offsets, batch.history_tokens, batch.history_counts);
  bias.in_place(batch.bias_offsets, batch.bias_tokens, batch.bias_values);
}

void PyLogitsFields::add_bounds(DeviceBounds& bounds) const {
  if (unconditional_logits.present() && unconditional_first_row.present()) {
    bounds.first_row = unconditional_first_row.as<const std::int64_t>();
    bounds.guided = GuidedRows{unconditional_logits.rows()};
  }
  bounds.history_offsets = history.offsets.as<const std::int32_t>();
  bounds.history = history.bounds();
  bounds.bias_offsets = bias.offsets.as<const std::int32_t>();
  bounds.bias = bias.bounds();
}

void PyLogitsFields::add_inputs(std::vector<Extent>& inputs) const {
  // Sampling parameters are NumPy arrays: a CUDA call copies them to its device.
  inputs.push_back(extent_of(target_params, "target_params", Elem::sampling_params).copied_by_call());
  inputs.push_back(extent_of(draft_params, "draft_params", Elem::sampling_params).copied_by_call());
  inputs.push_back(extent_of(draft_to_target, "draft_to_target", Elem::int32));
  inputs.push_back(extent_of(unconditional_logits, "unconditional_logits", unconditional_logits.elem));
  inputs.push_back(extent_of(unconditional_first_row, "unconditional_first_row", Elem::int64));
  inputs.push_back(extent_of(guidance_scale, "guidance_scale", Elem::float32));
  inputs.push_back(extent_of(allowed_tokens, "allowed_tokens", Elem::bits32));
  history.add_inputs(inputs);
  bias.add_inputs(inputs);
}

namespace {

void expect_draft_length(const Array& draft, const PyLogitsFields& fields, std::int32_t vocab_size) {
  const std::int32_t length = fields.draft_row_length(vocab_size);
  expect_row_length(draft, "draft_logits", length,
                    fields.draft_vocab_size > 0
                        ? "its rows must be as long as draft_to_target (" + std::to_string(length) + ")"
                        : "its rows must be as long as target_logits' (V = " + std::to_string(length) +
                              "; pass draft_to_target for a reduced draft vocabulary)");
}

}  // namespace

PyLogitsChainBatch::PyLogitsChainBatch(py::handle offsets_, py::handle tokens, py::handle target, py::handle draft,
                                       py::handle target_params, py::handle draft_params,
                                       py::handle draft_to_target, py::handle unconditional_logits,
                                       py::handle unconditional_first_row, py::handle guidance_scale,
                                       py::handle allowed_tokens, py::handle history_offsets,
                                       py::handle history_tokens, py::handle history_counts,
                                       py::handle bias_offsets, py::handle bias_tokens, py::handle bias_values,
                                       py::handle shard_, py::handle vocab_size_)
    : offsets(offsets_, tokens, "draft_offsets"),
      target_logits(as_rows(target, "target_logits", drafts() + offsets.batch_size,
                            rows_needed(drafts(), offsets.batch_size, kChainRows), false, Elem::logits)),
      draft_logits(with_target_dtype(
          as_rows(draft, "draft_logits", drafts(),
                  "it needs N = " + std::to_string(drafts()) + " rows (one per draft token)", true, Elem::logits),
          "draft_logits", target_logits.elem)),
      fields(target_params, draft_params, draft_to_target, unconditional_logits, unconditional_first_row,
             guidance_scale, allowed_tokens, history_offsets, history_tokens, history_counts, bias_offsets,
             bias_tokens, bias_values, offsets.batch_size, as_int32(target_logits.shape[1], "vocab size"),
             drafts() + offsets.batch_size, target_logits.elem,
             vocab_size_.is_none() ? as_int32(target_logits.shape[1], "vocab size")
                                   : as_int32(vocab_size_.cast<std::int64_t>(), "vocab_size")),
      batch_size(offsets.batch_size),
      vocab_size(static_cast<std::int32_t>(target_logits.shape[1])) {
  expect_draft_length(draft_logits, fields, vocab_size);
  // The target, draft and guidance rows are this rank's slice (a reduced draft vocabulary's whole).
  take_shard(shard_, vocab_size_, vocab_size, "target_logits", shard, global_vocab);
}

PyLogitsChainBatch PyLogitsChainBatch::fresh() const {
  return {offsets.offsets.source, offsets.draft_tokens.source, target_logits.source,
          source_or_none(draft_logits), fields.target_params.source, source_or_none(fields.draft_params),
          source_or_none(fields.draft_to_target), source_or_none(fields.unconditional_logits),
          source_or_none(fields.unconditional_first_row), source_or_none(fields.guidance_scale),
          source_or_none(fields.allowed_tokens), source_or_none(fields.history.offsets),
          source_or_none(fields.history.entries.tokens), source_or_none(fields.history.entries.values),
          source_or_none(fields.bias.offsets), source_or_none(fields.bias.entries.tokens),
          source_or_none(fields.bias.entries.values), py::cast(shard), py::int_(global_vocab)};
}

std::vector<Extent> PyLogitsChainBatch::inputs() const {
  std::vector<Extent> inputs = {extent_of(offsets.offsets, "draft_offsets", Elem::int32),
                                extent_of(offsets.draft_tokens, "draft_tokens", Elem::int32),
                                extent_of(target_logits, "target_logits", target_logits.elem),
                                extent_of(draft_logits, "draft_logits", draft_logits.elem)};
  fields.add_inputs(inputs);
  return inputs;
}

RowTypes<LogitsChainBatch> PyLogitsChainBatch::view() {
  offsets.snapshot();
  return logits_in_place<LogitsChainBatch>(*this, [&](auto& b) {
    b.draft_offsets = offsets.data();
    b.draft_tokens = offsets.tokens();
    fields.fill(b, offsets);
  });
}

RowTypes<LogitsChainBatch> PyLogitsChainBatch::device_view() const {
  return logits_in_place<LogitsChainBatch>(*this, [&](auto& b) {
    b.draft_offsets = offsets.offsets.as<const std::int32_t>();
    b.draft_tokens = drafts() ? offsets.draft_tokens.as<const std::int32_t>() : nullptr;
    fields.in_place(b);
  });
}

PyLogitsTreeBatch::PyLogitsTreeBatch(py::handle node_offsets, py::handle parents_, py::handle tokens,
                                     py::handle target, py::handle draft, Drafted drafted_,
                                     py::handle target_params, py::handle draft_params,
                                     py::handle draft_to_target, py::handle unconditional_logits,
                                     py::handle unconditional_first_row, py::handle guidance_scale,
                                     py::handle allowed_tokens, py::handle history_offsets,
                                     py::handle history_tokens, py::handle history_counts, py::handle bias_offsets,
                                     py::handle bias_tokens, py::handle bias_values, py::handle shard_,
                                     py::handle vocab_size_)
    : offsets(node_offsets, tokens, "node_offsets"),
      parents(as_parents(parents_, offsets)),
      target_logits(as_rows(target, "target_logits", drafts() + offsets.batch_size,
                            rows_needed(drafts(), offsets.batch_size, kTreeRows), false, Elem::logits)),
      draft_logits(with_target_dtype(
          as_rows(draft, "draft_logits", drafts() + offsets.batch_size,
                  rows_needed(drafts(), offsets.batch_size, kTreeRows) + ", laid out like target_logits", true,
                  Elem::logits),
          "draft_logits", target_logits.elem)),
      drafted(drafted_),
      fields(target_params, draft_params, draft_to_target, unconditional_logits, unconditional_first_row,
             guidance_scale, allowed_tokens, history_offsets, history_tokens, history_counts, bias_offsets,
             bias_tokens, bias_values, offsets.batch_size, as_int32(target_logits.shape[1], "vocab size"),
             drafts() + offsets.batch_size, target_logits.elem,
             vocab_size_.is_none() ? as_int32(target_logits.shape[1], "vocab size")
                                   : as_int32(vocab_size_.cast<std::int64_t>(), "vocab_size")),
      batch_size(offsets.batch_size),
      vocab_size(static_cast<std::int32_t>(target_logits.shape[1])) {
  expect_draft_length(draft_logits, fields, vocab_size);
  take_shard(shard_, vocab_size_, vocab_size, "target_logits", shard, global_vocab);
}

PyLogitsTreeBatch PyLogitsTreeBatch::fresh() const {
  return {offsets.offsets.source, parents.source, offsets.draft_tokens.source, target_logits.source,
          source_or_none(draft_logits), drafted, fields.target_params.source, source_or_none(fields.draft_params),
          source_or_none(fields.draft_to_target), source_or_none(fields.unconditional_logits),
          source_or_none(fields.unconditional_first_row), source_or_none(fields.guidance_scale),
          source_or_none(fields.allowed_tokens), source_or_none(fields.history.offsets),
          source_or_none(fields.history.entries.tokens), source_or_none(fields.history.entries.values),
          source_or_none(fields.bias.offsets), source_or_none(fields.bias.entries.tokens),
          source_or_none(fields.bias.entries.values), py::cast(shard), py::int_(global_vocab)};
}

std::vector<Extent> PyLogitsTreeBatch::inputs() const {
  std::vector<Extent> inputs = {extent_of(offsets.offsets, "node_offsets", Elem::int32),
                                extent_of(parents, "parents", Elem::int32),
                                extent_of(offsets.draft_tokens, "draft_tokens", Elem::int32),
                                extent_of(target_logits, "target_logits", target_logits.elem),
                                extent_of(draft_logits, "draft_logits", draft_logits.elem)};
  fields.add_inputs(inputs);
  return inputs;
}

RowTypes<LogitsTreeBatch> PyLogitsTreeBatch::view() {
  offsets.snapshot();
  return logits_in_place<LogitsTreeBatch>(*this, [&](auto& b) {
    b.node_offsets = offsets.data();
    b.parents = snapshot(parents, parents_copy);
    b.draft_tokens = offsets.tokens();
    b.drafted = drafted;
    fields.fill(b, offsets);
  });
}

RowTypes<LogitsTreeBatch> PyLogitsTreeBatch::device_view() const {
  return logits_in_place<LogitsTreeBatch>(*this, [&](auto& b) {
    const bool any = drafts() > 0;
    b.node_offsets = offsets.offsets.as<const std::int32_t>();
    b.parents = any ? parents.as<const std::int32_t>() : nullptr;
    b.draft_tokens = any ? offsets.draft_tokens.as<const std::int32_t>() : nullptr;
    b.drafted = drafted;
    fields.in_place(b);
  });
}

PyOutput::PyOutput(py::handle tokens_, py::handle num_accepted_, py::handle accepted_nodes_, py::handle logprobs_)
    : tokens(as_array(tokens_, "tokens", Elem::int32, 2, true)),
      num_accepted(as_array(num_accepted_, "num_accepted", Elem::int32, 1, true)),
      accepted_nodes(as_array(accepted_nodes_, "accepted_nodes", Elem::int32, 2, true, true)),
      logprobs(as_array(logprobs_, "logprobs", Elem::float32, 2, true, true)) {
  as_int32(tokens.shape[1], "tokens row width");
  expect_extent(num_accepted, "num_accepted", 0, tokens.shape[0],
                "tokens has " + std::to_string(tokens.shape[0]) + " rows");
  // The C++ outputs have no row stride: row b starts at b * row_width.
  for (const auto& [a, name] : {std::pair{&tokens, "tokens"}, {&accepted_nodes, "accepted_nodes"}, {&logprobs, "logprobs"}}) {
    if (!a->present()) continue;
    if (a != &tokens && a->shape != tokens.shape) {
      reject(name, " has shape ", detail::describe_shape(a->shape), ", but it must be shaped like tokens ",
             detail::describe_shape(tokens.shape));
    }
    if (a->shape[0] > 1 && a->strides[0] != a->shape[1]) {
      reject(name, ": rows must be contiguous and adjacent (row stride ", std::to_string(a->strides[0]),
             " != row width ", std::to_string(a->shape[1]), ")");
    }
  }
}

std::vector<Extent> PyOutput::outputs() const {
  return {extent_of(tokens, "tokens", Elem::int32), extent_of(num_accepted, "num_accepted", Elem::int32),
          extent_of(accepted_nodes, "accepted_nodes", Elem::int32), extent_of(logprobs, "logprobs", Elem::float32)};
}

void PyOutput::expect_batch(std::int32_t batch_size) const {
  expect_extent(tokens, "tokens", 0, batch_size, "the batch has B = " + std::to_string(batch_size) + " sequences");
}

PyRandomness PyRandomness::fresh() const {
  return {seed, offset, again(sequence_seeds, "sequence_seeds", Elem::seed64, 1),
          again(accept_uniforms, "accept_uniforms", Elem::float32, 1),
          again(sample_uniforms, "sample_uniforms", Elem::float32, 1), again(positions, "positions", Elem::int64, 1)};
}

std::vector<Extent> PyRandomness::inputs() const {
  return {extent_of(sequence_seeds, "sequence_seeds", Elem::seed64),
          extent_of(accept_uniforms, "accept_uniforms", Elem::float32),
          extent_of(sample_uniforms, "sample_uniforms", Elem::float32), extent_of(positions, "positions", Elem::int64)};
}

Randomness PyRandomness::view(std::int64_t batch_size, std::int64_t drafts) const {
  const std::string b = std::to_string(batch_size);
  for (const auto& [a, name] : {std::pair{&sequence_seeds, "sequence_seeds"}, {&sample_uniforms, "sample_uniforms"},
                                {&positions, "positions"}}) {
    if (a->present()) expect_extent(*a, name, 0, batch_size, "the batch has B = " + b + " sequences");
  }
  if (accept_uniforms.present()) {
    expect_extent(accept_uniforms, "accept_uniforms", 0, drafts,
                  "it needs one uniform per draft token (" + std::to_string(drafts) + ")");
  }
  Randomness r;
  r.seed = seed;
  r.offset = offset;
  r.sequence_seeds = sequence_seeds.as<const std::uint64_t>();
  r.accept_uniforms = accept_uniforms.as<const float>();
  r.sample_uniforms = sample_uniforms.as<const float>();
  r.positions = positions.as<const std::int64_t>();
  return r;
}

}  // namespace specverify::python
