// Building a row's overlay on the host (core/penalties.hpp): one merge of the sequence's history
// with its bias list (in token order) and the few drafts on the path to the row, O(entries) per row.
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
    build(row, 0, false);
  }

  /// The overlay of a window of a longer row (a rank's slice of a sharded row): row index i is
  /// token first + i, for i < row.n; the lists' tokens outside the window get no entry.
  template <class Logit>
  void build_window(LogitRow<Logit>& row, std::int32_t first) {
    build(row, first, true);
  }

 private:
  template <class Logit>
  void build(LogitRow<Logit>& row, std::int32_t first, bool window) {
    std::fill(bits_.begin(), bits_.begin() + static_cast<std::ptrdiff_t>(words_), 0u);  // the last row's: one fill
    size_ = 0;
    words_ = 0;
    row.overlay = Overlay{};
    row.overlay_cursor = 0;
    const PenaltyLists& lists = row.lists;
    const std::int32_t biased = lists.bias_tokens ? lists.bias_size : 0;
    if (!lists.penalise && biased == 0) return;
    gather_extras(lists, biased);
    const std::int32_t history = lists.penalise ? lists.history_size : 0;
    reserve(static_cast<std::size_t>(history) + extras_.size());
    // The history (long) merged with the extras (short): runs of history entries are copied
    // between the extras, so a row costs little more than a copy of its history.
    const std::int32_t* mapped = row.target_to_draft;
    const std::int32_t* tokens = lists.history_tokens;
    const std::int32_t* counts = lists.history_counts;
    std::int32_t h = 0, n = 0;
    const auto run = [&](std::int32_t end) {  // history entries h .. end - 1, tokens the extras lack
      if (mapped) {
        for (; h < end; ++h) n = add(n, mapped, tokens[h], 0.0f, static_cast<float>(counts[h]), true);
        return;
      }
      const std::int32_t len = end - h;
      std::int32_t* const index = index_.data() + n;
      float* const bias = bias_.data() + n;
      float* const count = count_.data() + n;
      float* const in = in_.data() + n;
      const std::int32_t* const from = tokens + h;
      const std::int32_t* const times = counts + h;
      for (std::int32_t k = 0; k < len; ++k) {  // a copy the compiler vectorises
        index[k] = from[k];
        bias[k] = 0.0f;
        count[k] = static_cast<float>(times[k]);
        in[k] = 1.0f;
      }
      n += len;
      h = end;
    };
    for (const Extra& x : extras_) {
      std::int32_t end = h;  // a linear merge: the extras are few and spread, a search would mispredict
      while (end < history && tokens[end] < x.token) ++end;
      run(end);
      std::int64_t count = x.drafts;
      const bool in_history = h < history && tokens[h] == x.token;
      if (in_history) count += counts[h++];
      n = add(n, mapped, x.token, x.bias, static_cast<float>(count), in_history || x.drafts > 0);
    }
    run(history);
    size_ = window ? keep_window(n, first, row.n) : n;
    n = size_;
    if (mapped) sort_by_index();
    words_ = static_cast<std::size_t>(row.n / 32 + 1);
    if (bits_.size() < words_) bits_.resize(words_, 0u);
    std::uint32_t* bits = bits_.data();
    for (std::int32_t k = 0; k < n; ++k) bits[index_[k] >> 5] |= 1u << (index_[k] & 31);
    row.overlay = Overlay{index_.data(), bias_.data(), count_.data(), in_.data(), bits_.data(), value_.data(), size_};
  }

  /// A token on the path to the row or biased: how many drafts on the path it is, and its bias.
  struct Extra {
    std::int32_t token;
    std::int32_t drafts;
    float bias;
  };

  /// The row's extras in increasing token order (the path's drafts, the bias list).
  void gather_extras(const PenaltyLists& lists, std::int32_t biased) {
    path_.clear();
    if (lists.penalise) {
      if (lists.parents) {
        for (std::int32_t node = lists.path_end - 1; node >= 0; node = lists.parents[node]) path_.push_back(lists.drafts[node]);
      } else {
        path_.assign(lists.drafts, lists.drafts + lists.path_end);
      }
      std::sort(path_.begin(), path_.end());
    }
    extras_.clear();
    const auto path = static_cast<std::int32_t>(path_.size());
    std::int32_t p = 0, o = 0;
    while (p < path || o < biased) {
      const std::int32_t tp = p < path ? path_[p] : INT32_MAX;
      const std::int32_t to = o < biased ? lists.bias_tokens[lists.bias_order[o]] : INT32_MAX;
      Extra x{std::min(tp, to), 0, 0.0f};
      for (; p < path && path_[p] == x.token; ++p) ++x.drafts;
      if (to == x.token) x.bias = lists.bias_values[lists.bias_order[o++]];
      extras_.push_back(x);
    }
  }

  void reserve(std::size_t entries) {
    if (index_.size() >= entries) return;
    index_.resize(entries);
    bias_.resize(entries);
    count_.resize(entries);
    in_.resize(entries);
    value_.resize(entries);
  }

  /// Writes token v's entry at its row index as entry n (none outside a reduced draft vocabulary:
  /// q(v) = 0 whatever its logit); returns the entry count after it.
  std::int32_t add(std::int32_t n, const std::int32_t* mapped, std::int32_t v, float bias, float count, bool in) {
    const std::int32_t i = mapped ? mapped[v] : v;
    if (i < 0) return n;
    index_[n] = i;
    bias_[n] = bias;
    count_[n] = count;
    in_[n] = in ? 1.0f : 0.0f;
    return n + 1;
  }

  /// Keeps entries 0 .. n - 1 whose token lies in [first, first + length), at row index token -
  /// first (their order is kept); returns how many.
  std::int32_t keep_window(std::int32_t n, std::int32_t first, std::int32_t length) {
    std::int32_t kept = 0;
    for (std::int32_t k = 0; k < n; ++k) {
      const std::int32_t i = index_[k] - first;
      if (i < 0 || i >= length) continue;
      index_[kept] = i;
      bias_[kept] = bias_[k];
      count_[kept] = count_[k];
      in_[kept] = in_[k];
      ++kept;
    }
    return kept;
  }

  /// A reduced draft row's entries in increasing row index (the map does not keep token order).
  void sort_by_index() {
    order_.resize(static_cast<std::size_t>(size_));
    for (std::int32_t k = 0; k < size_; ++k) order_[k] = k;
    std::sort(order_.begin(), order_.end(), [&](std::int32_t a, std::int32_t b) { return index_[a] < index_[b]; });
    const auto permute = [&](auto& field) {
      auto sorted = field;
      for (std::int32_t k = 0; k < size_; ++k) sorted[k] = field[order_[k]];
      field.swap(sorted);
    };
    permute(index_);
    permute(bias_);
    permute(count_);
    permute(in_);
  }

  std::vector<std::int32_t> path_, order_;
  std::vector<Extra> extras_;
  std::vector<std::int32_t> index_;
  std::vector<float> bias_, count_, in_, value_;
  std::vector<std::uint32_t> bits_;  // zero but for the current row's entries
  std::size_t words_ = 0;            // the current row's words of bits_
  std::int32_t size_ = 0;
};

}  // namespace specverify::core
