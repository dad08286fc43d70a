// Trees: exactness of the emitted sequence for every way children are drafted.
#include <gtest/gtest.h>

#include <random>

#include "markov.hpp"

namespace specverify {
namespace {

using testing::Markov;

/// One speculative step on a tree drafted from Markov q after `context`: `width` children per
/// node, `depth` levels, children drawn as `how` says. Returns the emitted tokens.
std::vector<std::int32_t> tree_step(const Markov& p, const Markov& q, const std::vector<std::int32_t>& context,
                                    std::int32_t width, std::int32_t depth, Drafted how, Drafted declared,
                                    std::uint64_t seed, std::uint64_t offset, std::mt19937_64& rng) {
  const std::int32_t V = p.V;
  std::vector<std::int32_t> parents, tokens, last_of;  // last_of: the token a node ends with
  std::vector<std::int32_t> frontier{-1};
  const std::int32_t root_last = context.empty() ? -1 : context.back();
  for (std::int32_t level = 0; level < depth; ++level) {
    std::vector<std::int32_t> next;
    for (std::int32_t node : frontier) {
      const std::int32_t prev = node < 0 ? root_last : tokens[std::size_t(node)];
      std::vector<float> w = q.row(prev);
      for (std::int32_t c = 0; c < width; ++c) {
        std::int32_t x;
        if (how == Drafted::deterministic) {  // top-width of q, by decreasing mass
          x = std::int32_t(std::max_element(w.begin(), w.end()) - w.begin());
          w[std::size_t(x)] = -1.0f;
        } else {
          x = testing::sample(w, rng);
          if (how == Drafted::sampled_without_replacement) w[std::size_t(x)] = 0.0f;
        }
        parents.push_back(node);
        tokens.push_back(x);
        next.push_back(std::int32_t(tokens.size()) - 1);
      }
    }
    frontier = next;
  }
  const std::int32_t N = std::int32_t(tokens.size());
  std::vector<float> prow, qrow;
  for (std::int32_t r = -1; r < N; ++r) {
    const std::int32_t prev = r < 0 ? root_last : tokens[std::size_t(r)];
    prow.insert(prow.end(), p.row(prev).begin(), p.row(prev).end());
    qrow.insert(qrow.end(), q.row(prev).begin(), q.row(prev).end());
  }
  const std::int32_t offsets[2] = {0, N};
  TreeBatch<float> batch;
  batch.batch_size = 1;
  batch.vocab_size = V;
  batch.node_offsets = offsets;
  batch.parents = parents.data();
  batch.draft_tokens = tokens.data();
  batch.target_probs = prow.data();
  batch.draft_probs = qrow.data();
  batch.drafted = declared;
  std::vector<std::int32_t> out(std::size_t(depth + 1)), nodes(std::size_t(depth + 1));
  std::int32_t accepted = 0;
  TreeOutput o{out.data(), depth + 1, &accepted, nodes.data()};
  verify(Standard{}, batch, Randomness{seed, offset}, o);
  for (std::int32_t i = 0; i < accepted; ++i) {
    EXPECT_EQ(tokens[std::size_t(nodes[std::size_t(i)])], out[std::size_t(i)]);
  }
  return {out.begin(), out.begin() + accepted + 1};
}

void expect_exact(Drafted how, Drafted declared, bool adversarial, bool should_fit) {
  std::mt19937_64 rng(7);
  const Markov p = Markov::random(4, rng);
  const Markov q = adversarial ? p.reversed() : Markov::random(4, rng);
  const auto exact = p.joint(3);
  std::mt19937_64 draft_rng(11);
  const auto chi = testing::prefix_chi_square(4, 3, 200000, exact, [&](const auto& context, std::int64_t step) {
    return tree_step(p, q, context, 3, 2, how, declared, 99, std::uint64_t(step), draft_rng);
  });
  EXPECT_EQ(chi.fits(), should_fit) << "chi2 " << chi.statistic << " df " << chi.df;
}

TEST(TreeExactness, SampledChildren) { expect_exact(Drafted::sampled, Drafted::sampled, false, true); }
TEST(TreeExactness, SampledChildrenAdversarial) { expect_exact(Drafted::sampled, Drafted::sampled, true, true); }
TEST(TreeExactness, WithoutReplacement) {
  expect_exact(Drafted::sampled_without_replacement, Drafted::sampled_without_replacement, false, true);
}
TEST(TreeExactness, Deterministic) { expect_exact(Drafted::deterministic, Drafted::deterministic, false, true); }
TEST(TreeExactness, NegativeControlTopKDeclaredSampled) {
  expect_exact(Drafted::deterministic, Drafted::sampled, false, false);
}

}  // namespace
}  // namespace specverify
