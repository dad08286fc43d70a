// Host-side validation of the logits batches: what ChainBatch / TreeBatch validation checks, plus
// each sequence's sampling parameters, the reduced draft vocabulary's map, the guidance rows, and
// the messages for a bad logit a row's pre-pass found.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>
#include <cstdint>
#include <sstream>
#include <vector>

#include "specverify/core/logit_rows.hpp"
#include "specverify/core/logit_source.hpp"
#include "specverify/core/overlay.hpp"
#include "specverify/core/padded_chain.hpp"
#include "specverify/core/validate.hpp"
#include "specverify/sampling.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

namespace detail {

/// A vocabulary of rows of logits no larger than kMaxLogitsVocab; the first check of a logits
/// batch on every backend (and of sample()), as its size is part of the shape. `who` begins the
/// message.
inline void check_logits_vocab(std::int32_t vocab_size, const char* who = "specverify::verify: ") {
  if (vocab_size <= kMaxLogitsVocab) return;
  std::ostringstream m;
  m << who << "vocab_size = " << vocab_size << " exceeds " << kMaxLogitsVocab
    << " (2^22), the largest vocabulary rows of logits support (their normaliser's fixed-point sum)";
  throw invalid_input(m.str());
}

/// A sequence's sampling parameters out of range (check_sampling_params found `problem`).
SPECVERIFY_HD inline Finding params_finding(const Problem& problem, bool draft, std::int32_t b) {
  Finding f = sequence_finding(Check::rule_input, Stage::params, b);
  const char* prefix = draft ? "draft_params." : "target_params.";
  std::size_t i = 0;
  for (const char* s = prefix; *s && i + 1 < sizeof f.name; ++s) f.name[i++] = *s;
  for (const char* s = problem.what; s && *s && i + 1 < sizeof f.name; ++s) f.name[i++] = *s;
  f.name[i] = '\0';
  return f.of(problem.value);
}

/// draft_to_target[d] = v refused: outside the target vocabulary, or v already claimed.
SPECVERIFY_HD inline Finding draft_map_finding(std::int32_t d, std::int64_t v, std::int32_t vocab_size) {
  const bool range = v < 0 || v >= vocab_size;
  return batch_finding(range ? Check::draft_map_range : Check::draft_map_twice, Stage::draft_map).ints(d, v);
}

/// Sequence b's guidance: its first unconditional row, its `rows` rows (k_b + 1) at `stride`
/// (0: vocab_size) addressable by int64, and, where it has rows, a finite scale.
SPECVERIFY_HD inline Finding guidance_finding(std::int64_t first, float scale, std::int32_t b, std::int64_t rows,
                                              std::int64_t stride, std::int32_t vocab_size) {
  if (first < -1) return sequence_finding(Check::guidance_row, Stage::guidance, b).ints(first);
  if (first < 0) return {};
  const std::int64_t s = stride ? stride : vocab_size;
  if (first > INT64_MAX - rows || s > (INT64_MAX - vocab_size) / (first + rows)) {
    return sequence_finding(Check::guidance_overflow, Stage::guidance, b).ints(first, s);
  }
  if (!std::isfinite(scale)) return sequence_finding(Check::guidance_scale, Stage::guidance, b).of(scale);
  return {};
}

/// Sequence b's rows (k_b + 1 target rows, as many unconditional ones).
template <class Logit>
SPECVERIFY_HD std::int64_t sequence_rows(const LogitsChainBatch<Logit>& batch, std::int32_t b) {
  return std::int64_t{batch.draft_offsets[b + 1]} - batch.draft_offsets[b] + 1;
}
template <class Logit>
SPECVERIFY_HD std::int64_t sequence_rows(const LogitsTreeBatch<Logit>& batch, std::int32_t b) {
  return std::int64_t{batch.node_offsets[b + 1]} - batch.node_offsets[b] + 1;
}

/// The batch's draft rows (one per draft slot or node, as many as its draft_tokens).
template <class Logit>
SPECVERIFY_HD std::int64_t draft_rows(const LogitsChainBatch<Logit>& batch) {
  return batch.draft_offsets[batch.batch_size];
}
template <class Logit>
SPECVERIFY_HD std::int64_t draft_rows(const LogitsTreeBatch<Logit>& batch) {
  return std::int64_t{batch.node_offsets[batch.batch_size]} + batch.batch_size;
}

/// The draft rows of a batch (`rows` of them) stay addressable by int64 at draft_stride.
SPECVERIFY_HD_TEMPLATE
template <class Batch>
SPECVERIFY_HD Finding check_draft_rows(const Batch& batch, std::int64_t rows) {
  const std::int32_t draft_v = batch.draft_vocab_size > 0 ? batch.draft_vocab_size : batch.vocab_size;
  Finding f = check_stride_rows("draft_stride", batch.draft_stride, rows, draft_v);
  f.stage = Stage::draft_rows;
  return f;
}

/// The probability batch whose checks a logits batch shares: offsets, tokens, parents, uniforms,
/// rule inputs, the output's width and the target rows' stride.
template <class Logit>
SPECVERIFY_HD ChainBatch<Logit> probability_shape(const LogitsChainBatch<Logit>& batch) {
  ChainBatch<Logit> shape;
  shape.batch_size = batch.batch_size;
  shape.vocab_size = batch.vocab_size;
  shape.draft_offsets = batch.draft_offsets;
  shape.draft_tokens = batch.draft_tokens;
  shape.target_probs = batch.target_logits;
  shape.target_stride = batch.target_stride;
  shape.draft_probs = batch.draft_logits;  // whether there is q (a rule may need it); its rows are checked later
  return shape;
}
template <class Logit>
SPECVERIFY_HD TreeBatch<Logit> probability_shape(const LogitsTreeBatch<Logit>& batch) {
  TreeBatch<Logit> shape;
  shape.batch_size = batch.batch_size;
  shape.vocab_size = batch.vocab_size;
  shape.node_offsets = batch.node_offsets;
  shape.parents = batch.parents;
  shape.draft_tokens = batch.draft_tokens;
  shape.target_probs = batch.target_logits;
  shape.draft_probs = batch.draft_logits;
  shape.target_stride = batch.target_stride;
  shape.drafted = batch.drafted;
  return shape;
}
template <class Logit>
SPECVERIFY_HD PaddedChainBatch<Logit> probability_shape(const PaddedLogitsChainBatch<Logit>& batch) {
  PaddedChainBatch<Logit> shape{probability_shape(static_cast<const LogitsChainBatch<Logit>&>(batch))};
  shape.num_draft_tokens = batch.num_draft_tokens;
  return shape;
}

/// What walking sequence b of a logits batch found, once name_bad_value has named a bad logit.
SPECVERIFY_HD inline Finding logits_fault_finding(const Fault& f, std::int32_t b, Place item) {
  Finding finding = from_fault(f, b, item);
  if (f.kind == FaultKind::bad_value) {
    finding.check = Check::logit_value;
    finding.named(f.target_row >= 0 ? "target logits row" : "draft logits row");
  } else if (f.kind == FaultKind::target_no_mass || f.kind == FaultKind::draft_no_mass) {
    finding.check = Check::no_kept_token;
    finding.named(f.target_row >= 0 ? "target logits row" : "draft logits row");
  }
  return finding;
}

/// A bad logit the naming found in a guided target row, where the logit l itself is fine: a NaN
/// or +inf unconditional logit u is named in its own row, else guidance overflowed and the
/// guided value and the scale are named. `first`: the token the source's rows start at (a rank's
/// slice of a sharded row; f.column is a token).
SPECVERIFY_HD_TEMPLATE
template <class Source>
SPECVERIFY_HD void name_guidance_fault(Finding& finding, const Fault& f, std::int32_t b, const Source& source,
                                       std::int32_t first = 0) {
  if (f.kind != FaultKind::bad_value || f.target_row < 0 || f.column < 0) return;
  const auto row = source.target_row(b, f.target_row);
  if (!row.unconditional) return;
  const std::int32_t i = f.column - first;
  const float l = static_cast<float>(row.logits[i]), u = static_cast<float>(row.unconditional[i]);
  if (!(l < kInf)) return;
  if (!(u < kInf)) {
    const std::int64_t j = f.target_row - (std::int64_t{source.offsets[b]} + b);
    finding.named("unconditional logits row").ints(source.unconditional_first_row[b] + j, f.column).of(u);
    return;
  }
  finding.check = Check::guided_logit;
  finding.value = fused(row.guidance_scale, l - u, u);
  finding.other = row.guidance_scale;
}

/// What sequence b reports of a ragged list's offsets [B+1] (sequence 0 the batch's own facts:
/// they start at 0, and its arrays are non-null where it holds entries): they do not decrease at b.
SPECVERIFY_HD inline Finding list_offsets_finding(const char* name, const std::int32_t* offsets, std::int32_t B,
                                                  std::int32_t b, const char* first_name, const void* first,
                                                  const char* second_name, const void* second) {
  if (b == 0) {
    if (offsets[0] != 0) return batch_finding(Check::offsets_start, Stage::penalties).named(name).ints(offsets[0]);
    if (offsets[B] > 0 && !first) return batch_finding(Check::null_pointer, Stage::penalties).named(first_name);
    if (offsets[B] > 0 && !second) return batch_finding(Check::null_pointer, Stage::penalties).named(second_name);
  }
  if (offsets[b + 1] < offsets[b]) {
    return sequence_finding(Check::offsets_decrease, Stage::penalties, b).named(name).ints(offsets[b], offsets[b + 1]);
  }
  return {};
}

/// Whether history entries [first, last) are all fine: tokens in [0, V), ascending, counts >= 0.
/// One pass without early exits, which the compiler vectorises (histories run to thousands of
/// entries per sequence and call).
SPECVERIFY_HD inline bool history_fine(const std::int32_t* tokens, const std::int32_t* counts, std::int32_t first,
                                       std::int32_t last, std::int32_t V) {
  if (first >= last) return true;
  std::int32_t bad = static_cast<std::uint32_t>(tokens[first]) >= static_cast<std::uint32_t>(V) || counts[first] < 0;
  for (std::int32_t e = first + 1; e < last; ++e) {
    bad |= (static_cast<std::uint32_t>(tokens[e]) >= static_cast<std::uint32_t>(V)) | (counts[e] < 0) |
           (tokens[e] <= tokens[e - 1]);
  }
  return bad == 0;
}

/// Sequence b's history and bias lists (docs/api.md "Penalties and logit bias"): history tokens in
/// [0, V), ascending (so unique), counts >= 0; bias tokens in [0, V) with finite values. The first
/// fault in entry order, the history's before the bias's; a bias token entered twice is
/// bias_twice's to find. Host and device alike: a backend reports sequence by sequence, so the
/// lowest sequence's fault wins.
template <class Batch>
SPECVERIFY_HD Finding penalty_lists_finding(const Batch& batch, std::int32_t b) {
  const std::int32_t B = batch.batch_size;
  const auto token = [&](const char* name, std::int32_t e, std::int32_t v) {
    return sequence_finding(Check::list_token, Stage::penalties, b).named(name).ints(e, v).of(batch.vocab_size);
  };
  if (const std::int32_t* o = batch.history_offsets) {
    if (Finding f = list_offsets_finding("history_offsets", o, B, b, "history_tokens", batch.history_tokens,
                                         "history_counts", batch.history_counts)) {
      return f;
    }
    const std::int32_t* tokens = batch.history_tokens;
    const std::int32_t* counts = batch.history_counts;
    // The common case in one pass without branches; a fault is then named entry by entry.
    const bool fine = o[b] >= 0 && tokens && counts && history_fine(tokens, counts, o[b], o[b + 1], batch.vocab_size);
    for (std::int32_t e = o[b]; !fine && e >= 0 && e < o[b + 1] && tokens && counts; ++e) {
      const std::int32_t v = tokens[e];
      if (v < 0 || v >= batch.vocab_size) return token("history_tokens", e, v);
      if (e > o[b] && v <= tokens[e - 1]) {
        return sequence_finding(Check::history_order, Stage::penalties, b).ints(e, v).of(tokens[e - 1]);
      }
      if (counts[e] < 0) return sequence_finding(Check::history_count, Stage::penalties, b).ints(e, counts[e]);
    }
  }
  if (const std::int32_t* o = batch.bias_offsets) {
    if (Finding f = list_offsets_finding("bias_offsets", o, B, b, "bias_tokens", batch.bias_tokens, "bias_values",
                                         batch.bias_values)) {
      return f;
    }
    for (std::int32_t e = o[b]; e >= 0 && e < o[b + 1] && batch.bias_tokens && batch.bias_values; ++e) {
      const std::int32_t v = batch.bias_tokens[e];
      if (v < 0 || v >= batch.vocab_size) return token("bias_tokens", e, v);
      if (!finite(batch.bias_values[e])) {
        return sequence_finding(Check::bias_value, Stage::penalties, b).ints(e).of(batch.bias_values[e]);
      }
    }
  }
  return {};
}

/// A bias token entered twice in sequence b, named as both backends name it: the lowest such
/// token, its second entry, and the first (entries are batch indices).
SPECVERIFY_HD inline Finding bias_twice_finding(std::int32_t b, std::int32_t token, std::int32_t second,
                                                std::int32_t first) {
  return sequence_finding(Check::bias_twice, Stage::penalties, b).ints(second, token).of(first);
}

/// The history and bias lists of every sequence, in sequence order (penalty_lists_finding, then a
/// token biased twice). `bias_order` receives each sequence's bias entries (sequence-local
/// indices) in increasing token order, for the overlays.
template <class Batch>
void check_penalty_lists(const Batch& batch, std::vector<std::int32_t>& bias_order) {
  bias_order.clear();
  for (std::int32_t b = 0; b < batch.batch_size; ++b) {
    raise_if(penalty_lists_finding(batch, b));
    if (!batch.bias_offsets) continue;
    const std::int32_t first = batch.bias_offsets[b], size = batch.bias_offsets[b + 1] - first;
    const std::int32_t* tokens = batch.bias_tokens + first;
    const std::size_t at = bias_order.size();
    for (std::int32_t k = 0; k < size; ++k) bias_order.push_back(k);
    std::int32_t* order = bias_order.data() + at;
    // Token order, ties by entry: the first repeated pair is the lowest token's first two entries.
    std::sort(order, order + size, [&](std::int32_t x, std::int32_t y) {
      return tokens[x] != tokens[y] ? tokens[x] < tokens[y] : x < y;
    });
    for (std::int32_t k = 1; k < size; ++k) {
      if (tokens[order[k]] == tokens[order[k - 1]]) {
        raise(bias_twice_finding(b, tokens[order[k]], first + order[k], first + order[k - 1]));
      }
    }
  }
}

/// A bad logit the naming found where the inputs are fine but steps 2-3 (bias, penalties) made a
/// finite value infinite: the value after them and the one before are named. `first` as for
/// name_guidance_fault.
template <class Source>
SPECVERIFY_HD void name_penalty_fault(Finding& finding, const Fault& f, std::int32_t b, const Source& source,
                                      std::int32_t first = 0) {
  if (f.kind != FaultKind::bad_value || f.column < 0 || finding.check != Check::logit_value) return;
  const auto row = f.target_row >= 0 ? source.target_row(b, f.target_row) : source.draft_row(b, f.draft_row);
  const Processed before = guided_logit(row, f.column - first);
  float bias, count;
  bool in;
  const std::int32_t v = row.row_to_target ? row.row_to_target[f.column] : f.column;
  if (!listed(row.lists, v, bias, in, count)) return;
  if (!before.valid || !finite(before.g)) return;
  const float after = penalised(before.g, bias, in, count, row.params);
  if (finite(after)) return;
  finding.check = Check::penalised_logit;
  finding.value = after;
  finding.other = before.g;
}

template <class Batch>
void check_logits(const Batch& batch, std::vector<std::int32_t>& target_to_draft, std::vector<std::int32_t>& bias_order) {
  const std::int32_t B = batch.batch_size;
  if (!batch.target_params) reject("target_params is null");
  for (std::int32_t b = 0; b < B; ++b) {
    for (const bool draft : {false, true}) {
      if (draft && !batch.draft_params) break;
      const SamplingParams& params = draft ? batch.draft_params[b] : batch.target_params[b];
      if (const Problem problem = check_sampling_params(params)) {
        raise(params_finding(problem, draft, b));
      }
    }
  }
  if (batch.draft_vocab_size < 0) reject("draft_vocab_size = ", batch.draft_vocab_size, " must be >= 0");
  const std::int64_t draft_v = batch.draft_vocab_size > 0 ? batch.draft_vocab_size : batch.vocab_size;
  if (batch.draft_stride != 0 && batch.draft_stride < draft_v) {
    reject("draft_stride = ", batch.draft_stride, " must be 0 or at least the draft vocabulary size = ", draft_v);
  }
  raise_if(check_draft_rows(batch, draft_rows(batch)));
  target_to_draft.clear();
  if (batch.draft_vocab_size > 0) {
    if (!batch.draft_to_target) reject("draft_to_target is null (draft_vocab_size = ", batch.draft_vocab_size, ")");
    target_to_draft.resize(static_cast<std::size_t>(batch.vocab_size));
    if (const DraftMapFault f = build_target_to_draft(batch.draft_to_target, batch.draft_vocab_size,
                                                      batch.vocab_size, target_to_draft.data())) {
      raise(draft_map_finding(f.entry, f.value, batch.vocab_size));
    }
  }
  if (batch.unconditional_logits) {
    if (!batch.unconditional_first_row) reject("unconditional_first_row is null (guidance rows are given)");
    if (!batch.guidance_scale) reject("guidance_scale is null (guidance rows are given)");
    if (batch.unconditional_stride != 0 && batch.unconditional_stride < batch.vocab_size) {
      reject("unconditional_stride = ", batch.unconditional_stride, " must be 0 or at least vocab_size = ",
             batch.vocab_size);
    }
    for (std::int32_t b = 0; b < B; ++b) {
      const std::int64_t first = batch.unconditional_first_row[b];
      raise_if(guidance_finding(first, batch.guidance_scale[b], b, sequence_rows(batch, b),
                                batch.unconditional_stride, batch.vocab_size));
    }
  }
  check_penalty_lists(batch, bias_order);
}

/// The first logit at row index i..n of a row its pre-pass found bad (NaN or +inf, or a guided
/// value that overflows), and its value.
template <class Logit>
std::int32_t first_bad_logit(const LogitRow<Logit>& row, float& value) {
  for (std::int32_t i = 0; i < row.n; ++i) {
    if (!processed_logit(row, i).valid) {
      value = static_cast<float>(row.logits[i]);
      return i;
    }
  }
  return -1;
}

}  // namespace detail

/// Throws invalid_input for anything wrong with a batch of logits (LogitsChainBatch,
/// LogitsTreeBatch, PaddedLogitsChainBatch): its probability shape's checks, then the logits' own.
/// `target_to_draft` receives the inverse of draft_to_target when the draft vocabulary is reduced,
/// `bias_order` each sequence's bias entries in token order (LogitSource::of takes both).
template <class Rule, class Batch, class Output>
void validate_logits(const Rule& rule, const Batch& batch, const Randomness& randomness, const Output& out,
                     std::vector<std::int32_t>& target_to_draft, std::vector<std::int32_t>& bias_order) {
  reject_sharded(batch);
  detail::check_logits_vocab(batch.vocab_size);
  if (batch.batch_size > 0 && !batch.target_logits) detail::reject("target_logits is null");
  validate(rule, detail::probability_shape(batch), randomness, out);
  check_positions<Rule>(randomness);
  if (batch.batch_size == 0) return;
  detail::check_logits(batch, target_to_draft, bias_order);
}

/// Throws the invalid_input describing what walking sequence b of a logits batch found: a bad
/// logit a pre-pass read is named by scanning its row.
template <class Layout, class Batch, class Source>
[[noreturn]] void report_logits(const Fault& fault, std::int32_t b, const Batch&, const Source& source) {
  Fault f = fault;
  OverlayRoom room;
  name_bad_value(f, b, source, [&](auto row, float& value) {
    room.build(row);
    return detail::first_bad_logit(row, value);
  });
  Finding finding = detail::logits_fault_finding(f, b, std::is_same_v<Layout, ChainLayout> ? Place::position : Place::node);
  detail::name_guidance_fault(finding, f, b, source);
  detail::name_penalty_fault(finding, f, b, source);
  raise(finding);
}

}  // namespace specverify::core
