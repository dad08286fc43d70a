// The CPU backend's row operations for the core's walk: probability rows (float, xsimd), and
// logits rows opened by their pre-pass (cpu/logit_kernels.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "specverify/core/overlay.hpp"
#include "specverify/core/residual.hpp"
#include "specverify/cpu/divergence_kernels.hpp"
#include "specverify/cpu/logit_kernels.hpp"
#include "specverify/cpu/logit_residual.hpp"
#include "specverify/cpu/residual_kernels.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/cpu/split_statistics.hpp"
#include "specverify/rule.hpp"

namespace specverify::cpu {

/// Per thread: room for the siblings a tree node's residual absorbs (core::Siblings), grown to the
/// largest sequence that needs it and reused from node to node. Over rows of `vocab` tokens it
/// also finds siblings by token (core::Siblings::marks, zeros, first), so that no weight scans
/// them: a residual that marks its siblings clears their marks (vocab / 4 bytes, next to a
/// node's passes over the row); `first`, read only at marked tokens, is never even zeroed. It
/// holds a one-hot residual's row summary too (core::OneHotSums), which each node takes anew.
class SiblingRoom {
 public:
  core::Siblings siblings(std::int32_t count, std::int32_t vocab = 0) {
    if (static_cast<std::size_t>(count) > inv_mass_.size()) {
      const auto n = static_cast<std::size_t>(count);
      token_.resize(n);
      live_.resize(n);
      scale_.resize(n);
      inv_mass_.resize(n);
      left_.resize(n);
    }
    core::Siblings s{static_cast<std::int32_t>(inv_mass_.size()), token_.data(), scale_.data(), inv_mass_.data(),
                     left_.data(), live_.data()};
    if (vocab > 0) {
      if (vocab > vocab_) {
        vocab_ = vocab;
        marks_.reset(new std::uint64_t[2 * words(vocab)]);
        first_.reset(new std::int32_t[static_cast<std::size_t>(vocab) + 1]);
      }
      s.words = static_cast<std::int32_t>(words(vocab));
      s.marks = marks_.get();
      s.zeros = marks_.get() + words(vocab);
      s.first = first_.get();
      if (!summary_) summary_.reset(new core::OneHotSums);
      summary_->ready = false;
      s.summary = summary_.get();
    }
    return s;
  }

 private:
  static std::size_t words(std::int32_t vocab) { return static_cast<std::size_t>(vocab) / 64 + 2; }

  std::vector<std::int32_t> token_, live_;
  std::vector<double> scale_, inv_mass_, left_;
  std::int32_t vocab_ = 0;  // what marks_ and first_ hold room for
  std::unique_ptr<std::uint64_t[]> marks_;  // marks, then zeros
  std::unique_ptr<std::int32_t[]> first_;
  std::unique_ptr<core::OneHotSums> summary_;
};

/// Row operations over rows of `n` floats, as core::walk expects them. A probability row needs no
/// pre-pass: open() hands the pointer back.
template <class Arch = DefaultArch>
struct Rows {
  using View = const float*;
  std::int32_t n;
  SiblingRoom room{};
  RowSplit split{};  // how draws and statistics split (unsplit by default)

  View open(View row) const { return row; }
  float value(View row, std::int32_t v) const { return row[v]; }
  Checked<float> max(View p) const { return split.active() ? split_row_max<Arch>(split, p, n) : row_max<Arch>(p, n); }
  Checked<std::int32_t> argmax(View p) const {
    return split.active() ? split_row_argmax<Arch>(split, p, n) : row_argmax<Arch>(p, n);
  }
  Checked<float> entropy(View p) const {
    return split.active() ? split_row_entropy<Arch>(split, p, n) : row_entropy<Arch>(p, n);
  }
  Checked<float> divergence(Divergence d, View p, const View* q, std::int32_t x) const {
    return split.active() ? split_row_divergence<Arch>(split, d, p, q ? *q : nullptr, x, n)
                          : row_divergence<Arch>(d, p, q ? *q : nullptr, x, n);
  }
  Checked<std::int32_t> draw_residual(View p, const View* q, std::int32_t x, float u) const {
    return draw_weights(Weights::residual(p, q ? *q : nullptr, x, n), u);
  }
  Checked<std::int32_t> draw_target(View p, float u) const { return draw_weights(Weights::target(p, n), u); }
  Checked<std::int32_t> gumbel_argmax(View p, std::uint64_t seed, std::int64_t position) const {
    return cpu::gumbel_argmax<Arch>(p, n, seed, position);
  }

  core::Siblings siblings(std::int32_t count) { return room.siblings(count, n); }

  // A node's residual (cpu/residual_kernels.hpp): a tree's after rejected siblings, or block
  // verification's scaled one; one vector pass, the scalar definition's weights.
  Checked<double> mass(const core::Residual<View>& r, std::int32_t x) const {
    return residual_mass<Arch>(r, x, n, split);
  }
  Checked<std::int32_t> draw(const core::Residual<View>& r, std::int32_t x, float u) const {
    return residual_draw<Arch>(r, x, u, n, split);
  }

 private:
  Checked<std::int32_t> draw_weights(const Weights& w, float u) const {
    if (split.active()) return cpu::draw<Arch>(split, [&] { return WeightsPass<Arch>{w}; }, w.n, u);
    return cpu::draw<Arch>(w, u);
  }
};

/// Row operations over logits rows: the overlay (penalties, bias) and pre-pass on open() into two
/// rows of scratch, taken in turn and reused for every row the thread opens; the rest is LogitRows. A view reads the weights
/// its pre-pass kept in its scratch row, so it is valid until the second open() after it: the walk
/// reads a node's p and q, the last two rows it opened.
template <class Arch = DefaultArch, class Logit = float>
struct OpenedLogitRows : LogitRows<Arch, Logit> {
  using View = LogitView<Logit>;
  std::unique_ptr<float[]> scratch;  // [2][longest_row], not zeroed: the pre-pass writes before it reads
  std::size_t row_length;
  bool second = false;  // the scratch row the next open() takes
  core::OverlayRoom overlays[2];  // each scratch row's penalties and bias
  SiblingRoom room;

  OpenedLogitRows(std::int32_t vocab_size, std::int32_t longest_row)
      : LogitRows<Arch, Logit>{vocab_size},
        scratch(new float[2 * static_cast<std::size_t>(longest_row)]),
        row_length(static_cast<std::size_t>(longest_row)) {}

  View open(const core::LogitRow<Logit>& row) {
    float* const mine = scratch.get() + (second ? row_length : 0);
    core::LogitRow<Logit> overlaid = row;
    overlays[second].build(overlaid);  // lives as long as the scratch row it goes with
    second = !second;
    return prepare<Arch>(overlaid, mine, this->split);
  }
  core::Siblings siblings(std::int32_t count) { return room.siblings(count, this->n); }
  // A node's residual (cpu/logit_residual.hpp): the vector passes over the views.
  Checked<double> mass(const core::Residual<View>& r, std::int32_t x) const {
    return residual_mass<Arch>(r, x, this->n, this->split);
  }
  Checked<std::int32_t> draw(const core::Residual<View>& r, std::int32_t x, float u) const {
    return residual_draw<Arch>(r, x, u, this->n, this->split);
  }
};

}  // namespace specverify::cpu
