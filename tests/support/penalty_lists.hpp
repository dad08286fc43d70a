// Ragged penalty and bias lists (docs/api.md "Penalties and logit bias") as the
// tests build them, sequence after sequence, and a logits batch pointed at them.
#pragma once

#include <cstdint>
#include <vector>

namespace specverify::testing {

struct PenaltyListArrays {
  std::vector<std::int32_t> h_offsets{0}, h_tokens, h_counts, b_offsets{0}, b_tokens;
  std::vector<float> b_values;

  /// Closes the current sequence's lists: the entries pushed since the last call are its own.
  void end_sequence() {
    h_offsets.push_back(static_cast<std::int32_t>(h_tokens.size()));
    b_offsets.push_back(static_cast<std::int32_t>(b_tokens.size()));
  }

  /// Points a LogitsChainBatch or LogitsTreeBatch (host memory) at the lists.
  template <class Batch>
  void attach(Batch& batch) const {
    batch.history_offsets = h_offsets.data();
    batch.history_tokens = h_tokens.data();
    batch.history_counts = h_counts.data();
    batch.bias_offsets = b_offsets.data();
    batch.bias_tokens = b_tokens.data();
    batch.bias_values = b_values.data();
  }
};

}  // namespace specverify::testing
