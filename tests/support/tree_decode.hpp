// Decode loops over trees: one speculative step drafts a tree from Markov q for each decode and
// verifies the batch with a rule; the emitted prefixes are compared with the exact joint
// (markov.hpp). Shared by the tree rules' tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "markov.hpp"
#include "trees.hpp"

namespace specverify::testing {

/// Checks one sequence's output row against its tree: the accepted nodes form a path from the
/// root, their tokens are the output's, and the slots past the extra token hold kNoToken.
inline void expect_path(const std::vector<std::int32_t>& parents, const std::vector<std::int32_t>& tokens,
                 const std::int32_t* out, const std::int32_t* nodes, std::int32_t accepted, std::int32_t width) {
  for (std::int32_t i = 0; i < accepted; ++i) {
    const std::int32_t node = nodes[i];
    ASSERT_TRUE(node >= 0 && node < std::int32_t(parents.size())) << node;
    EXPECT_EQ(parents[std::size_t(node)], i == 0 ? -1 : nodes[i - 1]);
    EXPECT_EQ(tokens[std::size_t(node)], out[i]);
  }
  for (std::int32_t i = accepted; i < width; ++i) EXPECT_EQ(nodes[i], kNoToken);
  for (std::int32_t i = accepted + 1; i < width; ++i) EXPECT_EQ(out[i], kNoToken);
}

/// One speculative step for several decodes at once, one sequence each: a tree of `shape`
/// drafted from Markov q after each context as `how` says, verified with `rule` as `declared`.
/// Returns each sequence's emitted tokens, and checks its accepted nodes form its output's path.
template <class Rule = Standard>
std::vector<std::vector<std::int32_t>> tree_steps(const Markov& p, const Markov& q,
                                                  const std::vector<std::vector<std::int32_t>>& contexts,
                                                  const TreeShape& shape, Drafted how, Drafted declared,
                                                  std::uint64_t seed, std::uint64_t offset, std::mt19937_64& rng,
                                                  const Rule& rule = {}) {
  Trees t(p.V, declared);  // deterministic children need no q: the batch passes none
  for (const auto& context : contexts) {
    const DraftedTree d(p, q, shape, context.empty() ? -1 : context.back(), how, rng);
    t.add_rows(d.parents, d.tokens, d.p, d.q);
  }
  verify(rule, t.batch(), Randomness{seed, offset}, t.output());
  std::vector<std::vector<std::int32_t>> emitted;
  for (std::int32_t b = 0; b < t.size(); ++b) {
    const std::int32_t first = t.offsets[std::size_t(b)], last = t.offsets[std::size_t(b) + 1];
    const std::int32_t n = t.accepted[std::size_t(b)];
    const std::int32_t* out = t.out_tokens.data() + std::size_t(b) * t.width;
    expect_path({t.parents.begin() + first, t.parents.begin() + last}, {t.tokens.begin() + first, t.tokens.begin() + last},
                out, t.nodes.data() + std::size_t(b) * t.width, n, t.width);
    emitted.emplace_back(out, out + n + 1);
  }
  return emitted;
}

/// One speculative step for one decode.
template <class Rule = Standard>
std::vector<std::int32_t> tree_step(const Markov& p, const Markov& q, const std::vector<std::int32_t>& context,
                                    const TreeShape& shape, Drafted how, Drafted declared, std::uint64_t seed,
                                    std::uint64_t offset, std::mt19937_64& rng, const Rule& rule = {}) {
  return tree_steps(p, q, {context}, shape, how, declared, seed, offset, rng, rule)[0];
}

/// The chi-square of the first 3 tokens that decode loops with `rule` emit, against the exact joint.
template <class Rule = Standard>
ChiSquare decode_chi_square(const Markov& p, const Markov& q, const TreeShape& shape, Drafted how, Drafted declared,
                            std::int64_t trials, std::uint64_t draft_seed = 11, const Rule& rule = {}) {
  std::mt19937_64 draft_rng(draft_seed);
  return batched_prefix_chi_square(p.V, 3, trials, 500, p.joint(3), [&](const auto& contexts, std::uint64_t offset) {
    return tree_steps(p, q, contexts, shape, how, declared, 99, offset, draft_rng, rule);
  });
}

struct Models {
  Markov p, q;
};
inline Models models(std::int32_t V, bool adversarial, std::uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  Markov p = Markov::random(V, rng);
  Markov q = adversarial ? p.reversed() : Markov::random(V, rng);
  return {p, q};
}

/// A target and a peaked draft under which sampled children repeat tokens often (more than half of
/// 1000 three-child nodes hold a duplicate: the case a test of duplicates must see).
inline Models peaked_draft_models() {
  std::mt19937_64 rng(5);
  Models m{Markov::random(4, rng), Markov::random(4, rng, 4.0)};
  std::mt19937_64 count_rng(1);
  std::int32_t with_duplicates = 0;
  for (std::int32_t i = 0; i < 1000; ++i) {
    const DraftedTree t(m.p, m.q, full_tree(3, 1), -1, Drafted::sampled, count_rng);
    with_duplicates += std::set<std::int32_t>(t.tokens.begin(), t.tokens.end()).size() < 3;
  }
  EXPECT_GT(with_duplicates, 500);
  return m;
}

/// Root with three children: the first has two (one of which has a child), the second is a
/// leaf, the third has one: widths 3, 2, 1, leaves at depths 1, 2 and 3.
inline const TreeShape kRagged = {-1, -1, -1, 0, 0, 2, 3};

}  // namespace specverify::testing
