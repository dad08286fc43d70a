// Padded chains: a ChainBatch in which sequence b owns offsets[b + 1] - offsets[b] draft slots and
// their rows, of which the walk visits the first num_draft_tokens[b]. This is how engines hold a
// step ([B, K] drafts, [B, K+1, V] rows, a count per sequence); the ragged layout packs sequence
// b's rows right after sequence b - 1's, so it cannot address the unused slots' gaps. The counts
// live where the rows do and are checked with them (check_sequence), so a device backend reads
// them without a copy to the host. Rows of probabilities or of logits (PaddedLogitsChainBatch,
// whose checks are those of its probability shape, a PaddedChainBatch: validate_logits.hpp).
// Used by Python's specverify.padded on every backend.
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/core/chain_layout.hpp"
#include "specverify/core/checks.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

/// A ChainBatch whose sequences use only their first num_draft_tokens[b] slots. It converts to
/// ChainBatch, which would drop the counts: only calls that take a PaddedChainBatch by its own
/// type (cpu::detail::verify_probs, cuda::verify) honour them.
template <class Prob>
struct PaddedChainBatch : ChainBatch<Prob> {
  const std::int32_t* num_draft_tokens{};  // [B], each in [0, offsets[b + 1] - offsets[b]]
};

/// The same over rows of logits (cpu::detail::verify_logits, cuda::verify take it by its type).
template <class Logit>
struct PaddedLogitsChainBatch : LogitsChainBatch<Logit> {
  const std::int32_t* num_draft_tokens{};  // [B], each in [0, offsets[b + 1] - offsets[b]]
};

/// `batch` with its counts, as the padded batch of its kind: PaddedChainBatch of a ChainBatch,
/// PaddedLogitsChainBatch of a LogitsChainBatch (the row type deduced).
template <class Prob>
SPECVERIFY_HD PaddedChainBatch<Prob> padded(const ChainBatch<Prob>& batch, const std::int32_t* num_draft_tokens) {
  return {batch, num_draft_tokens};
}
template <class Logit>
SPECVERIFY_HD PaddedLogitsChainBatch<Logit> padded(const LogitsChainBatch<Logit>& batch,
                                                   const std::int32_t* num_draft_tokens) {
  return {batch, num_draft_tokens};
}

/// The chain layout cut to each sequence's count; rows and per-draft entries keep their slots.
struct PaddedChainLayout : ChainLayout {
  const std::int32_t* counts{};

  /// Of a padded batch of either kind.
  template <class Batch>
  SPECVERIFY_HD static PaddedChainLayout of(const Batch& batch) {
    PaddedChainLayout layout;
    layout.offsets = batch.draft_offsets;
    layout.tokens = batch.draft_tokens;
    layout.counts = batch.num_draft_tokens;
    return layout;
  }

  SPECVERIFY_HD std::int32_t count(std::int32_t b) const { return counts[b]; }
  SPECVERIFY_HD std::int32_t child(std::int32_t b, std::int32_t node, std::int32_t after) const {
    const std::int32_t next = node + 1;
    return next > after && next < count(b) ? next : -1;
  }
};

/// Sequence b's count outside its slots.
SPECVERIFY_HD inline Finding draft_count_finding(std::int32_t b, std::int32_t count, std::int32_t slots) {
  return sequence_finding(Check::draft_count, Stage::sequence, b).ints(count, slots);
}

/// A chain's checks, with the counts checked first and the drafts past them left unread.
template <class Prob>
struct BatchChecks<PaddedChainBatch<Prob>> : BatchChecks<ChainBatch<Prob>> {
  using Batch = PaddedChainBatch<Prob>;
  using Chains = BatchChecks<ChainBatch<Prob>>;
  using Layout = PaddedChainLayout;

  static Finding shape(const Batch& batch) {
    if (Finding f = check_pointer(batch.num_draft_tokens, "num_draft_tokens")) return f;
    return Chains::shape(batch);
  }

  SPECVERIFY_HD static Finding head(const Batch& batch, const Randomness&, std::int32_t b) {
    const std::int32_t count = batch.num_draft_tokens[b];
    const std::int32_t slots = batch.draft_offsets[b + 1] - batch.draft_offsets[b];
    return count < 0 || count > slots ? draft_count_finding(b, count, slots) : Finding{};
  }

  SPECVERIFY_HD_TEMPLATE
  template <class Rule>
  SPECVERIFY_HD static Finding item(const Rule& rule, const Batch& batch, const Randomness& r, std::int32_t b,
                                    std::int32_t i) {
    return i < batch.num_draft_tokens[b] ? Chains::item(rule, batch, r, b, i) : Finding{};
  }
};

}  // namespace specverify::core
