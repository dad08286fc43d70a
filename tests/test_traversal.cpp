// Traversal verification (Weng et al. 2025, arXiv 2505.12398; docs/api.md "Traversal"): the emitted
// sequence follows the target (decode loops on Markov models, chi-square, with a planted wrong
// normaliser that must fail), token for token agreement with a plain reference of the formulas,
// the worked example, acceptance against Standard on trees and Block on chains, logits rows, and
// bad input.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "context_free_logits.hpp"
#include "markov.hpp"
#include "reference_draw.hpp"
#include "tree_decode.hpp"

namespace specverify {
namespace {

using testing::DraftedTree;
using testing::Markov;
using testing::TreeShape;
using testing::Trees;

// ---------------------------------------------------------------------------------------------
// A plain reference of the Traversal formulas (docs/api.md "Traversal"): recursive, in double, on one drafted tree.

using testing::reference_draw;

struct Reference {
  const std::vector<std::int32_t>& parents;
  const std::vector<std::int32_t>& tokens;
  const std::vector<float>& p;  // [N + 1][V]: row 0 at the root, row 1 + i after node i
  const std::vector<float>& q;
  std::int32_t V;
  const std::vector<float>& u;  // per node
  bool z_normaliser = false;    // the planted bug: divide by Z instead of Z + 1 - |R|

  double P(std::int32_t node, std::int32_t v) const { return p[std::size_t(node + 1) * std::size_t(V) + std::size_t(v)]; }
  double Q(std::int32_t node, std::int32_t v) const { return q[std::size_t(node + 1) * std::size_t(V) + std::size_t(v)]; }

  /// Visit(a) with R_a and |R_a|: the accepted node and its R when some node passes.
  bool visit(std::int32_t a, std::vector<double>& R, double& mass, std::int32_t& accepted,
             std::vector<double>& R_accepted, std::int32_t& last_child) const {
    last_child = -1;
    for (std::int32_t c = 0; c < std::int32_t(parents.size()); ++c) {
      if (parents[std::size_t(c)] != a) continue;
      last_child = c;
      const std::int32_t x = tokens[std::size_t(c)];
      const double qx = Q(a, x);
      const double w = R[std::size_t(x)] <= 0 ? 0.0 : (R[std::size_t(x)] >= qx ? 1.0 : R[std::size_t(x)] / qx);
      std::vector<double> Rc(std::size_t(V), 0.0);
      for (std::int32_t v = 0; v < V; ++v) Rc[std::size_t(v)] = w * P(c, v);
      double mass_c = w;
      std::int32_t inner = -1;
      if (visit(c, Rc, mass_c, accepted, R_accepted, inner)) return true;
      double z = 0;
      for (std::int32_t v = 0; v < V; ++v) z += std::max(R[std::size_t(v)] - Q(a, v), 0.0);
      const double d = z_normaliser ? z : z + 1 - mass;
      if (d > 0) {
        for (std::int32_t v = 0; v < V; ++v) R[std::size_t(v)] = std::max(R[std::size_t(v)] - Q(a, v), 0.0) / d;
        mass = z / d;
      }
    }
    if (a < 0 || u[std::size_t(a)] < mass) {
      accepted = a;
      R_accepted = R;
      return true;
    }
    return false;
  }

  /// The emitted tokens: the path to the accepted node, then the extra token from its R.
  std::vector<std::int32_t> step(float u_extra, std::int32_t* accepted_node = nullptr) const {
    std::vector<double> R(static_cast<std::size_t>(V));
    for (std::int32_t v = 0; v < V; ++v) R[std::size_t(v)] = P(-1, v);
    double mass = 1;
    std::int32_t accepted = -1, last = -1;
    std::vector<double> R_accepted;
    visit(-1, R, mass, accepted, R_accepted, last);
    std::vector<std::int32_t> out;
    for (std::int32_t n = accepted; n >= 0; n = parents[std::size_t(n)]) out.insert(out.begin(), tokens[std::size_t(n)]);
    std::int32_t extra = reference_draw(R_accepted, u_extra);
    if (extra < 0) {  // no mass left at the root (a rejection of probability 0): p itself
      std::vector<double> Pa(static_cast<std::size_t>(V));
      for (std::int32_t v = 0; v < V; ++v) Pa[std::size_t(v)] = P(accepted, v);
      extra = reference_draw(Pa, u_extra);
    }
    out.push_back(extra);
    if (accepted_node) *accepted_node = accepted;
    return out;
  }
};

// ---------------------------------------------------------------------------------------------
// The emitted sequence follows the target.

void expect_exact(const testing::Models& m, const TreeShape& shape, std::int64_t trials = 150000) {
  const auto chi = testing::decode_chi_square(m.p, m.q, shape, Drafted::sampled, Drafted::sampled, testing::repeats(trials), 11,
                                              Traversal{});
  std::printf("chi2 %.1f, df %d, bound %.1f\n", chi.statistic, chi.df, chi.df + 10 * std::sqrt(2.0 * chi.df));
  EXPECT_TRUE(chi.fits()) << "chi2 " << chi.statistic << " df " << chi.df;
}

TEST(TraversalExactness, Full3x2) { expect_exact(testing::models(4, false), testing::full_tree(3, 2)); }
TEST(TraversalExactness, Full3x2Adversarial) { expect_exact(testing::models(4, true), testing::full_tree(3, 2)); }
TEST(TraversalExactness, Full2x3) { expect_exact(testing::models(5, false), testing::full_tree(2, 3)); }
TEST(TraversalExactness, Full2x3Adversarial) { expect_exact(testing::models(5, true), testing::full_tree(2, 3)); }
TEST(TraversalExactness, Ragged) { expect_exact(testing::models(5, false), testing::kRagged); }
TEST(TraversalExactness, RaggedAdversarial) { expect_exact(testing::models(4, true, 9), testing::kRagged); }
TEST(TraversalExactness, Chain) { expect_exact(testing::models(5, false), {-1, 0, 1}); }

// I.i.d. children repeat tokens often under a peaked q: each rejected duplicate is absorbed again.
TEST(TraversalExactness, DuplicatesUnderPeakedDraft) {
  expect_exact(testing::peaked_draft_models(), testing::full_tree(3, 2));
}

/// Decode loops with the reference: exact, or with the planted normaliser.
testing::ChiSquare reference_chi_square(const testing::Models& m, const TreeShape& shape, bool z_normaliser) {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  return testing::prefix_chi_square(m.p.V, 3, 150000, m.p.joint(3), [&](const auto& context, std::int64_t) {
    const DraftedTree t(m.p, m.q, shape, context.empty() ? -1 : context.back(), Drafted::sampled, rng);
    std::vector<float> u(t.tokens.size());
    for (auto& v : u) v = uniform(rng);
    const Reference ref{t.parents, t.tokens, t.p, t.q, m.p.V, u, z_normaliser};
    return ref.step(uniform(rng));
  });
}

TEST(TraversalReference, ExactFormulasFit) {
  const auto chi = reference_chi_square(testing::models(4, false), testing::full_tree(2, 3), false);
  EXPECT_TRUE(chi.fits()) << "chi2 " << chi.statistic << " df " << chi.df;
}
// The normaliser Z in place of Z + 1 - |R| is off by 0.03 to 0.7 in total variation.
TEST(TraversalReference, NegativeControlZNormaliserFails) {
  const auto chi = reference_chi_square(testing::models(4, false), testing::full_tree(2, 3), true);
  EXPECT_FALSE(chi.fits()) << "chi2 " << chi.statistic << " df " << chi.df;
}

// ---------------------------------------------------------------------------------------------
// The library against the reference, token for token, on the same uniforms.

/// A distribution with about a fifth of its entries exactly 0 (so that w = 0, w = 1 and empty
/// residuals all occur).
std::vector<float> row_with_zeros(std::int32_t V, std::mt19937_64& rng) {
  std::bernoulli_distribution zero(0.2);
  for (;;) {
    auto p = testing::random_distribution(V, rng, 1.5);
    double s = 0;
    for (auto& v : p) s += (v = zero(rng) ? 0.0f : v);
    if (!(s > 0)) continue;
    for (auto& v : p) v = float(v / s);
    return p;
  }
}

void expect_matches_reference(std::int32_t V, std::int32_t max_nodes, std::int32_t trees, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> size(0, max_nodes);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  Trees t(V);
  std::vector<std::vector<std::int32_t>> expected;
  std::vector<std::int32_t> expected_node;
  for (std::int32_t b = 0; b < trees; ++b) {
    const std::int32_t n = size(rng);
    std::vector<std::int32_t> parents, tokens;
    std::vector<std::vector<float>> P{row_with_zeros(V, rng)}, Q{row_with_zeros(V, rng)};
    std::vector<float> u;
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int32_t parent = std::uniform_int_distribution<std::int32_t>(-1, i - 1)(rng);
      parents.push_back(parent);
      tokens.push_back(testing::sample(Q[std::size_t(parent + 1)], rng));  // i.i.d. from the parent's q
      P.push_back(row_with_zeros(V, rng));
      Q.push_back(i % 3 == 2 ? P.back() : row_with_zeros(V, rng));  // p = q gives weight-1 paths
      u.push_back(i % 7 == 3 ? 0.0f : uniform(rng));                // u = 0 must not accept p(x) = 0
    }
    t.add(parents, tokens, P, Q);
    t.accept_u.insert(t.accept_u.end(), u.begin(), u.end());
    t.sample_u.push_back(uniform(rng));
    std::vector<float> p_flat, q_flat;
    for (const auto& r : P) p_flat.insert(p_flat.end(), r.begin(), r.end());
    for (const auto& r : Q) q_flat.insert(q_flat.end(), r.begin(), r.end());
    const Reference ref{parents, tokens, p_flat, q_flat, V, u};
    std::int32_t node = -1;
    expected.push_back(ref.step(t.sample_u.back(), &node));
    expected_node.push_back(node);
  }
  const VerifyStats stats = verify(Traversal{}, t.batch(), t.randomness(), t.output());
  std::int64_t accepted = 0;
  for (std::int32_t b = 0; b < trees; ++b) {
    const auto& e = expected[std::size_t(b)];
    ASSERT_EQ(t.accepted[std::size_t(b)] + 1, std::int32_t(e.size())) << "sequence " << b;
    for (std::size_t i = 0; i < e.size(); ++i) ASSERT_EQ(t.token(b, std::int32_t(i)), e[i]) << "sequence " << b << " token " << i;
    const std::int32_t depth = t.accepted[std::size_t(b)];
    if (depth > 0) {
      ASSERT_EQ(t.node(b, depth - 1), expected_node[std::size_t(b)]) << "sequence " << b;
    }
    for (std::int32_t i = 0; i <= depth; ++i) {  // log p of each emitted token under the row it came from
      const std::int32_t row = i == 0 ? 0 : 1 + t.node(b, i - 1);
      const float p = t.p[(std::size_t(t.offsets[std::size_t(b)] + b + row)) * std::size_t(V) + std::size_t(t.token(b, i))];
      ASSERT_EQ(t.logprobs[std::size_t(b) * std::size_t(t.width) + std::size_t(i)], float(std::log(double(p))));
    }
    accepted += depth;
  }
  EXPECT_EQ(stats.accepted, accepted);
  EXPECT_EQ(stats.relaxed, 0);
}

TEST(TraversalReference, TokenForToken) { expect_matches_reference(6, 7, 20000, 1); }
TEST(TraversalReference, WideRowsTokenForToken) { expect_matches_reference(3000, 12, 300, 2); }
TEST(TraversalReference, DeepTreesTokenForToken) { expect_matches_reference(5, 60, 500, 3); }

// A chain given as a ChainBatch walks like the same chain given as a tree.
TEST(TraversalChains, ChainBatchEqualsTheTreeOfTheChain) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  constexpr std::int32_t V = 7;
  testing::Chains c(V);
  Trees t(V);
  std::vector<float> u, u_extra;
  for (std::int32_t b = 0; b < 3000; ++b) {
    const std::int32_t k = b % 6;
    std::vector<std::vector<float>> P, Q;
    std::vector<std::int32_t> x, parents;
    for (std::int32_t j = 0; j <= k; ++j) {
      P.push_back(row_with_zeros(V, rng));
      if (j == k) break;
      Q.push_back(row_with_zeros(V, rng));
      x.push_back(testing::sample(Q.back(), rng));
      parents.push_back(j - 1);
      u.push_back(uniform(rng));
    }
    u_extra.push_back(uniform(rng));
    c.add(x, P, Q);
    std::vector<std::vector<float>> tree_q = Q;
    tree_q.push_back(P.back());  // the leaf's q row: never read
    t.add(parents, x, P, tree_q);
  }
  t.accept_u = u;
  t.sample_u = u_extra;
  Randomness r;
  r.accept_uniforms = u.data();
  r.sample_uniforms = u_extra.data();
  verify(Traversal{}, c.batch(), r, c.output());
  verify(Traversal{}, t.batch(), t.randomness(), t.output());
  EXPECT_EQ(c.accepted, t.accepted);
  EXPECT_EQ(c.out_tokens, t.out_tokens);
}

// ---------------------------------------------------------------------------------------------
// A worked example of the Traversal formulas: V = {a, b, c}; the root's children are node 0 = a and node 2 = b,
// node 1 is a child of node 0.

struct Worked {
  Trees t{3};
  explicit Worked(std::int32_t node1, float u0, float u1, float u2) {
    const std::vector<float> P_root{0.2f, 0.5f, 0.3f}, Q_root{0.4f, 0.4f, 0.2f};
    const std::vector<float> P_a{0.1f, 0.1f, 0.8f}, Q_a{0.5f, 0.3f, 0.2f};
    const std::vector<float> after_node1{0.0f, 1.0f, 0.0f}, after_b{0.0f, 0.0f, 1.0f}, unused{1.0f, 0.0f, 0.0f};
    t.add({-1, 0, -1}, {0, node1, 1}, {P_root, P_a, after_node1, after_b}, {Q_root, Q_a, unused, unused});
    t.accept_u = {u0, u1, u2};
    t.sample_u = {0.5f};
  }
  std::vector<std::int32_t> emitted() {
    verify(Traversal{}, t.batch(), t.randomness(), t.output());
    return {t.out_tokens.begin(), t.out_tokens.begin() + t.accepted[0] + 1};
  }
};

TEST(TraversalWorkedExample, PathAcIsAcceptedForSure) {
  // w_1 = min(0.4 / 0.2, 1) = 1: (a, c) passes whatever the uniforms; the bonus from after_node1.
  EXPECT_EQ(Worked(2, 0.99f, 0.99f, 0.99f).emitted(), (std::vector<std::int32_t>{0, 2, 1}));
}

TEST(TraversalWorkedExample, PathAaAndWhatNodeZeroAbsorbs) {
  // w_1 = 0.05 / 0.5 = 0.1: (a, a) passes iff u_1 < 0.1.
  EXPECT_EQ(Worked(0, 0.99f, 0.09f, 0.99f).emitted(), (std::vector<std::int32_t>{0, 0, 1}));
  // Otherwise node 0 keeps R_0 = (0, 0, 2/7): it passes iff u_0 < 2/7 and emits (a, c).
  EXPECT_EQ(Worked(0, 0.28f, 0.11f, 0.99f).emitted(), (std::vector<std::int32_t>{0, 2}));
  // Otherwise the root keeps (0, 0.5, 0.5): node 2 = b has w_2 = 1 and is accepted, bonus c.
  Worked root_absorbs(0, 0.29f, 0.11f, 0.99f);
  EXPECT_EQ(root_absorbs.emitted(), (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(root_absorbs.t.node(0, 0), 2);
}

// ---------------------------------------------------------------------------------------------
// Acceptance: at least Standard's on trees (in expectation over the drafting), Block's on chains.

struct Acceptance {
  double mean = 0, sigma = 0;  // per tree, and the standard error of the mean
};

Acceptance summarise(const std::vector<double>& x) {
  double m = 0, v = 0;
  for (double a : x) m += a;
  m /= double(x.size());
  for (double a : x) v += (a - m) * (a - m);
  v /= double(x.size() - 1);
  return {m, std::sqrt(v / double(x.size()))};
}

/// Accepted tokens per tree of Standard and Traversal on the same drafted trees (Markov rows that
/// depend on the last token), and their paired difference.
std::vector<Acceptance> acceptance(const TreeShape& shape, std::int32_t V, std::int32_t trees, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Markov p = Markov::random(V, rng), q = Markov::random(V, rng);
  Trees t(V);
  for (std::int32_t b = 0; b < trees; ++b) {
    const DraftedTree d(p, q, shape, b % V, Drafted::sampled, rng);
    t.add_rows(d.parents, d.tokens, d.p, d.q);
  }
  verify(Standard{}, t.batch(), Randomness{3, 0}, t.output());
  const std::vector<std::int32_t> standard = t.accepted;
  verify(Traversal{}, t.batch(), Randomness{3, 0}, t.output());
  std::vector<double> s, r, d;
  for (std::size_t b = 0; b < standard.size(); ++b) {
    s.push_back(standard[b]);
    r.push_back(t.accepted[b]);
    d.push_back(double(t.accepted[b]) - standard[b]);
  }
  return {summarise(s), summarise(r), summarise(d)};
}

TEST(TraversalAcceptance, MoreThanStandardOnDeeperTrees) {
  for (const auto& [shape, name] : {std::pair{testing::full_tree(2, 2), "2x2"}, std::pair{testing::full_tree(2, 3), "2x3"},
                                    std::pair{testing::full_tree(3, 3), "3x3"}}) {
    const auto a = acceptance(shape, 8, 100000, 31);
    std::printf("tree %s, V 8: Standard %.4f, Traversal %.4f (%+.2f%% +- %.4f)\n", name, a[0].mean, a[1].mean,
                100 * a[2].mean / a[0].mean, a[2].sigma);
    EXPECT_GT(a[2].mean, 5 * a[2].sigma) << name;  // strictly more, far beyond chance
  }
}

TEST(TraversalAcceptance, StandardsEqualWithOneLevelOfChildren) {
  const auto a = acceptance(testing::full_tree(3, 1), 8, 100000, 33);
  EXPECT_NEAR(a[2].mean, 0.0, 5 * a[2].sigma);
}

TEST(TraversalAcceptance, ElevenNinthsOnTheWorkedChain) {
  // p = (1/3, 2/3), q = (2/3, 1/3) at every position, k = 2, drafts from q: Block's 11/9.
  const std::vector<float> p{1.0f / 3, 2.0f / 3}, q{2.0f / 3, 1.0f / 3};
  std::mt19937_64 rng(3);
  testing::Chains c(2);
  for (std::int32_t b = 0; b < 200000; ++b) c.add({testing::sample(q, rng), testing::sample(q, rng)}, {p, p, p}, {q, q});
  testing::Chains block = c;
  verify(Traversal{}, c.batch(), Randomness{9, 0}, c.output());
  verify(Block{}, block.batch(), Randomness{9, 0}, block.output());
  const Acceptance t = summarise(std::vector<double>(c.accepted.begin(), c.accepted.end()));
  const Acceptance k = summarise(std::vector<double>(block.accepted.begin(), block.accepted.end()));
  std::printf("worked chain: Traversal %.4f, Block %.4f (exact 11/9 = %.4f)\n", t.mean, k.mean, 11.0 / 9);
  EXPECT_NEAR(t.mean, 11.0 / 9, 5 * t.sigma);
  EXPECT_NEAR(k.mean, 11.0 / 9, 5 * k.sigma);
}

// ---------------------------------------------------------------------------------------------
// Logits rows: the same walk through the logits row source. Context-free rows make the target's
// sequence i.i.d. p, so the first 3 emitted tokens must follow p x p x p.

TEST(TraversalLogits, SequenceFollowsTheProcessedTarget) {
  constexpr std::int32_t V = 5;
  const TreeShape shape = testing::full_tree(2, 2);
  const std::int32_t N = std::int32_t(shape.size());
  const std::vector<float> target{1.2f, -0.3f, 0.4f, 2.0f, -1.0f}, draft{-0.5f, 0.9f, 0.4f, 0.1f, 1.5f};
  const SamplingParams tp{0.9f, 4, 0.95f, 0.0f}, dp{1.1f, 0, 1.0f, 0.0f};
  const std::vector<float> p = testing::library_processed(target, tp), q = testing::library_processed(draft, dp);
  ASSERT_EQ(p[4], 0.0f) << "top_k = 4 removes token 4";
  const std::vector<float> exact = testing::iid_joint3(p);
  std::mt19937_64 rng(3);
  std::vector<float> trows, drows;
  for (std::int32_t j = 0; j <= N; ++j) trows.insert(trows.end(), target.begin(), target.end());
  for (std::int32_t j = 0; j <= N; ++j) drows.insert(drows.end(), draft.begin(), draft.end());
  const auto chi = testing::prefix_chi_square(V, 3, 100000, exact, [&](const auto&, std::int64_t step) {
    std::vector<std::int32_t> drafts;
    for (std::int32_t j = 0; j < N; ++j) drafts.push_back(testing::sample(q, rng));
    const std::int32_t offsets[2] = {0, N};
    LogitsTreeBatch<float> batch;
    batch.batch_size = 1;
    batch.vocab_size = V;
    batch.node_offsets = offsets;
    batch.parents = shape.data();
    batch.draft_tokens = drafts.data();
    batch.target_logits = trows.data();
    batch.draft_logits = drows.data();
    batch.target_params = &tp;
    batch.draft_params = &dp;
    std::int32_t out[4], nodes[4], accepted = 0;
    verify(Traversal{}, batch, Randomness{21, std::uint64_t(step)}, TreeOutput{out, 4, &accepted, nodes});
    return std::vector<std::int32_t>(out, out + accepted + 1);
  });
  EXPECT_TRUE(chi.fits()) << "chi2 " << chi.statistic << " df " << chi.df;
}

// ---------------------------------------------------------------------------------------------
// Bad input: invalid_input before any write.

void expect_invalid(Trees& t, const char* message) {
  t.output();
  EXPECT_THAT([&] { verify(Traversal{}, t.batch(), t.randomness(), t.output()); },
              ::testing::ThrowsMessage<invalid_input>(::testing::HasSubstr(message)));
  t.output();
  try {
    verify(Traversal{}, t.batch(), t.randomness(), t.output());
  } catch (const invalid_input&) {
  }
  EXPECT_TRUE(t.untouched());
}

TEST(TraversalBadInput, OnlySampledChildrenWithDraftRows) {
  Trees t = testing::two_trees(Drafted::sampled_without_replacement);
  expect_invalid(t, "Traversal verification needs children drafted i.i.d. from q (Drafted::sampled, with draft rows); "
                    "this batch has Drafted::sampled_without_replacement");
  t.drafted = Drafted::deterministic;
  expect_invalid(t, "this batch has Drafted::deterministic");
  testing::Chains c(4, true);
  c.add({1}, {{0.25f, 0.25f, 0.25f, 0.25f}, {0.25f, 0.25f, 0.25f, 0.25f}});
  EXPECT_THAT([&] { verify(Traversal{}, c.batch(), Randomness{1, 0}, c.output()); },
              ::testing::ThrowsMessage<invalid_input>(::testing::HasSubstr("this batch has no draft rows (one-hot drafts)")));
  EXPECT_EQ(c.accepted[0], 12345);
}

TEST(TraversalBadInput, PathsDeeperThanTheFramesAreNamed) {
  constexpr std::int32_t V = 3, N = core::kTraversalDepth + 1;
  std::vector<std::int32_t> parents, tokens(std::size_t(N), 1);
  for (std::int32_t i = 0; i < N; ++i) parents.push_back(i - 1);
  const std::vector<float> row{0.25f, 0.5f, 0.25f}, other{0.5f, 0.25f, 0.25f};
  Trees t(V);
  t.add(parents, tokens, std::vector<std::vector<float>>(std::size_t(N) + 1, row),
        std::vector<std::vector<float>>(std::size_t(N) + 1, other));
  expect_invalid(t, "sequence 0, node 64: a path deeper than 64 nodes (Traversal verification keeps one frame per level");
  // One level less is walked.
  Trees ok(V);
  parents.pop_back();
  tokens.pop_back();
  ok.add(parents, tokens, std::vector<std::vector<float>>(std::size_t(N), row), std::vector<std::vector<float>>(std::size_t(N), other));
  EXPECT_NO_THROW(verify(Traversal{}, ok.batch(), ok.randomness(), ok.output()));
}

TEST(TraversalBadInput, BadTreesAreNamedLikeEveryTreeRule) {
  for (auto& c : testing::bad_trees()) {
    SCOPED_TRACE(c.name);
    try {
      verify(Traversal{}, c.batch(), c.trees.randomness(), c.trees.output());
      ADD_FAILURE() << "no invalid_input";
    } catch (const invalid_input& e) {
      for (const auto& part : c.fragments) EXPECT_THAT(e.what(), ::testing::HasSubstr(part));
    }
    EXPECT_TRUE(c.trees.untouched());
  }
}

}  // namespace
}  // namespace specverify
