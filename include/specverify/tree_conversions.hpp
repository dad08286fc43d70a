// Tree layouts engines use, converted into TreeBatch's parent links (host, per sequence).
//
// (a) First-child / next-sibling links, as SGLang's EAGLE path builds them (sgl-kernel
//     csrc/speculative/eagle_utils.cu, build_tree_efficient and VerifyTreeGreedy, 2025, commit
//     0e6ed14; the arrays are spelled `retrive_next_token` / `retrive_next_sibling` there): per
//     sequence n entries, entry 0 the root (the last verified token), next_token[i] the first
//     child of i, next_sibling[i] the next child of i's parent, -1 ending both. Target row i is p
//     after engine node i, so engine node j is TreeBatch node j - 1 and the rows line up as they are.
// (b) A static tree as a list of paths (Medusa's and EAGLE-1's "choices"): path [a, b] is the
//     b-th child of the root's a-th child. Nodes are ordered as Medusa orders them, by length
//     and then lexicographically, which puts parents first and siblings by choice.
//
//   const std::int64_t next_token[] = {1, 3, -1, -1}, next_sibling[] = {-1, 2, -1, -1};
//   specverify::TreeLinks links = specverify::from_next_links(next_token, next_sibling, 4);
//   // links.parents == {-1, -1, 0}; links.engine_index == {1, 2, 3}; links.in_engine_order(1)
//   specverify::TreeLinks medusa = specverify::from_paths({{0}, {1}, {0, 0}, {0, 1}});
//   // medusa.parents == {-1, -1, 0, 0}
//
// The walk tries a node's children in increasing index; both conversions keep the engine's
// sibling order. Where the engine's own numbering already has parents first and siblings in
// increasing index, it is kept (engine_index is then i + first and the rows need no reordering);
// otherwise nodes are numbered level by level and engine_index says which engine node (and so
// which token and rows) each TreeBatch node is.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "specverify/types.hpp"

namespace specverify {

/// One sequence's tree as TreeBatch expects it.
struct TreeLinks {
  std::vector<std::int32_t> parents;       // [N]: TreeBatch::parents (sequence-local, -1 = root)
  std::vector<std::int32_t> engine_index;  // [N]: the engine's index of TreeBatch node i

  /// Whether node i is engine entry i + first for every i: tokens and rows can be used in place.
  bool in_engine_order(std::int32_t first) const {
    for (std::size_t i = 0; i < engine_index.size(); ++i) {
      if (engine_index[i] != std::int32_t(i) + first) return false;
    }
    return true;
  }
};

namespace detail {

template <class... Parts>
[[noreturn]] void reject_tree(const Parts&... parts) {
  std::ostringstream message;
  message << "specverify tree conversion: ";
  (message << ... << parts);
  throw invalid_input(message.str());
}

/// Numbers the nodes of a tree given as children lists of engine nodes (`children[r]` of the
/// root r first): in engine order when it already fits TreeBatch, else level by level.
inline TreeLinks number(const std::vector<std::vector<std::int32_t>>& children, std::int32_t root,
                        std::int32_t count) {
  std::vector<std::int32_t> parent(std::size_t(count), -2);
  bool fits = true;
  for (std::int32_t node = 0; node < count; ++node) {
    std::int32_t previous = -1;
    for (std::int32_t c : children[std::size_t(node)]) {
      parent[std::size_t(c)] = node;
      fits = fits && c > node && c > previous;
      previous = c;
    }
  }
  TreeLinks links;
  std::vector<std::int32_t> local(std::size_t(count), -1);  // engine node -> TreeBatch node
  if (fits) {
    for (std::int32_t e = 0; e < count; ++e) {
      if (e == root) continue;
      links.engine_index.push_back(e);
    }
  } else {
    std::vector<std::int32_t> level{root};
    while (!level.empty()) {
      std::vector<std::int32_t> next;
      for (std::int32_t node : level) {
        for (std::int32_t c : children[std::size_t(node)]) {
          links.engine_index.push_back(c);
          next.push_back(c);
        }
      }
      level.swap(next);
    }
  }
  for (std::size_t i = 0; i < links.engine_index.size(); ++i) local[std::size_t(links.engine_index[i])] = std::int32_t(i);
  for (std::int32_t e : links.engine_index) {
    const std::int32_t p = parent[std::size_t(e)];
    links.parents.push_back(p == root ? -1 : local[std::size_t(p)]);
  }
  return links;
}

}  // namespace detail

/// (a) First-child / next-sibling links over n entries, entry 0 the root. Throws invalid_input
/// for an index outside [-1, n), a link to the root, a node reached twice (a cycle or a shared
/// child) or not at all.
template <class Index>
TreeLinks from_next_links(const Index* next_token, const Index* next_sibling, std::int32_t n) {
  if (n < 1) detail::reject_tree("n = ", n, " must be >= 1 (entry 0 is the root)");
  if (!next_token || !next_sibling) detail::reject_tree("next_token or next_sibling is null");
  for (std::int32_t i = 0; i < n; ++i) {
    for (const Index* links : {next_token, next_sibling}) {
      const Index v = links[i];
      if (v < -1 || v >= n || v == 0) {
        detail::reject_tree(links == next_token ? "next_token[" : "next_sibling[", i, "] = ", std::int64_t(v),
                            " must be -1 or a node in [1, ", n, ")");
      }
    }
  }
  if (next_sibling[0] != -1) detail::reject_tree("next_sibling[0] = ", std::int64_t(next_sibling[0]), ": the root has no siblings");
  std::vector<std::vector<std::int32_t>> children(static_cast<std::size_t>(n));
  std::vector<bool> reached(std::size_t(n), false);
  reached[0] = true;
  std::vector<std::int32_t> stack{0};
  while (!stack.empty()) {
    const std::int32_t node = stack.back();
    stack.pop_back();
    for (std::int64_t c = next_token[node]; c != -1; c = next_sibling[c]) {
      if (reached[std::size_t(c)]) detail::reject_tree("node ", c, " is reached twice (from node ", node, ")");
      reached[std::size_t(c)] = true;
      children[std::size_t(node)].push_back(std::int32_t(c));
      stack.push_back(std::int32_t(c));
    }
  }
  for (std::int32_t i = 0; i < n; ++i) {
    if (!reached[std::size_t(i)]) detail::reject_tree("node ", i, " is not reachable from the root");
  }
  return detail::number(children, 0, n);
}

/// (b) A static tree as a list of paths of child choices from the root. engine_index[i] is the
/// index in `paths` of TreeBatch node i. Throws invalid_input for an empty path, a negative
/// choice, a path listed twice, or a path whose parent path is not listed.
inline TreeLinks from_paths(const std::vector<std::vector<std::int32_t>>& paths) {
  const std::int32_t n = std::int32_t(paths.size());
  std::vector<std::int32_t> sorted(static_cast<std::size_t>(n));
  std::iota(sorted.begin(), sorted.end(), 0);
  for (std::int32_t i = 0; i < n; ++i) {
    const auto& path = paths[std::size_t(i)];
    if (path.empty()) detail::reject_tree("path ", i, " is empty");
    for (std::int32_t choice : path) {
      if (choice < 0) detail::reject_tree("path ", i, " has choice ", choice, " (must be >= 0)");
    }
  }
  const auto before = [&](std::int32_t a, std::int32_t b) {
    const auto& x = paths[std::size_t(a)];
    const auto& y = paths[std::size_t(b)];
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  };
  std::stable_sort(sorted.begin(), sorted.end(), before);
  TreeLinks links;
  for (std::int32_t k = 0; k < n; ++k) {
    const std::int32_t i = sorted[std::size_t(k)];
    const auto& path = paths[std::size_t(i)];
    if (k > 0 && paths[std::size_t(sorted[std::size_t(k - 1)])] == path) {
      detail::reject_tree("path ", i, " repeats path ", sorted[std::size_t(k - 1)]);
    }
    std::int32_t parent = -1;
    if (path.size() > 1) {
      const std::vector<std::int32_t> prefix(path.begin(), path.end() - 1);
      // The parent path is shorter, so it is among the nodes numbered already.
      for (std::int32_t j = 0; j < k && parent < 0; ++j) {
        if (paths[std::size_t(sorted[std::size_t(j)])] == prefix) parent = j;
      }
      if (parent < 0) detail::reject_tree("path ", i, ": its parent path is not listed");
    }
    links.parents.push_back(parent);
    links.engine_index.push_back(i);
  }
  return links;
}

}  // namespace specverify
