// A long-double reference of the pre-pass without bias or penalties (docs/api.md "Logits and sampling
// parameters": its steps 1 and 4-9, numbered 1-7 below), logits to the processed p, written plainly:
// sorting, no thresholds in g, every step on its own.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "specverify/sampling.hpp"

namespace specverify::testing {

struct ReferenceRow {
  std::vector<float> logits;
  SamplingParams params;
  std::vector<float> unconditional;  // empty: no guidance
  float guidance_scale = 1.0f;
  std::vector<std::uint32_t> allowed;  // empty: every token allowed
};

/// Steps 1 and 2 in long double: the processed logits (-inf where masked).
inline std::vector<long double> reference_logits(const ReferenceRow& row) {
  const std::size_t n = row.logits.size();
  std::vector<long double> g(n);
  for (std::size_t v = 0; v < n; ++v) {
    long double l = row.logits[v];
    if (!row.unconditional.empty()) {
      const long double u = row.unconditional[v];
      l = std::isinf(l) || std::isinf(u) ? -INFINITY : u + row.guidance_scale * (l - u);
    }
    if (!row.allowed.empty() && !((row.allowed[v / 32] >> (v % 32)) & 1u)) l = -INFINITY;
    g[v] = l;
  }
  return g;
}

/// The processed p: every entry 0 when every token is masked.
inline std::vector<long double> reference_probs(const ReferenceRow& row) {
  const std::vector<long double> g = reference_logits(row);
  const std::size_t n = g.size();
  std::vector<long double> p(n, 0.0L);
  const auto top = std::max_element(g.begin(), g.end());  // the first of the largest
  if (n == 0 || std::isinf(*top)) return p;
  const SamplingParams& s = row.params;
  if (s.temperature == 0.0f) {  // step 3, greedy
    p[static_cast<std::size_t>(top - g.begin())] = 1.0L;
    return p;
  }
  std::vector<bool> kept(n);
  for (std::size_t v = 0; v < n; ++v) kept[v] = !std::isinf(g[v]);
  // Step 4: keep g >= the k-th largest value.
  if (s.top_k > 0 && static_cast<std::size_t>(s.top_k) < n) {
    std::vector<long double> sorted(g);
    std::sort(sorted.begin(), sorted.end(), std::greater<long double>());
    const long double kth = sorted[static_cast<std::size_t>(s.top_k) - 1];
    for (std::size_t v = 0; v < n; ++v) kept[v] = kept[v] && g[v] >= kth;
  }
  // Step 3's weights on what is kept.
  const auto weights = [&] {
    std::vector<long double> w(n, 0.0L);
    for (std::size_t v = 0; v < n; ++v) {
      if (kept[v]) w[v] = std::exp((g[v] - *top) / static_cast<long double>(s.temperature));
    }
    return w;
  };
  // Step 5: the smallest top set by p reaching top_p of the kept mass, with its ties.
  if (s.top_p < 1.0f) {
    const std::vector<long double> w = weights();
    const long double total = std::accumulate(w.begin(), w.end(), 0.0L);
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return w[a] > w[b]; });
    long double mass = 0, t = 0;
    for (std::size_t r = 0; r < n && kept[order[r]]; ++r) {
      mass += w[order[r]] / total;
      t = w[order[r]];
      if (mass >= s.top_p) break;
    }
    for (std::size_t v = 0; v < n; ++v) kept[v] = kept[v] && w[v] >= t;
  }
  // Step 6: p >= min_p * max p.
  if (s.min_p > 0.0f) {
    const std::vector<long double> w = weights();
    const long double top_w = *std::max_element(w.begin(), w.end());
    for (std::size_t v = 0; v < n; ++v) kept[v] = kept[v] && w[v] >= s.min_p * top_w;
  }
  // Step 7.
  p = weights();
  const long double total = std::accumulate(p.begin(), p.end(), 0.0L);
  for (auto& x : p) x /= total;
  return p;
}

/// As floats, for chi_square.
inline std::vector<float> as_floats(const std::vector<long double>& p) {
  return std::vector<float>(p.begin(), p.end());
}

}  // namespace specverify::testing
