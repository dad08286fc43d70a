// Drafting from a draft row q: one token (chains), or the children of a tree node drawn as
// specverify::Drafted declares them (top-k of q, i.i.d. from q, or from q without the earlier
// siblings), and the shape of the trees the comparison drafts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specverify/specverify.hpp"

namespace specverify::comparison {

/// sum_v q(v), in 16 float lanes (vectorised).
inline double row_total(const float* q, std::int32_t V) {
  float lanes[16] = {};
  std::int32_t v = 0;
  for (; v + 16 <= V; v += 16)
    for (std::int32_t i = 0; i < 16; ++i) lanes[i] += q[v + i];
  double total = 0;
  for (; v < V; ++v) total += q[v];
  for (const float l : lanes) total += l;
  return total;
}

/// The smallest i with q_0 + ... + q_i > u * mass; the last token with mass if rounding runs
/// past the end.
inline std::int32_t draw_from(const float* q, std::int32_t V, double mass, double u) {
  const double target = u * mass;
  double run = 0;
  for (std::int32_t v = 0; v < V; ++v) {
    run += q[v];
    if (run > target) return v;
  }
  std::int32_t last = V - 1;
  while (last > 0 && q[last] == 0.0f) --last;
  return last;
}

/// A token drawn from q (in proportion to its weights).
inline std::int32_t sample_row(const float* q, std::int32_t V, double u) { return draw_from(q, V, row_total(q, V), u); }

/// The children of one tree node, drafted from its draft row q as `how` declares: `deterministic`
/// takes q's top `width` tokens by decreasing q (ties: lower index first), `sampled` draws `width`
/// i.i.d. from q (duplicates allowed), `sampled_without_replacement` draws each from q without
/// the earlier siblings (their entries are zeroed while drawing and restored after, so q is
/// returned as given). Siblings come in drafting order, the order verify tries them in. Without
/// replacement stops early where q has no mass left (fewer children).
inline void draft_children(float* q, std::int32_t V, std::int32_t width, Drafted how, std::mt19937_64& rng,
                           std::vector<std::int32_t>& children) {
  children.clear();
  if (how == Drafted::deterministic) {
    for (std::int32_t v = 0; v < V; ++v) {
      if (std::int32_t(children.size()) == width && !(q[v] > q[children.back()])) continue;
      auto at = children.begin();
      while (at != children.end() && !(q[v] > q[*at])) ++at;  // strict: equal q keeps the lower index first
      children.insert(at, v);
      if (std::int32_t(children.size()) > width) children.pop_back();
    }
    return;
  }
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double total = row_total(q, V);
  double left = total;
  std::vector<float> taken;  // the zeroed siblings' q, to restore
  for (std::int32_t c = 0; c < width; ++c) {
    if (how == Drafted::sampled) {
      children.push_back(draw_from(q, V, total, uniform(rng)));
      continue;
    }
    if (!(left > 0)) break;
    const std::int32_t x = draw_from(q, V, left, uniform(rng));
    if (q[x] == 0.0f) break;  // only rounding was left
    left -= q[x];
    taken.push_back(q[x]);
    q[x] = 0.0f;
    children.push_back(x);
  }
  for (std::size_t i = 0; i < taken.size(); ++i) q[children[i]] = taken[i];
}

/// A tree's shape by levels: branching[d] children under every node of depth d (the root has
/// depth 0). Nodes are numbered level by level, siblings in drafting order, so every parent
/// precedes its children and verify tries the first-drafted child first. {2, 1}: two chains of
/// two (4 nodes); {2, 2}: the full binary tree of depth 2 (6 nodes).
struct TreeShape {
  std::vector<std::int32_t> branching;

  std::int32_t depth() const { return std::int32_t(branching.size()); }
  std::int32_t nodes() const {
    std::int32_t n = 0, level = 1;
    for (const std::int32_t b : branching) n += level *= b;
    return n;
  }
  std::string name() const {  // "2-2"
    std::string s;
    for (const std::int32_t b : branching) s += (s.empty() ? "" : "-") + std::to_string(b);
    return s;
  }
};

}  // namespace specverify::comparison
