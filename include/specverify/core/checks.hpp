// One validator for every backend: what verify() checks before walking a sequence, written once as
// __host__ __device__ functions that return a small record (Finding) rather than throw. The host
// keeps the first finding and throws it (core/validate.hpp); the CUDA kernel records it in the
// workspace, where the data lives, and check() throws it later. One function words every finding
// (core::message), so a fault reads the same whichever backend found it.
//
// The order of the checks is the same everywhere; the first finding in it is the one reported:
//   shape     (host only) sizes, rule parameters, required pointers, strides below vocab_size
//   start     offsets[0] == 0
//   offsets   offsets[b + 1] >= offsets[b], lowest b first
//   rows      row counts and strides in range, the pointers the drafts need
//   sequence  lowest b first: its head (sample uniform), its items in index order (a chain's
//             positions, a tree's nodes), its tail (row_width against its longest path)
//   params .. guidance   (logits only) sampling parameters, the draft rows, the draft map, guidance
//   walk      what the rows held (walk.hpp's Fault), lowest b first
// What each stage checks for one kind of batch is in BatchChecks<Batch>: a new batch kind adds its
// checks there, and the drivers below, the host's throw and the device's record stay as they are.
#pragma once

#include <cstdint>
#include <type_traits>

#include "specverify/config.hpp"
#include "specverify/core/chain_layout.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/core/tree_layout.hpp"
#include "specverify/core/walk_steps.hpp"
#include "specverify/rule.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

/// What is wrong. The fields of Finding each one fills are listed beside it.
enum class Check : std::uint8_t {
  none,
  batch_size,         // a: batch_size
  vocab_size,         // a: vocab_size
  rule_parameter,     // name, value: rule.check() found a parameter out of range
  rule_pointer,       // name: rule.check() found a required pointer null
  null_pointer,       // name
  q_needed,           // a tree drafted by sampling without draft_probs
  stride_too_small,   // name, a: stride, c: vocab_size
  workspace,          // a: bytes given, c: bytes needed (backends with a workspace)
  offsets_start,      // name: the offsets array, a: offsets[0]
  offsets_decrease,   // name, a: offsets[b], c: offsets[b + 1]
  rows_overflow,      // name, a: offsets[B] + B
  stride_overflow,    // name, a: the stride, c: rows
  sample_uniform,     // value
  parent,             // a: the parent, c: the node (its upper bound)
  draft_token,        // a: the token, c: vocab_size
  accept_uniform,     // value
  rule_input,         // name, value: rule.check_draft() found a per-draft input out of range
  row_width,          // name: what must fit, a: row_width, c: what it must be at least
  row_value,          // name: "target row" or "draft row", a: the row, c: the token, value
  row_max,            // a: the row, value
  no_mass,            // name: the row's kind, a: the row
  too_many_children,  // a: the siblings the backend's rows hold (a CUDA block's fixed room)
  logit_value,        // name: "target logits row" or "draft logits row", a: the row, c: the index, value
  no_kept_token,      // name: target or draft logits row, a: the row
  draft_map_range,    // a: the draft id, c: its target id outside [0, vocab_size)
  draft_map_twice,    // a: the draft id, c: the target id a lower draft id already maps to
  guidance_row,       // a: unconditional_first_row[b]
  guidance_scale,     // value: guidance_scale[b]
  drafted,            // a: the value of a tree batch's `drafted`, outside the enum
  guidance_overflow,  // a: unconditional_first_row[b], c: the unconditional rows' stride
  guided_logit,       // a: the target logits row, c: the index, value: u + s (l - u), other: s
  iid_drafts_needed,  // a: the batch's Drafted, -1: no draft rows (Traversal needs sampled children and q)
  too_deep,           // a: the deepest path a joint walk keeps (Traversal's frames)
  list_token,         // name: history_tokens or bias_tokens, a: the entry, c: the token, value: vocab_size
  history_order,      // a: the entry, c: its token, value: the token of the entry before it
  history_count,      // a: the entry, c: its count
  bias_twice,         // a: the entry, c: its token, value: the sequence's earlier entry with that token
  bias_value,         // a: the entry, value
  penalised_logit,    // name: the row's kind, a: the row, c: the index, value: after steps 2-3, other: before
  draft_count,        // a: a padded chain's num_draft_tokens[b], c: its draft slots (core/padded_chain.hpp)
};
inline constexpr Check kLastCheck = Check::draft_count;  // a new check goes above and here

/// The stages of the order above: a lower stage is reported first.
/// Batches of logits check their sampling inputs after every sequence's: params (per sequence),
/// draft_rows and draft_map (the batch's), guidance (per sequence).
/// Then the penalty and bias lists (per sequence).
enum class Stage : std::uint8_t { shape, start, offsets, rows, sequence, params, draft_rows, draft_map, guidance, penalties, walk };

/// Where a finding is: the batch as a whole, a sequence, or one of its items.
enum class Place : std::uint8_t { batch, sequence, position, node, root };

/// One finding: plain data, the same on host and device, copied as bytes between them.
struct Finding {
  Check check = Check::none;
  Stage stage = Stage::shape;
  Place place = Place::batch;
  std::int32_t sequence = 0;  // 0 for the batch's own facts (sequence 0 reports them)
  std::int32_t item = 0;      // the position or node
  std::int64_t a = 0, c = 0;
  double value = 0;
  double other = 0;  // a second value where a check names one (guided_logit: the scale)
  char name[40] = {};

  SPECVERIFY_HD explicit operator bool() const { return check != Check::none; }
  /// Whether a finding that came from elsewhere (a peer rank's message) is one a check could have
  /// made: a check, its enums in range, its name terminated.
  SPECVERIFY_HD bool well_formed() const {
    bool terminated = false;
    for (const char c : name) terminated = terminated || c == '\0';
    return check != Check::none && check <= kLastCheck && stage <= Stage::walk && place <= Place::root && terminated;
  }
  /// Lower ranks are reported first: by stage, then by sequence.
  SPECVERIFY_HD std::uint64_t rank() const {
    return (std::uint64_t(stage) << 32) | std::uint32_t(sequence);
  }

  SPECVERIFY_HD Finding& at(Place p, std::int32_t i) {
    place = p;
    item = i;
    return *this;
  }
  SPECVERIFY_HD Finding& ints(std::int64_t first, std::int64_t second = 0) {
    a = first;
    c = second;
    return *this;
  }
  SPECVERIFY_HD Finding& of(double v) {
    value = v;
    return *this;
  }
  SPECVERIFY_HD Finding& named(const char* what) {
    std::size_t i = 0;
    for (; what && what[i] && i + 1 < sizeof name; ++i) name[i] = what[i];
    name[i] = '\0';
    return *this;
  }
};

/// A finding about the batch as a whole (stage shape, start or rows).
SPECVERIFY_HD inline Finding batch_finding(Check check, Stage stage) {
  Finding f;
  f.check = check;
  f.stage = stage;
  return f;
}

/// A finding about sequence b (stage offsets, sequence or walk).
SPECVERIFY_HD inline Finding sequence_finding(Check check, Stage stage, std::int32_t b) {
  Finding f = batch_finding(check, stage);
  f.place = Place::sequence;
  f.sequence = b;
  return f;
}

SPECVERIFY_HD inline bool is_uniform(float u) { return u >= 0.0f && u < 1.0f; }

/// A problem rule.check() found in the rule's parameters.
inline Finding rule_finding(const Problem& problem) {
  return batch_finding(problem.has_value ? Check::rule_parameter : Check::rule_pointer, Stage::shape)
      .named(problem.what)
      .of(problem.value);
}

// ---- The checks every batch kind shares ----

SPECVERIFY_HD inline Finding check_pointer(const void* pointer, const char* name, Stage stage = Stage::shape) {
  return pointer ? Finding{} : batch_finding(Check::null_pointer, stage).named(name);
}

/// A stride is 0 (vocab_size) or at least vocab_size.
inline Finding check_stride_size(const char* name, std::int64_t stride, std::int32_t vocab_size) {
  if (stride == 0 || stride >= vocab_size) return {};
  return batch_finding(Check::stride_too_small, Stage::shape).named(name).ints(stride, vocab_size);
}

/// `rows` rows of `stride` elements stay addressable by int64.
SPECVERIFY_HD inline Finding check_stride_rows(const char* name, std::int64_t stride, std::int64_t rows,
                                               std::int32_t vocab_size) {
  const std::int64_t s = stride ? stride : vocab_size;
  if (rows <= 0 || s <= (INT64_MAX - vocab_size) / rows) return {};
  return batch_finding(Check::stride_overflow, Stage::rows).named(name).ints(s, rows);
}

/// offsets[B] + B rows (the target rows of B sequences) stay within int32.
SPECVERIFY_HD inline Finding check_row_count(const char* offsets_name, std::int32_t items, std::int32_t B) {
  if (items <= INT32_MAX - B) return {};
  return batch_finding(Check::rows_overflow, Stage::rows).named(offsets_name).ints(std::int64_t{items} + B);
}

SPECVERIFY_HD inline Finding check_sample_uniform(const Randomness& r, std::int32_t b) {
  if (!r.sample_uniforms || is_uniform(r.sample_uniforms[b])) return {};
  return sequence_finding(Check::sample_uniform, Stage::sequence, b).of(r.sample_uniforms[b]);
}

/// One draft's own inputs (a chain's position or a tree's node, global index g): its token, its
/// caller uniform, and the rule's per-draft inputs.
SPECVERIFY_HD_TEMPLATE
template <class Rule>
SPECVERIFY_HD Finding check_draft(const Rule& rule, const Randomness& r, std::int32_t vocab_size,
                                  std::int32_t token, std::int32_t g, std::int32_t b, Place place,
                                  std::int32_t i) {
  if (token < 0 || token >= vocab_size) {
    return sequence_finding(Check::draft_token, Stage::sequence, b).at(place, i).ints(token, vocab_size);
  }
  if (r.accept_uniforms && !is_uniform(r.accept_uniforms[g])) {
    return sequence_finding(Check::accept_uniform, Stage::sequence, b).at(place, i).of(r.accept_uniforms[g]);
  }
  if (const Problem problem = rule_traits<Rule>::check_draft(rule, g)) {
    return sequence_finding(Check::rule_input, Stage::sequence, b).at(place, i).named(problem.what).of(problem.value);
  }
  return {};
}

/// Strides of the target and draft rows: 0 (vocab_size) or at least vocab_size.
template <class Batch>
Finding check_strides(const Batch& batch) {
  if (Finding f = check_stride_size("target_stride", batch.target_stride, batch.vocab_size)) return f;
  return check_stride_size("draft_stride", batch.draft_stride, batch.vocab_size);
}

// ---- What each batch kind checks, stage by stage ----

/// Specialised per batch kind, with what only that kind has (the drivers below do the rest):
///   Layout, kItem                         its layout and the word for an item (position, node)
///   offsets(batch), offsets_name()        the offsets array
///   shape(batch)                          host: its row pointers, strides and other fields
///   rows(batch, items)                    given sound offsets (items = offsets[B]): row counts
///                                         and strides in range, the pointers the items need
///   head(batch, randomness, b)            per sequence, before its items (a sequence's parameters)
///   item(rule, batch, randomness, b, i)   item i of sequence b (check_draft, and its parent)
///   tail(batch, row_width, b, items)      per sequence, after its items: paths fit the output
template <class Batch>
struct BatchChecks;

/// The default of the optional stages.
struct NoSequenceHead {
  template <class Batch>
  SPECVERIFY_HD static Finding head(const Batch&, const Randomness&, std::int32_t) {
    return {};
  }
};

template <class Prob>
struct BatchChecks<ChainBatch<Prob>> : NoSequenceHead {
  using Batch = ChainBatch<Prob>;
  using Layout = ChainLayout;
  static constexpr Place kItem = Place::position;

  SPECVERIFY_HD static const char* offsets_name() { return "draft_offsets"; }
  SPECVERIFY_HD static const std::int32_t* offsets(const Batch& batch) { return batch.draft_offsets; }
  /// -1 when the drafts come without q (one-hot), else how they were drafted.
  static int drafted(const Batch& batch) { return batch.draft_probs ? static_cast<int>(Drafted::sampled) : -1; }

  static Finding shape(const Batch& batch) {
    if (Finding f = check_pointer(batch.target_probs, "target_probs")) return f;
    return check_strides(batch);
  }

  /// k_b + 1 target rows per sequence, one draft row per draft.
  SPECVERIFY_HD static Finding rows(const Batch& batch, std::int32_t drafts) {
    const std::int32_t V = batch.vocab_size;
    const std::int64_t target_rows = std::int64_t{drafts} + batch.batch_size;
    if (Finding f = check_stride_rows("target_stride", batch.target_stride, target_rows, V)) return f;
    if (Finding f = check_stride_rows("draft_stride", batch.draft_stride, drafts, V)) return f;
    return drafts > 0 ? check_pointer(batch.draft_tokens, "draft_tokens", Stage::rows) : Finding{};
  }

  SPECVERIFY_HD_TEMPLATE
  template <class Rule>
  SPECVERIFY_HD static Finding item(const Rule& rule, const Batch& batch, const Randomness& r,
                                    std::int32_t b, std::int32_t i) {
    const std::int32_t g = batch.draft_offsets[b] + i;
    return check_draft(rule, r, batch.vocab_size, batch.draft_tokens[g], g, b, kItem, i);
  }

  /// The chain and the one token after it fit the output row.
  template <class Items>
  SPECVERIFY_HD static Finding tail(const Batch& batch, std::int32_t row_width, std::int32_t b, Items&) {
    const std::int64_t needed = std::int64_t{batch.draft_offsets[b + 1]} - batch.draft_offsets[b] + 1;
    if (row_width >= needed) return {};
    return sequence_finding(Check::row_width, Stage::sequence, b).named("its chain").ints(row_width, needed);
  }
};

template <class Prob>
struct BatchChecks<TreeBatch<Prob>> : NoSequenceHead {
  using Batch = TreeBatch<Prob>;
  using Layout = TreeLayout;
  static constexpr Place kItem = Place::node;

  SPECVERIFY_HD static const char* offsets_name() { return "node_offsets"; }
  SPECVERIFY_HD static const std::int32_t* offsets(const Batch& batch) { return batch.node_offsets; }
  static int drafted(const Batch& batch) { return batch.draft_probs ? static_cast<int>(batch.drafted) : -1; }

  static Finding shape(const Batch& batch) {
    if (Finding f = check_pointer(batch.target_probs, "target_probs")) return f;
    const auto drafted = static_cast<int>(batch.drafted);
    if (drafted < 0 || drafted > static_cast<int>(Drafted::deterministic)) {
      return batch_finding(Check::drafted, Stage::shape).ints(drafted);
    }
    if (batch.drafted != Drafted::deterministic && !batch.draft_probs) {
      return batch_finding(Check::q_needed, Stage::shape);
    }
    return check_strides(batch);
  }

  /// Target and draft rows alike: N + B of each.
  SPECVERIFY_HD static Finding rows(const Batch& batch, std::int32_t nodes) {
    const std::int64_t rows = std::int64_t{nodes} + batch.batch_size;
    const std::int32_t V = batch.vocab_size;
    if (Finding f = check_stride_rows("target_stride", batch.target_stride, rows, V)) return f;
    if (Finding f = check_stride_rows("draft_stride", batch.draft_stride, rows, V)) return f;
    if (nodes == 0) return {};
    if (Finding f = check_pointer(batch.parents, "parents", Stage::rows)) return f;
    return check_pointer(batch.draft_tokens, "draft_tokens", Stage::rows);
  }

  /// Node i: its parent comes before it within its sequence, then its own inputs.
  SPECVERIFY_HD_TEMPLATE
  template <class Rule>
  SPECVERIFY_HD static Finding item(const Rule& rule, const Batch& batch, const Randomness& r,
                                    std::int32_t b, std::int32_t i) {
    const std::int32_t g = batch.node_offsets[b] + i, parent = batch.parents[g];
    if (parent < -1 || parent >= i) {
      return sequence_finding(Check::parent, Stage::sequence, b).at(kItem, i).ints(parent, i);
    }
    return check_draft(rule, r, batch.vocab_size, batch.draft_tokens[g], g, b, kItem, i);
  }

  /// Every path and the one token after it fit the output row: the first node (in index order)
  /// whose path is row_width long is named. `items` finds it (serially on the host, by the block on
  /// the device): first_deeper(n, parents, depth) is the first node at depth >= `depth`, or -1.
  template <class Items>
  SPECVERIFY_HD static Finding tail(const Batch& batch, std::int32_t row_width, std::int32_t b, Items& items) {
    Finding f = sequence_finding(Check::row_width, Stage::sequence, b).named("the deepest path");
    if (row_width < 1) return f.ints(row_width, 1);  // not even the root's token fits
    const std::int32_t first = batch.node_offsets[b];
    const std::int32_t i = items.first_deeper(batch.node_offsets[b + 1] - first, batch.parents + first, row_width);
    return i < 0 ? Finding{} : f.at(kItem, i).ints(row_width, std::int64_t{row_width} + 1);
  }
};

/// Everything checked on the host from the batch's fields alone, before any array is read.
template <class Rule, class Batch, class Output>
Finding check_shape(const Rule& rule, const Batch& batch, const Output& out) {
  using K = BatchChecks<Batch>;
  if (batch.batch_size < 0) return batch_finding(Check::batch_size, Stage::shape).ints(batch.batch_size);
  if (batch.vocab_size < 1) return batch_finding(Check::vocab_size, Stage::shape).ints(batch.vocab_size);
  if (const Problem problem = rule_traits<Rule>::check(rule)) return rule_finding(problem);
  if (batch.batch_size == 0) return {};
  if (Finding f = check_pointer(K::offsets(batch), K::offsets_name())) return f;
  if (Finding f = check_pointer(out.tokens, "output tokens")) return f;
  if (Finding f = check_pointer(out.num_accepted, "output num_accepted")) return f;
  if (Finding f = K::shape(batch)) return f;
  // Traversal's guarantee averages over children drafted i.i.d. from q (docs/api.md "Traversal").
  if (rule_traits<Rule>::joint == Joint::traversal && K::drafted(batch) != static_cast<int>(Drafted::sampled)) {
    return batch_finding(Check::iid_drafts_needed, Stage::shape).ints(K::drafted(batch));
  }
  return {};
}

/// Everything checked of sequence b before it is walked, stages start to sequence; the batch's own
/// facts are reported by sequence 0 alone. `walkable` says whether b may be walked: it has no
/// finding, and no other sequence's finding makes its arrays unsafe to read. Every thread of a
/// device block calls it alike (`items` works across the block). `items` runs the per-item
/// checks: first(n, bad) is the first i in [0, n) with bad(i), or -1.
SPECVERIFY_HD_TEMPLATE
template <class Rule, class Batch, class Items>
SPECVERIFY_HD Finding check_sequence(const Rule& rule, const Batch& batch, const Randomness& r,
                                     std::int32_t row_width, std::int32_t b, Items& items, bool& walkable) {
  using K = BatchChecks<Batch>;
  walkable = false;
  const std::int32_t* offsets = K::offsets(batch);
  if (offsets[0] != 0) {
    if (b != 0) return {};
    return batch_finding(Check::offsets_start, Stage::start).named(K::offsets_name()).ints(offsets[0]);
  }
  const std::int32_t B = batch.batch_size, first = offsets[b], next = offsets[b + 1], total = offsets[B];
  if (next < first) {
    return sequence_finding(Check::offsets_decrease, Stage::offsets, b).named(K::offsets_name()).ints(first, next);
  }
  // Offsets outside [0, offsets[B]] mean that another sequence's offsets decrease; it reports that.
  if (first < 0 || next > total) return {};
  Finding rows = check_row_count(K::offsets_name(), total, B);
  if (!rows) rows = K::rows(batch, total);
  if (rows) return b == 0 ? rows : Finding{};
  if (Finding f = check_sample_uniform(r, b)) return f;
  if (Finding f = K::head(batch, r, b)) return f;
  const std::int32_t bad = items.first(next - first, [&](std::int32_t i) {
    return static_cast<bool>(K::item(rule, batch, r, b, i));
  });
  if (bad >= 0) return K::item(rule, batch, r, b, bad);
  if (Finding f = K::tail(batch, row_width, b, items)) return f;
  walkable = true;
  return {};
}

// ---- What the walk found ----

/// A row pass knows only that its rows hold a bad value: finds the first to name it, in the
/// target row and then in the draft row (then target_row = -1 names the draft row). `scan(row,
/// value)` is the backend's: the first column whose value is not a valid probability, or -1.
SPECVERIFY_HD_TEMPLATE
template <class Source, class Scan>
SPECVERIFY_HD void name_bad_value(Fault& f, std::int32_t b, const Source& source, Scan&& scan) {
  if (f.kind != FaultKind::bad_value || f.column >= 0) return;
  if (f.target_row >= 0) f.column = scan(source.target_row(b, f.target_row), f.value);
  if (f.column < 0 && f.draft_row >= 0) {
    f.column = scan(source.draft_row(b, f.draft_row), f.value);
    f.target_row = -1;
  }
}

/// The walk's fault in sequence b as a finding; `item` is the layout's place (a chain's position,
/// a tree's node; the root where no node is involved).
SPECVERIFY_HD inline Finding from_fault(const Fault& f, std::int32_t b, Place item) {
  Finding r = sequence_finding(Check::row_value, Stage::walk, b);
  if (item == Place::position) {
    r.at(Place::position, f.position);
  } else {
    r.at(f.node >= 0 ? Place::node : Place::root, f.node);
  }
  const bool target = f.target_row >= 0;
  r.named(target ? "target row" : "draft row").ints(target ? f.target_row : f.draft_row, f.column).of(f.value);
  switch (f.kind) {
    case FaultKind::bad_row_max: r.check = Check::row_max; break;
    case FaultKind::target_no_mass: r.check = Check::no_mass; break;
    case FaultKind::draft_no_mass: r.check = Check::no_mass; break;
    case FaultKind::too_many_children: r.check = Check::too_many_children; r.ints(f.column); break;
    case FaultKind::too_deep: r.check = Check::too_deep; r.ints(f.column); break;
    default: break;
  }
  return r;
}

}  // namespace specverify::core
