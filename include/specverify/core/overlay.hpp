// Building a row's overlay on the host (core/penalties.hpp): one merge of the sequence's history,
// its bias list (in token order) and the few drafts on the path to the row, O(entries) per row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specverify/core/logit_rows.hpp"
#include "specverify/core/penalties.hpp"

namespace specverify::core {

/// Room for one row's overlay, reused row after row (grown to the longest list, then no allocation).
class OverlayRoom {
 public:
  /// Builds row's overlay from row.lists and points the row at it (valid until the next build).
  /// Rows whose parameters change nothing and that have no bias get none.
  template <class Logit>
  void build(LogitRow<Logit>& row) {
    row.overlay = nullptr;
    row.overlay_size = 0;
    row.overlay_cursor = 0;
    const PenaltyLists& lists = row.lists;
    const bool penalise = !penalties_off(row.params);
    const std::int32_t biased = lists.bias_tokens ? lists.bias_size : 0;
    if (!penalise && biased == 0) return;
    path_.clear();
    if (penalise) {
      if (lists.parents) {
        for (std::int32_t node = lists.path_end - 1; node >= 0; node = lists.parents[node]) path_.push_back(lists.drafts[node]);
      } else {
        path_.assign(lists.drafts, lists.drafts + lists.path_end);
      }
      std::sort(path_.begin(), path_.end());
    }
    const std::int32_t history = penalise ? lists.history_size : 0;
    const std::int32_t path = static_cast<std::int32_t>(path_.size());
    entries_.resize(static_cast<std::size_t>(history + path + biased));
    std::int32_t h = 0, p = 0, o = 0, n = 0;
    constexpr std::int32_t kEnd = INT32_MAX;
    while (h < history || p < path || o < biased) {
      const std::int32_t th = h < history ? lists.history_tokens[h] : kEnd;
      const std::int32_t tp = p < path ? path_[p] : kEnd;
      const std::int32_t to = o < biased ? lists.bias_tokens[lists.bias_order[o]] : kEnd;
      const std::int32_t v = std::min({th, tp, to});
      std::int64_t count = 0;
      bool in = false;
      float bias = 0.0f;
      if (th == v) {
        count += lists.history_counts[h++];
        in = true;
      }
      for (; p < path && path_[p] == v; ++p) {
        ++count;
        in = true;
      }
      if (to == v) bias = lists.bias_values[lists.bias_order[o++]];
      const std::int32_t i = row.target_to_draft ? row.target_to_draft[v] : v;
      if (i < 0) continue;  // outside a reduced draft vocabulary: q(v) = 0 whatever its logit
      entries_[n++] = {i, bias, static_cast<float>(count), in ? 1 : 0};
    }
    if (row.target_to_draft) {
      std::sort(entries_.begin(), entries_.begin() + n,
                [](const OverlayEntry& a, const OverlayEntry& b) { return a.index < b.index; });
    }
    row.overlay = entries_.data();
    row.overlay_size = n;
  }

 private:
  std::vector<OverlayEntry> entries_;
  std::vector<std::int32_t> path_;
};

}  // namespace specverify::core
