// The library's draw written plainly, for the references of the joint rules (Block, Traversal):
// the inverse CDF of weights in double, index order.
#pragma once

#include <cstdint>
#include <vector>

namespace specverify::testing {

/// The smallest v with w_0 + ... + w_v > u * sum(w); -1 without mass.
inline std::int32_t reference_draw(const std::vector<double>& w, float u) {
  double total = 0;
  for (double v : w) total += v;
  if (!(total > 0)) return -1;
  double before = 0;
  std::int32_t last = -1;
  for (std::size_t v = 0; v < w.size(); ++v) {
    if (w[v] > 0) {
      before += w[v];
      last = std::int32_t(v);
      if (before > double(u) * total) return last;
    }
  }
  return last;
}

}  // namespace specverify::testing
