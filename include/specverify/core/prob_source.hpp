// The probability row source: rows of p and q as the engine gave them (weights, read as given).
// The walk asks a source for a row by its index; the backend opens it (for probabilities there is
// nothing to prepare) and reads values through what open() returns.
#pragma once

#include <cstdint>

#include "specverify/config.hpp"

namespace specverify::core {

template <class Prob>
struct ProbSource {
  using Row = const Prob*;

  const Prob* target{};
  const Prob* draft{};  // nullptr: no draft rows
  std::int64_t target_stride = 0;
  std::int64_t draft_stride = 0;
  const float* target_row_max{};  // optional max_v p(v) per target row (EARS)

  template <class Batch>
  SPECVERIFY_HD static ProbSource of(const Batch& batch) {
    const std::int64_t v = batch.vocab_size;
    ProbSource s{batch.target_probs, batch.draft_probs,
                 batch.target_stride ? batch.target_stride : v,
                 batch.draft_stride ? batch.draft_stride : v, nullptr};
    if constexpr (has_row_max<Batch>(0)) s.target_row_max = batch.target_row_max;
    return s;
  }

  SPECVERIFY_HD bool has_draft() const { return draft != nullptr; }
  SPECVERIFY_HD Row target_row(std::int32_t, std::int64_t row) const { return target + row * target_stride; }
  SPECVERIFY_HD Row draft_row(std::int32_t, std::int64_t row) const { return draft + row * draft_stride; }
  /// max_v p(v) of a target row when the engine supplied it, else nullptr.
  SPECVERIFY_HD const float* known_max(std::int64_t row) const {
    return target_row_max ? target_row_max + row : nullptr;
  }

 private:
  template <class Batch>
  SPECVERIFY_HD static constexpr auto has_row_max(int) -> decltype(Batch::target_row_max, bool()) { return true; }
  template <class Batch>
  SPECVERIFY_HD static constexpr bool has_row_max(...) { return false; }
};

}  // namespace specverify::core
