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
  const Logit* unconditional{};
  std::int64_t unconditional_stride = 0;
  const std::int64_t* unconditional_first_row{};
  const float* guidance_scale{};
  const std::uint32_t* allowed{};
  std::int64_t allowed_words = 0;         // ceil(V / 32)

  /// `target_to_draft`: the inverse map the caller built (build_target_to_draft) when the batch
  /// has a reduced draft vocabulary, else nullptr.
  template <class Batch, class Offsets>
  SPECVERIFY_HD static LogitSource of(const Batch& batch, const Offsets* offsets,
                                      const std::int32_t* target_to_draft) {
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
            batch.unconditional_logits,
            batch.unconditional_stride ? batch.unconditional_stride : v,
            batch.unconditional_first_row,
            batch.guidance_scale,
            batch.allowed_tokens,
            (v + 31) / 32};
  }

  SPECVERIFY_HD bool has_draft() const { return draft != nullptr; }

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
    return r;
  }

  SPECVERIFY_HD Row draft_row(std::int32_t b, std::int64_t row) const {
    Row r;
    r.logits = draft + row * draft_stride;
    r.n = draft_vocab_size;
    r.target_to_draft = target_to_draft;
    r.params = draft_params ? draft_params[b] : target_params[b];
    return r;
  }

  /// Logits carry no precomputed row maximum of p.
  SPECVERIFY_HD const float* known_max(std::int64_t) const { return nullptr; }
};

}  // namespace specverify::core
