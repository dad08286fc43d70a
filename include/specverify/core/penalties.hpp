// Penalties and logit bias (docs/api.md "Penalties and logit bias") as a sparse
// overlay on a row: the few tokens in the sequence's history, on the path to the row, or biased
// get their adjusted logit once per row (steps 2 and 3, in float), and every pass that reads the
// row substitutes those values; no [rows][V] count or mask buffer exists anywhere.
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/core/fused.hpp"
#include "specverify/sampling.hpp"

namespace specverify::core {

/// The first position k in sorted[0 .. n) with sorted[k] >= v (n: none), by binary search: the
/// overlay's entries and a sequence's history are both ascending.
SPECVERIFY_HD inline std::int32_t lower_index(const std::int32_t* sorted, std::int32_t n, std::int32_t v) {
  std::int32_t lo = 0, hi = n;
  while (lo < hi) {
    const std::int32_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] < v) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/// A row's overlay: its entries in increasing row index, one array per field so that a vector
/// pass reads W entries at once. An entry's adjusted logit is computed where a pass reads the
/// token (from the value step 1 gives it): building the overlay reads no element of the row, whose
/// scattered reads would each miss the cache.
struct Overlay {
  const std::int32_t* index{};  // the row indices, ascending
  const float* bias{};          // 0 for draft rows
  const float* count{};         // c(v): history count plus the drafts on the path
  const float* in{};            // 1 where v is in the history or on the path (the penalties apply), else 0
  const std::uint32_t* bits{};  // bit i % 32 of word i / 32: row index i has an entry ([ceil(n / 32)])
  float* value{};               // g after steps 1-4 at each entry, where a backend's pre-pass keeps them
  std::int32_t size = 0;

  /// The position of row index i's entry, or -1.
  SPECVERIFY_HD std::int32_t find(std::int32_t i) const {
    const std::int32_t k = lower_index(index, size, i);
    return k < size && index[k] == i ? k : -1;
  }
};

/// Where a row's counts and bias come from: the sequence's lists and the drafts on the path to the
/// row. Bias lists are read in token order through `bias_order` (a permutation of the sequence's
/// entries that validation sorted), so the overlay is a merge of sorted lists.
struct PenaltyLists {
  const std::int32_t* history_tokens{};  // the sequence's, ascending
  const std::int32_t* history_counts{};
  std::int32_t history_size = 0;
  const std::int32_t* bias_tokens{};     // the sequence's; nullptr for draft rows (bias is p's alone)
  const float* bias_values{};
  const std::int32_t* bias_order{};      // sequence-local entry indices in increasing token order
  std::int32_t bias_size = 0;
  const std::int32_t* drafts{};          // the sequence's draft tokens
  const std::int32_t* parents{};         // a tree's sequence-local parents; nullptr: a chain
  std::int32_t path_end = 0;             // the row's index j: a chain's drafts 0 .. j-1, a tree's
                                         //   node j-1 and its ancestors (0: the root, no drafts)
  bool penalise = false;                 // the row's parameters penalise (step 3 applies): set once per row
};

/// Steps 2 and 3 for one token, in float: l + bias, then for a token in the history or on the path
/// l / r where positive else l * r, then minus f c + presence [c > 0] (one fused multiply-add).
SPECVERIFY_HD inline float penalised(float g, float bias, bool in, float count, const SamplingParams& params) {
  float x = g + bias;
  if (!in) return x;
  const float r = params.repetition_penalty;
  x = x > 0.0f ? x / r : x * r;
  const float presence = count > 0.0f ? params.presence_penalty : 0.0f;
  return x - fused(params.frequency_penalty, count, presence);
}

/// What steps 2-3 do to token v, read from the lists themselves (no overlay built): a device
/// block's way, element by element (binary search of the history, the path walked, the bias list
/// searched). The same bias, in and count as the overlay's entry for v; false where v has none.
SPECVERIFY_HD inline bool listed(const PenaltyLists& lists, std::int32_t v, float& bias, bool& in, float& count) {
  std::int64_t c = 0;
  in = false;
  if (lists.penalise) {
    const std::int32_t k = lower_index(lists.history_tokens, lists.history_size, v);
    if (k < lists.history_size && lists.history_tokens[k] == v) {
      c = lists.history_counts[k];
      in = true;
    }
    std::int32_t drafted = 0;
    if (lists.parents) {
      for (std::int32_t node = lists.path_end - 1; node >= 0; node = lists.parents[node]) drafted += lists.drafts[node] == v;
    } else {
      for (std::int32_t j = 0; j < lists.path_end; ++j) drafted += lists.drafts[j] == v;
    }
    c += drafted;
    in = in || drafted > 0;
  }
  bool biased = false;
  bias = 0.0f;
  for (std::int32_t k = 0; lists.bias_tokens && k < lists.bias_size && !biased; ++k) {
    if (lists.bias_tokens[k] == v) {
      bias = lists.bias_values[k];
      biased = true;
    }
  }
  count = static_cast<float>(c);
  return in || biased;
}

/// Steps 2-3 of the overlay's entry k on the value g that step 1 gave.
SPECVERIFY_HD inline float penalised(float g, const Overlay& overlay, std::int32_t k, const SamplingParams& params) {
  return penalised(g, overlay.bias[k], overlay.in[k] != 0.0f, overlay.count[k], params);
}

}  // namespace specverify::core
