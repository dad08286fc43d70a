// The 32-node tree the tree benchmarks verify (bench_trees, bench_traversal).
#pragma once

#include <cstdint>
#include <vector>

namespace specverify::bench {

/// Four children at the root and level sizes 4, 10, 8, 6, 4 (32 nodes, depth 5), each level's
/// nodes spread over the first nodes of the level above, at most four per parent.
inline std::vector<std::int32_t> tree_parents() {
  std::vector<std::int32_t> parents, above{-1};
  for (std::int32_t size : {4, 10, 8, 6, 4}) {
    std::vector<std::int32_t> level;
    for (std::int32_t i = 0; i < size; ++i) {
      parents.push_back(above[std::size_t(i / 4) % above.size()]);
      level.push_back(std::int32_t(parents.size()) - 1);
    }
    above = level;
  }
  return parents;
}

}  // namespace specverify::bench
