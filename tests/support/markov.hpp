// Sequence-level exactness: small Markov target and draft models, the exact joint distribution
// of the first n tokens a decode emits, and a chi-square of a decode loop's emitted prefixes
// against it. Rules that decide a whole chain or tree (trees, Block) are lossless only if the
// emitted *sequence* follows p; a per-position marginal can hide a bias that this test sees.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "support.hpp"

namespace specverify::testing {

/// A first-order Markov model over V tokens: row(prev) is the next-token distribution after
/// token prev, row(-1) the one at the start.
struct Markov {
  std::int32_t V = 0;
  std::vector<std::vector<float>> rows;  // V + 1 rows: start, then one per previous token

  const std::vector<float>& row(std::int32_t prev) const { return rows[std::size_t(prev + 1)]; }

  static Markov random(std::int32_t V, std::mt19937_64& rng, double scale = 1.5) {
    Markov m{V, {}};
    for (std::int32_t i = 0; i <= V; ++i) m.rows.push_back(softmax(random_logits(V, rng, scale)));
    return m;
  }
  /// Each row reversed: the draft puts its mass where the target puts least (adversarial).
  Markov reversed() const {
    Markov m = *this;
    for (auto& r : m.rows) std::reverse(r.begin(), r.end());
    return m;
  }

  /// The exact probability of each prefix of n tokens, indexed t_0 * V^(n-1) + ... + t_{n-1}.
  std::vector<float> joint(std::int32_t n) const {
    std::vector<double> j{1.0};
    std::vector<std::int32_t> last{-1};
    for (std::int32_t step = 0; step < n; ++step) {
      std::vector<double> next;
      std::vector<std::int32_t> next_last;
      for (std::size_t i = 0; i < j.size(); ++i) {
        for (std::int32_t t = 0; t < V; ++t) {
          next.push_back(j[i] * row(last[i])[std::size_t(t)]);
          next_last.push_back(t);
        }
      }
      j.swap(next);
      last.swap(next_last);
    }
    return std::vector<float>(j.begin(), j.end());
  }
};

/// A tree shape: parents[i] < i, -1 for a child of the root. The tokens are drafted per step.
using TreeShape = std::vector<std::int32_t>;

/// A full tree: `width` children per node, `depth` levels.
inline TreeShape full_tree(std::int32_t width, std::int32_t depth) {
  TreeShape parents;
  std::vector<std::int32_t> frontier{-1};
  for (std::int32_t level = 0; level < depth; ++level) {
    std::vector<std::int32_t> next;
    for (std::int32_t node : frontier) {
      for (std::int32_t c = 0; c < width; ++c) {
        parents.push_back(node);
        next.push_back(std::int32_t(parents.size()) - 1);
      }
    }
    frontier = next;
  }
  return parents;
}

/// One tree drafted from Markov q after the last committed token: the rows of every node (row 0
/// at the root, row 1 + i after node i) for p and q, and the children of each node drawn from q
/// as `how` says, in index order.
struct DraftedTree {
  TreeShape parents;
  std::vector<std::int32_t> tokens;
  std::vector<float> p, q;  // [N + 1][V]
  std::int32_t depth = 0;   // the deepest path

  DraftedTree(const Markov& target, const Markov& draft, const TreeShape& shape, std::int32_t last,
              Drafted how, std::mt19937_64& rng)
      : parents(shape), tokens(shape.size()) {
    const std::int32_t N = std::int32_t(shape.size());
    std::vector<std::int32_t> level(shape.size());
    // Children of each node (-1 first), drawn in index order against what earlier siblings left.
    std::vector<std::vector<float>> left(std::size_t(N) + 1);
    const auto prev = [&](std::int32_t node) { return node < 0 ? last : tokens[std::size_t(node)]; };
    for (std::int32_t i = 0; i < N; ++i) {
      const std::int32_t parent = shape[std::size_t(i)];
      level[std::size_t(i)] = parent < 0 ? 1 : level[std::size_t(parent)] + 1;
      depth = std::max(depth, level[std::size_t(i)]);
      auto& w = left[std::size_t(parent + 1)];
      if (w.empty()) w = draft.row(prev(parent));
      std::int32_t x;
      if (how == Drafted::deterministic) {  // top-k of q: by decreasing mass, lowest index on ties
        x = std::int32_t(std::max_element(w.begin(), w.end()) - w.begin());
        w[std::size_t(x)] = -1.0f;
      } else {
        x = sample(w, rng);
        if (how == Drafted::sampled_without_replacement) w[std::size_t(x)] = 0.0f;
      }
      tokens[std::size_t(i)] = x;
    }
    for (std::int32_t r = -1; r < N; ++r) {
      const auto& pr = target.row(prev(r));
      const auto& qr = draft.row(prev(r));
      p.insert(p.end(), pr.begin(), pr.end());
      q.insert(q.end(), qr.begin(), qr.end());
    }
  }

  TreeBatch<float> batch(std::int32_t V, const std::int32_t* offsets, Drafted declared, bool with_q = true) const {
    TreeBatch<float> b;
    b.batch_size = 1;
    b.vocab_size = V;
    b.node_offsets = offsets;
    b.parents = parents.data();
    b.draft_tokens = tokens.data();
    b.target_probs = p.data();
    b.draft_probs = with_q ? q.data() : nullptr;
    b.drafted = declared;
    return b;
  }
};

/// Runs `decode` `trials` times; each call gets the tokens emitted so far and returns the tokens
/// one speculative step emits, and is called until n tokens exist. The first n tokens of each
/// trial are binned as Markov::joint bins them; returns the chi-square against `exact`.
inline ChiSquare prefix_chi_square(
    std::int32_t V, std::int32_t n, std::int64_t trials, const std::vector<float>& exact,
    const std::function<std::vector<std::int32_t>(const std::vector<std::int32_t>&, std::int64_t)>& decode) {
  std::vector<std::int64_t> counts(exact.size(), 0);
  std::vector<std::int32_t> emitted;
  for (std::int64_t trial = 0; trial < trials; ++trial) {
    emitted.clear();
    for (std::int64_t step = 0; std::int32_t(emitted.size()) < n; ++step) {
      const auto tokens = decode(emitted, trial * 64 + step);
      emitted.insert(emitted.end(), tokens.begin(), tokens.end());
    }
    std::int64_t bin = 0;
    for (std::int32_t i = 0; i < n; ++i) bin = bin * V + emitted[std::size_t(i)];
    ++counts[std::size_t(bin)];
  }
  return chi_square(counts, exact);
}

/// prefix_chi_square, `width` trials at a time (one verify call per step serves them all):
/// `decode` gets the emitted tokens of each trial still short of n tokens, and an offset unique
/// to this group of trials and step, and returns each trial's new tokens in the same order.
inline ChiSquare batched_prefix_chi_square(
    std::int32_t V, std::int32_t n, std::int64_t trials, std::int32_t width, const std::vector<float>& exact,
    const std::function<std::vector<std::vector<std::int32_t>>(const std::vector<std::vector<std::int32_t>>&,
                                                               std::uint64_t)>& decode) {
  std::vector<std::int64_t> counts(exact.size(), 0);
  for (std::int64_t start = 0, group = 0; start < trials; start += width, ++group) {
    std::vector<std::vector<std::int32_t>> emitted(std::size_t(std::min<std::int64_t>(width, trials - start)));
    for (std::uint64_t step = 0;; ++step) {
      std::vector<std::size_t> active;
      std::vector<std::vector<std::int32_t>> contexts;
      for (std::size_t i = 0; i < emitted.size(); ++i) {
        if (std::int32_t(emitted[i].size()) < n) active.push_back(i), contexts.push_back(emitted[i]);
      }
      if (active.empty()) break;
      const auto tokens = decode(contexts, std::uint64_t(group) * 64 + step);
      for (std::size_t a = 0; a < active.size(); ++a) {
        emitted[active[a]].insert(emitted[active[a]].end(), tokens[a].begin(), tokens[a].end());
      }
    }
    for (const auto& e : emitted) {
      std::int64_t bin = 0;
      for (std::int32_t i = 0; i < n; ++i) bin = bin * V + e[std::size_t(i)];
      ++counts[std::size_t(bin)];
    }
  }
  return chi_square(counts, exact);
}

}  // namespace specverify::testing
