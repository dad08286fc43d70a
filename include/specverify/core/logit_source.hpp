// The logits row source: a row of a LogitsChainBatch or LogitsTreeBatch with its sequence's
// sampling parameters (and guidance row, bitmask, reduced draft vocabulary), as a LogitRow the
// backend's pre-pass turns into a view (core/logit_rows.hpp). Layout-independent: chains and
// trees number their rows alike (sequence b's rows start at offsets[b] + b).
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/core/logit_rows.hpp"
#include "specverify/sampling.hpp"

namespace specverify::core {

template <class Logit>
struct LogitSource {
  using Row = LogitRow<Logit>;

  const std::int32_t* offsets{};  // draft_offsets or node_offsets
  std::int32_t vocab_size = 0;
  const Logit* target{};
  const Logit* draft{};
  std::int64_t target_stride = 0, draft_stride = 0;
  const SamplingParams* target_params{};
  const SamplingParams* draft_params{};   // nullptr: the target's
  std::int32_t draft_vocab_size = 0;      // the draft rows' length
  const std::int32_t* target_to_draft{};  // [V] inverse of draft_to_target, or nullptr
  const std::int32_t* draft_to_target{};  // [draft_vocab_size] with a reduced draft vocabulary, or nullptr
  const Logit* unconditional{};
  std::int64_t unconditional_stride = 0;
  const std::int64_t* unconditional_first_row{};
  const float* guidance_scale{};
  const std::uint32_t* allowed{};
  std::int64_t allowed_words = 0;         // ceil(V / 32)
  const std::int32_t* draft_tokens{};
  const std::int32_t* parents{};          // trees; nullptr: chains
  const std::int32_t* history_offsets{};
  const std::int32_t* history_tokens{};
  const std::int32_t* history_counts{};
  const std::int32_t* bias_offsets{};
  const std::int32_t* bias_tokens{};
  const float* bias_values{};
  const std::int32_t* bias_order{};       // per sequence, its bias entries in token order (validation sorts them)

  /// `target_to_draft`: the inverse map the caller built (build_target_to_draft) when the batch
  /// has a reduced draft vocabulary, else nullptr.
  /// `bias_order`: the sorted bias entries validation built, where the batch has a bias list.
  template <class Batch, class Offsets>
  SPECVERIFY_HD static LogitSource of(const Batch& batch, const Offsets* offsets,
                                      const std::int32_t* target_to_draft, const std::int32_t* bias_order = nullptr) {
    const std::int64_t v = batch.vocab_size;
    const std::int32_t dv = batch.draft_vocab_size > 0 ? batch.draft_vocab_size : batch.vocab_size;
    return {offsets,
            batch.vocab_size,
            batch.target_logits,
            batch.draft_logits,
            batch.target_stride ? batch.target_stride : v,
            batch.draft_stride ? batch.draft_stride : dv,
            batch.target_params,
            batch.draft_params,
            dv,
            target_to_draft,
            target_to_draft ? batch.draft_to_target : nullptr,
            batch.unconditional_logits,
            batch.unconditional_stride ? batch.unconditional_stride : v,
            batch.unconditional_first_row,
            batch.guidance_scale,
            batch.allowed_tokens,
            (v + 31) / 32,
            batch.draft_tokens,
            parents_of(batch, 0),
            batch.history_offsets,
            batch.history_tokens,
            batch.history_counts,
            batch.bias_offsets,
            batch.bias_tokens,
            batch.bias_values,
            bias_order};
  }

  /// A tree batch's parents; nullptr for chains.
  template <class Batch>
  SPECVERIFY_HD static auto parents_of(const Batch& batch, int) -> decltype(batch.parents) { return batch.parents; }
  template <class Batch>
  SPECVERIFY_HD static const std::int32_t* parents_of(const Batch&, long) { return nullptr; }

  /// The lists of sequence b's row (p's with the bias, q's without): row j of either kind follows
  /// drafts 0 .. j-1 of a chain, or node j-1 and its ancestors in a tree.
  SPECVERIFY_HD PenaltyLists lists(std::int32_t b, std::int64_t row, bool target) const {
    PenaltyLists l;
    l.penalise = !penalties_off(target ? target_params[b] : draft_params_of(b));
    // A chain's draft rows are one per draft (no bonus row); a tree's are laid out as its target rows.
    const std::int64_t first = std::int64_t{offsets[b]} + (target || parents ? b : 0);
    l.path_end = static_cast<std::int32_t>(row - first);
    l.drafts = draft_tokens + offsets[b];
    if (parents) l.parents = parents + offsets[b];
    if (history_offsets) {
      const std::int32_t h = history_offsets[b];
      l.history_tokens = history_tokens + h;
      l.history_counts = history_counts + h;
      l.history_size = history_offsets[b + 1] - h;
    }
    if (target && bias_offsets && bias_offsets[b + 1] > bias_offsets[b]) {
      const std::int32_t o = bias_offsets[b];
      l.bias_tokens = bias_tokens + o;
      l.bias_values = bias_values + o;
      l.bias_order = bias_order ? bias_order + o : nullptr;
      l.bias_size = bias_offsets[b + 1] - o;
    }
    return l;
  }

  SPECVERIFY_HD bool has_draft() const { return draft != nullptr; }

  /// What sequence b's drafter sampled with (the target's parameters unless given).
  SPECVERIFY_HD const SamplingParams& draft_params_of(std::int32_t b) const {
    return draft_params ? draft_params[b] : target_params[b];
  }

  SPECVERIFY_HD Row target_row(std::int32_t b, std::int64_t row) const {
    Row r;
    r.logits = target + row * target_stride;
    r.n = vocab_size;
    r.params = target_params[b];
    if (unconditional && unconditional_first_row[b] >= 0) {
      const std::int64_t j = row - (std::int64_t{offsets[b]} + b);  // the sequence's row index
      r.unconditional = unconditional + (unconditional_first_row[b] + j) * unconditional_stride;
      r.guidance_scale = guidance_scale[b];
    }
    if (allowed) r.allowed = allowed + row * allowed_words;
    r.lists = lists(b, row, true);
    return r;
  }

  SPECVERIFY_HD Row draft_row(std::int32_t b, std::int64_t row) const {
    Row r;
    r.logits = draft + row * draft_stride;
    r.n = draft_vocab_size;
    r.target_to_draft = target_to_draft;
    r.row_to_target = draft_to_target;
    r.params = draft_params_of(b);
    r.lists = lists(b, row, false);
    return r;
  }

  /// Logits carry no precomputed row maximum of p.
  SPECVERIFY_HD const float* known_max(std::int64_t) const { return nullptr; }
};

}  // namespace specverify::core
