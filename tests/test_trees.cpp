// Trees: exactness of the emitted sequence for every way children are drafted, chains given as
// trees, Greedy and the relaxed rules on trees, outputs (accepted nodes, logprobs), bad trees, and
// the vectorised residual kernel against the scalar definition.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "markov.hpp"
#include "specverify/core/overlay.hpp"
#include "specverify/cpu/logit_residual.hpp"
#include "tree_decode.hpp"
#include "trees.hpp"
#include "typical_acceptance.hpp"

namespace specverify {
namespace {

using testing::DraftedTree;
using testing::Markov;
using testing::TreeShape;
using testing::Trees;
using testing::decode_chi_square;
using testing::expect_path;
using testing::kRagged;
using testing::models;
using testing::Models;
using testing::tree_step;
using testing::tree_steps;

void expect_exact(const Models& m, const TreeShape& shape, Drafted how, std::int64_t trials = 150000) {
  const auto chi = decode_chi_square(m.p, m.q, shape, how, how, testing::repeats(trials));
  EXPECT_TRUE(chi.fits()) << "chi2 " << chi.statistic << " df " << chi.df;
}

TEST(TreeExactness, SampledFull3x2) { expect_exact(models(4, false), testing::full_tree(3, 2), Drafted::sampled); }
TEST(TreeExactness, SampledFull3x2Adversarial) {
  expect_exact(models(4, true), testing::full_tree(3, 2), Drafted::sampled);
}
TEST(TreeExactness, SampledFull2x3Adversarial) {
  expect_exact(models(5, true), testing::full_tree(2, 3), Drafted::sampled);
}
TEST(TreeExactness, SampledRagged) { expect_exact(models(5, false), kRagged, Drafted::sampled); }
TEST(TreeExactness, WithoutReplacementFull3x2) {
  expect_exact(models(4, false), testing::full_tree(3, 2), Drafted::sampled_without_replacement);
}
TEST(TreeExactness, WithoutReplacementRaggedAdversarial) {
  expect_exact(models(5, true), kRagged, Drafted::sampled_without_replacement);
}
TEST(TreeExactness, DeterministicFull3x2) {
  expect_exact(models(4, false), testing::full_tree(3, 2), Drafted::deterministic);
}
TEST(TreeExactness, DeterministicRaggedAdversarial) { expect_exact(models(5, true), kRagged, Drafted::deterministic); }

// Sampled children with replacement repeat tokens often under a peaked q: the rule must count a
// rejected duplicate's q again (r <- norm(max(r - q, 0)) once per sibling).
TEST(TreeExactness, SampledDuplicatesUnderPeakedDraft) {
  expect_exact(testing::peaked_draft_models(), testing::full_tree(3, 2), Drafted::sampled);
}

// Negative controls: a wrong Drafted is the caller's error, and the test must see its bias.
TEST(TreeExactness, NegativeControlTopKDeclaredSampled) {
  const Models m = models(4, false);
  EXPECT_FALSE(decode_chi_square(m.p, m.q, testing::full_tree(3, 2), Drafted::deterministic, Drafted::sampled, 150000).fits());
}
TEST(TreeExactness, NegativeControlWithoutReplacementDeclaredSampled) {
  const Models m = models(4, false);
  EXPECT_FALSE(decode_chi_square(m.p, m.q, testing::full_tree(3, 2), Drafted::sampled_without_replacement,
                                 Drafted::sampled, 150000).fits());
}

/// A plain reference of Standard on one tree (docs/api.md "Trees", in double, renormalising the
/// residual at every step), with caller uniforms. `shortcut` plants a bug engines have shipped:
/// on rejection subtract q only at the tried token.
std::vector<std::int32_t> reference_step(const DraftedTree& t, std::int32_t V, Drafted how,
                                         const std::vector<float>& accept_u, float sample_u, bool shortcut) {
  const auto row = [&](const std::vector<float>& rows, std::int32_t node) {
    return std::vector<double>(rows.begin() + std::ptrdiff_t(node + 1) * V, rows.begin() + std::ptrdiff_t(node + 2) * V);
  };
  const auto draw = [&](const std::vector<double>& w, float u) {
    double total = 0, before = 0;
    for (double x : w) total += x;
    std::int32_t last = -1;
    for (std::int32_t v = 0; v < V; ++v) {
      if (w[std::size_t(v)] <= 0) continue;
      before += w[std::size_t(v)];
      last = v;
      if (before > u * total) return v;
    }
    return last;
  };
  std::vector<std::int32_t> emitted;
  for (std::int32_t node = -1;;) {
    std::vector<double> r = row(t.p, node);
    const std::vector<double> q = row(t.q, node);
    std::vector<std::int32_t> children;
    for (std::int32_t i = 0; i < std::int32_t(t.parents.size()); ++i) {
      if (t.parents[std::size_t(i)] == node) children.push_back(i);
    }
    std::vector<bool> removed(std::size_t(V), false);
    std::int32_t next = -1;
    for (std::int32_t c : children) {
      const std::int32_t x = t.tokens[std::size_t(c)];
      std::vector<double> qi(std::size_t(V), 0.0);
      double kept = 0;
      for (std::int32_t v = 0; v < V; ++v) kept += removed[std::size_t(v)] ? 0.0 : q[std::size_t(v)];
      for (std::int32_t v = 0; v < V; ++v) {
        if (how == Drafted::deterministic) qi[std::size_t(v)] = v == x;
        else if (how == Drafted::sampled) qi[std::size_t(v)] = q[std::size_t(v)];
        else qi[std::size_t(v)] = removed[std::size_t(v)] ? 0.0 : q[std::size_t(v)] / kept;
      }
      if (accept_u[std::size_t(c)] * qi[std::size_t(x)] < r[std::size_t(x)]) {
        next = c;
        break;
      }
      std::vector<double> after = r;
      for (std::int32_t v = 0; v < V; ++v) {
        if (!shortcut || v == x) after[std::size_t(v)] = std::max(r[std::size_t(v)] - qi[std::size_t(v)], 0.0);
      }
      double z = 0;
      for (double w : after) z += w;
      if (z > 0) {
        for (auto& w : after) w /= z;
        r = after;
      }
      removed[std::size_t(x)] = true;
    }
    if (next < 0) {
      emitted.push_back(draw(r, sample_u));
      return emitted;
    }
    emitted.push_back(t.tokens[std::size_t(next)]);
    node = next;
    if (std::find(t.parents.begin(), t.parents.end(), node) == t.parents.end()) {
      emitted.push_back(draw(row(t.p, node), sample_u));
      return emitted;
    }
  }
}

// The reference gives the library's tokens, uniform for uniform, for every Drafted.
TEST(TreeReference, LibraryMatchesReferenceTokenForToken) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
    std::int32_t mismatches = 0, trees = 0;
    for (std::int32_t trial = 0; trial < 3000; ++trial, ++trees) {
      const std::int32_t V = 5;
      const Markov p = Markov::random(V, rng), q = trial % 2 ? p.reversed() : Markov::random(V, rng);
      const DraftedTree t(p, q, trial % 3 ? kRagged : testing::full_tree(3, 2), std::int32_t(trial % V), how, rng);
      std::vector<float> accept_u(t.tokens.size());
      for (auto& u : accept_u) u = uniform(rng);
      const float sample_u = uniform(rng);
      const std::int32_t offsets[2] = {0, std::int32_t(t.tokens.size())};
      const auto batch = t.batch(V, offsets, how);
      std::vector<std::int32_t> out(static_cast<std::size_t>(t.depth + 1));
      std::int32_t accepted = 0;
      Randomness randomness;
      randomness.accept_uniforms = accept_u.data();
      randomness.sample_uniforms = &sample_u;
      verify(Standard{}, batch, randomness, TreeOutput{out.data(), t.depth + 1, &accepted});
      const auto expected = reference_step(t, V, how, accept_u, sample_u, false);
      const bool differ = std::vector<std::int32_t>(out.begin(), out.begin() + accepted + 1) != expected;
      mismatches += differ;
    }
    EXPECT_EQ(mismatches, 0) << "of " << trees << " trees, Drafted " << int(how);
  }
}

/// Decode loop with the reference verifier, exact or with the planted shortcut.
testing::ChiSquare reference_chi_square(const Models& m, bool shortcut) {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  return testing::prefix_chi_square(m.p.V, 3, 150000, m.p.joint(3), [&](const auto& context, std::int64_t) {
    const DraftedTree t(m.p, m.q, testing::full_tree(3, 2), context.empty() ? -1 : context.back(), Drafted::sampled, rng);
    std::vector<float> accept_u(t.tokens.size());
    for (auto& u : accept_u) u = uniform(rng);
    return reference_step(t, m.p.V, Drafted::sampled, accept_u, uniform(rng), shortcut);
  });
}

TEST(TreeReference, ExactResidualFits) {
  const auto chi = reference_chi_square(models(4, false), false);
  EXPECT_TRUE(chi.fits()) << "chi2 " << chi.statistic << " df " << chi.df;
}
// A known failure of other implementations: subtracting q only at the tried token is exact only for one-hot q.
TEST(TreeReference, NegativeControlShortcutResidualFails) {
  const auto chi = reference_chi_square(models(4, false), true);
  EXPECT_FALSE(chi.fits()) << "chi2 " << chi.statistic << " df " << chi.df;
}

// ---- A chain given as a tree gives the chain's tokens, for every rule.

template <class Rule>
void expect_chain_equals_tree(const Rule& rule, bool one_hot) {
  std::mt19937_64 rng(17);
  for (std::int32_t trial = 0; trial < 150; ++trial) {
    const std::int32_t V = 1 + std::int32_t(rng() % 40), B = 1 + std::int32_t(rng() % 5);
    testing::Chains chains(V, one_hot);
    Trees trees(V, one_hot ? Drafted::deterministic : Drafted::sampled);
    const auto row = [&] {
      auto r = testing::random_distribution(V, rng, 1.0 + double(rng() % 4));
      for (auto& v : r) if (rng() % 5 == 0) v = 0.0f;  // masked tokens
      if (*std::max_element(r.begin(), r.end()) == 0.0f) r[rng() % std::size_t(V)] = 1.0f;
      return r;
    };
    for (std::int32_t b = 0; b < B; ++b) {
      const std::int32_t k = std::int32_t(rng() % 6);
      std::vector<std::vector<float>> ps, qs;
      std::vector<std::int32_t> xs, parents;
      for (std::int32_t j = 0; j <= k; ++j) ps.push_back(row());
      for (std::int32_t j = 0; j < k; ++j) {
        qs.push_back(row());
        xs.push_back(rng() % 3 ? testing::sample(qs.back(), rng) : std::int32_t(rng() % std::uint64_t(V)));
        parents.push_back(j - 1);
      }
      chains.add(xs, ps, qs);
      auto tree_q = qs;
      tree_q.push_back(row());  // the last node has no children: its draft row is never read
      trees.add(parents, xs, ps, tree_q);
    }
    trees.width = chains.width;
    const auto tree_out = trees.output();
    ChainOutput chain_out = chains.output();
    std::vector<float> chain_logprobs(chains.out_tokens.size(), 777.0f);
    chain_out.logprobs = chain_logprobs.data();
    const Randomness randomness{1234, std::uint64_t(trial)};
    const VerifyStats a = verify(rule, chains.batch(), randomness, chain_out);
    const VerifyStats t = verify(rule, trees.batch(), randomness, tree_out);
    ASSERT_EQ(chains.out_tokens, trees.out_tokens) << "trial " << trial;
    ASSERT_EQ(chains.accepted, trees.accepted);
    ASSERT_EQ(chain_logprobs, trees.logprobs);
    EXPECT_EQ(a.accepted, t.accepted);
    EXPECT_EQ(a.relaxed, t.relaxed);
    EXPECT_EQ(a.target_checked, t.target_checked);
  }
}

/// Scores for Sprinter, indexed like draft tokens; every batch above has at most 5 * 5 drafts.
const std::vector<float>& sprinter_scores() {
  static const std::vector<float> scores = [] {
    std::vector<float> s(64);
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = float((i * 37) % 11) / 10.0f;
    return s;
  }();
  return scores;
}

template <class Rule>
void chain_equals_tree_both(const Rule& rule) {
  expect_chain_equals_tree(rule, false);
  expect_chain_equals_tree(rule, true);
}

TEST(ChainAsTree, Standard) { chain_equals_tree_both(Standard{}); }
TEST(ChainAsTree, Greedy) { chain_equals_tree_both(Greedy{}); }
TEST(ChainAsTree, Ears) { chain_equals_tree_both(Ears{0.3f}); }
TEST(ChainAsTree, Fsd) { chain_equals_tree_both(Fsd{Divergence::js, 0.2f}); }
TEST(ChainAsTree, ReducibleFsd) { chain_equals_tree_both(ReducibleFsd{Divergence::tv, 0.4f}); }
TEST(ChainAsTree, Sprinter) { chain_equals_tree_both(Sprinter{0.5f, sprinter_scores().data()}); }
TEST(ChainAsTree, TypicalAcceptance) { chain_equals_tree_both(TypicalAcceptance{}); }

// ---- Greedy on trees.

TEST(TreeGreedy, FollowsTheChildEqualToArgmaxLowestIndexOnTies) {
  // Root p ties tokens 1 and 2; children: 2 (not the lowest argmax), 1, 1 (a duplicate, later).
  // Node 1's p has argmax 3, which its second child carries.
  const std::vector<float> root = {0.1f, 0.35f, 0.35f, 0.2f}, after1 = {0.2f, 0.1f, 0.3f, 0.4f},
                           bonus = {0.25f, 0.25f, 0.25f, 0.25f}, u = {0.25f, 0.25f, 0.25f, 0.25f};
  Trees t(4, Drafted::deterministic);
  t.add({-1, -1, -1, 1, 1}, {2, 1, 1, 0, 3}, {root, u, after1, u, u, bonus}, {u, u, u, u, u, u});
  const TreeOutput out = t.output();
  verify(Greedy{}, t.batch(), t.randomness(), out);
  EXPECT_EQ(t.accepted[0], 2);
  EXPECT_EQ(t.token(0, 0), 1);
  EXPECT_EQ(t.node(0, 0), 1);
  EXPECT_EQ(t.token(0, 1), 3);
  EXPECT_EQ(t.node(0, 1), 4);
  EXPECT_EQ(t.token(0, 2), 0);  // the bonus row's argmax: all tie, lowest index
}

// A known failure of other implementations: tree output at T = 0 must equal plain greedy decoding, ties included.
TEST(TreeGreedy, EqualsPlainGreedyDecodingOnTies) {
  std::mt19937_64 rng(9);
  constexpr std::int32_t V = 5, kLength = 10;
  Markov p{V, {}};
  for (std::int32_t i = 0; i <= V; ++i) {  // quantised rows: ties at the top are common
    std::vector<float> r(V);
    for (auto& v : r) v = float(1 + rng() % 3);
    float sum = 0;
    for (float v : r) sum += v;
    for (auto& v : r) v /= sum;
    p.rows.push_back(r);
  }
  std::vector<std::int32_t> greedy;
  for (std::int32_t prev = -1; std::int32_t(greedy.size()) < kLength;) {
    const auto& r = p.row(prev);
    prev = std::int32_t(std::max_element(r.begin(), r.end()) - r.begin());
    greedy.push_back(prev);
  }
  const Markov q = Markov::random(V, rng);
  for (Drafted how : {Drafted::sampled, Drafted::deterministic}) {
    for (std::int32_t trial = 0; trial < 100; ++trial) {
      std::vector<std::int32_t> emitted;
      for (std::int32_t step = 0; std::int32_t(emitted.size()) < kLength; ++step) {
        const auto tokens = tree_step(p, q, emitted, kRagged, how, how, 5, std::uint64_t(trial * 100 + step), rng, Greedy{});
        emitted.insert(emitted.end(), tokens.begin(), tokens.end());
      }
      emitted.resize(kLength);
      ASSERT_EQ(emitted, greedy) << "trial " << trial;
    }
  }
}

// ---- Relaxed rules on trees: what each child's test sees.

/// Records every Position a rule is asked about.
template <class Inner>
struct Spy {
  Inner inner;
  std::vector<Position>* seen;
  static constexpr Draw on_reject = rule_traits<Inner>::on_reject;
  static constexpr Draw on_bonus = rule_traits<Inner>::on_bonus;
  RowStats stats() const { return rule_traits<Inner>::stats(inner); }
  Decision decide(const Position& at) const {
    seen->push_back(at);
    return inner.decide(at);
  }
};

/// Root p = (0.5, 0.3, 0.2, 0), q = (0.2, 0.5, 0.1, 0.2); root children 1, 3, 0 with accept
/// uniforms 0.9, 0.5, 0.99 (node 0 and 1 fail the standard test, node 2 passes it).
Trees worked_tree(Drafted how) {
  const std::vector<float> p = {0.5f, 0.3f, 0.2f, 0.0f}, q = {0.2f, 0.5f, 0.1f, 0.2f}, u(4, 0.25f);
  Trees t(4, how);
  t.add({-1, -1, -1}, {1, 3, 0}, {p, u, u, u}, {q, u, u, u});
  t.accept_u = {0.9f, 0.5f, 0.99f};
  t.sample_u = {0.5f};
  return t;
}

template <class Rule>
std::vector<Position> spy(const Rule& rule, Trees& t) {
  std::vector<Position> seen;
  const TreeOutput out = t.output();
  verify(Spy<Rule>{rule, &seen}, t.batch(), t.randomness(), out);
  return seen;
}

void expect_seen(const std::vector<Position>& seen, const std::vector<float>& p_x, const std::vector<float>& q_x) {
  ASSERT_EQ(seen.size(), p_x.size());
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_NEAR(seen[i].p_x, p_x[i], 1e-6) << "child " << i;
    EXPECT_NEAR(seen[i].q_x, q_x[i], 1e-6) << "child " << i;
    EXPECT_EQ(seen[i].index, std::int32_t(i));
  }
}

TEST(TreeRelaxed, EarsSeesTheResidualAndTheNodesMax) {
  // Sampled: r2 = max(p - q, 0) / 0.4 = (0.75, 0, 0.25, 0); r3 = max(r2 - q, 0) / 0.7.
  Trees t = worked_tree(Drafted::sampled);
  const auto seen = spy(Ears{0.1f}, t);
  expect_seen(seen, {0.3f, 0.0f, 0.55f / 0.7f}, {0.5f, 0.2f, 0.2f});
  for (const auto& at : seen) EXPECT_EQ(at.p_max, 0.5f);  // the node's p, not the residual's
  EXPECT_EQ(t.accepted[0], 1);
  EXPECT_EQ(t.node(0, 0), 2);
}

TEST(TreeRelaxed, WithoutReplacementSeesRenormalisedDraft) {
  // q_2 = q without token 1, renormalised: (0.4, 0, 0.2, 0.4); r3 = max(r2 - q_2, 0) / 0.4 =
  // (0.875, 0, 0.125, 0); q_3 = q without {1, 3}: (2/3, 0, 1/3, 0).
  Trees t = worked_tree(Drafted::sampled_without_replacement);
  expect_seen(spy(ReducibleFsd{Divergence::tv, 0.3f}, t), {0.3f, 0.0f, 0.875f}, {0.5f, 0.4f, 2.0f / 3.0f});
}

// A peaked float q whose first sibling holds q = 1.0f exactly: q_2 must be q renormalised by the
// mass the row has left (2/3 at token 2), not by 1 - q(c_1) = 0 (which made q_2 = 0 and accepted
// the second child for sure).
TEST(TreeRelaxed, WithoutReplacementRenormalisesByTheRowsMass) {
  const std::vector<float> p = {0.2f, 0.5f, 0.3f}, q = {1e-9f, 1.0f, 2e-9f}, u(3, 1.0f / 3);
  Trees t(3, Drafted::sampled_without_replacement);
  t.add({-1, -1}, {1, 2}, {p, u, u}, {q, u, u});
  t.accept_u = {0.99f, 0.95f};  // r(2) = 0.6 after rejecting token 1: 0.95 * 2/3 > 0.6
  t.sample_u = {0.5f};
  const auto seen = spy(Standard{}, t);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NEAR(seen[1].q_x, 2.0f / 3.0f, 1e-6);
  EXPECT_NEAR(seen[1].p_x, 0.6f, 1e-6);
  EXPECT_EQ(t.accepted[0], 0);
}

TEST(TreeRelaxed, DeterministicSeesOneHotDraftAndTargetOnlyResidual) {
  // r2 = p without token 1: (5/7, 0, 2/7, 0); removing token 3 (mass 0) leaves it.
  Trees t = worked_tree(Drafted::deterministic);
  expect_seen(spy(Ears{0.1f}, t), {0.3f, 0.0f, 5.0f / 7.0f}, {1.0f, 1.0f, 1.0f});
}

TEST(TreeRelaxed, FsdSeesTheNodesDivergenceAndPlainP) {
  // TV(p, q) = (0.3 + 0.2 + 0.1 + 0.2) / 2 = 0.4 > 0.3: every child rejected, extra from p.
  Trees t = worked_tree(Drafted::sampled);
  const auto seen = spy(Fsd{Divergence::tv, 0.3f}, t);
  expect_seen(seen, {0.3f, 0.0f, 0.5f}, {0.5f, 0.2f, 0.2f});
  for (const auto& at : seen) EXPECT_NEAR(at.divergence, 0.4f, 1e-6);
  EXPECT_EQ(t.accepted[0], 0);
  // rFSD: the node's divergence, the residual's p(x).
  Trees r = worked_tree(Drafted::sampled);
  const auto rseen = spy(ReducibleFsd{Divergence::tv, 0.3f}, r);
  expect_seen(rseen, {0.3f, 0.0f, 0.55f / 0.7f}, {0.5f, 0.2f, 0.2f});
  for (const auto& at : rseen) EXPECT_NEAR(at.divergence, 0.4f, 1e-6);
}

TEST(TreeRelaxed, EarsPardonUsesTheResidual) {
  // Child 0: u q = 0.45 against r(1) + beta (1 - max p) q = 0.3 + 0.25 * 0.5 = 0.425 with
  // beta = 0.5: rejected. With beta = 0.7, 0.3 + 0.35 * 0.5 = 0.475: pardoned, relaxed.
  Trees t = worked_tree(Drafted::sampled);
  const TreeOutput out = t.output();
  EXPECT_EQ(verify(Ears{0.5f}, t.batch(), t.randomness(), out).relaxed, 0);
  EXPECT_EQ(t.node(0, 0), 2);
  const VerifyStats s = verify(Ears{0.7f}, t.batch(), t.randomness(), out);
  EXPECT_EQ(s.relaxed, 1);
  EXPECT_EQ(t.node(0, 0), 0);
}

/// Random ragged trees over rows with masked (zero) tokens, children often on masked tokens.
template <class Rule>
void expect_no_masked_token(const Rule& rule) {
  std::mt19937_64 rng(23);
  for (std::int32_t trial = 0; trial < 300; ++trial) {
    const std::int32_t V = 6;
    const Drafted how = static_cast<Drafted>(trial % 3);
    Trees t(V, how);
    for (std::int32_t b = 0; b < 3; ++b) {
      std::vector<std::vector<float>> ps, qs;
      for (std::size_t i = 0; i <= kRagged.size(); ++i) {
        auto p = testing::random_distribution(V, rng);
        for (std::int32_t v = 0; v < V / 2; ++v) p[rng() % V] = 0.0f;
        if (*std::max_element(p.begin(), p.end()) == 0.0f) p[0] = 1.0f;
        ps.push_back(p);
        qs.push_back(testing::random_distribution(V, rng));
      }
      std::vector<std::int32_t> xs;
      for (std::size_t i = 0; i < kRagged.size(); ++i) xs.push_back(std::int32_t(rng() % V));
      t.add(kRagged, xs, ps, qs);
    }
    const TreeOutput out = t.output();
    verify(rule, t.batch(), Randomness{7, std::uint64_t(trial)}, out);
    for (std::int32_t b = 0; b < t.size(); ++b) {
      const std::int32_t n = t.accepted[std::size_t(b)];
      for (std::int32_t i = 0; i <= n; ++i) {
        const std::int32_t from = i == 0 ? -1 : t.node(b, i - 1);  // the node whose row emitted it
        const std::int64_t row = t.offsets[std::size_t(b)] + b + from + 1;
        ASSERT_GT(t.p[std::size_t(row * V + t.token(b, i))], 0.0f) << "trial " << trial << " b " << b << " i " << i;
      }
    }
  }
}

TEST(TreeRelaxed, NoRuleEmitsAMaskedToken) {
  const std::vector<float> ones(64, 1.0f);
  expect_no_masked_token(Ears{100.0f});
  expect_no_masked_token(Fsd{Divergence::tv, 100.0f});
  expect_no_masked_token(ReducibleFsd{Divergence::tv, 100.0f});
  expect_no_masked_token(Sprinter{0.0f, ones.data()});
  expect_no_masked_token(TypicalAcceptance{0.0f, 0.0f});
  expect_no_masked_token(Greedy{});
  expect_no_masked_token(Standard{});
}

// ---- Outputs: accepted nodes and logprobs.

TEST(TreeOutputs, AcceptedNodesAndLogprobsFollowTheRowsEmittedFrom) {
  std::mt19937_64 rng(31);
  for (std::int32_t trial = 0; trial < 200; ++trial) {
    const std::int32_t V = 5;
    const Drafted how = static_cast<Drafted>(trial % 3);
    const Markov p = Markov::random(V, rng), q = Markov::random(V, rng);
    Trees t(V);
    t.drafted = how;
    for (std::int32_t b = 0; b < 4; ++b) {
      const DraftedTree d(p, q, b % 2 ? kRagged : testing::full_tree(2, 3), b, how, rng);
      std::vector<std::vector<float>> ps, qs;
      for (std::size_t r = 0; r <= d.tokens.size(); ++r) {
        ps.emplace_back(d.p.begin() + std::ptrdiff_t(r * V), d.p.begin() + std::ptrdiff_t((r + 1) * V));
        qs.emplace_back(d.q.begin() + std::ptrdiff_t(r * V), d.q.begin() + std::ptrdiff_t((r + 1) * V));
      }
      t.add(d.parents, d.tokens, ps, qs);
    }
    t.width += trial % 2;  // a wider row: its extra slots must be padded too
    const TreeOutput out = t.output();
    verify(Standard{}, t.batch(), Randomness{3, std::uint64_t(trial)}, out);
    for (std::int32_t b = 0; b < t.size(); ++b) {
      const std::int32_t first = t.offsets[std::size_t(b)], n = t.accepted[std::size_t(b)];
      const std::vector<std::int32_t> parents(t.parents.begin() + first, t.parents.begin() + t.offsets[std::size_t(b) + 1]);
      const std::vector<std::int32_t> tokens(t.tokens.begin() + first, t.tokens.begin() + t.offsets[std::size_t(b) + 1]);
      expect_path(parents, tokens, t.out_tokens.data() + std::size_t(b) * t.width,
                  t.nodes.data() + std::size_t(b) * t.width, n, t.width);
      for (std::int32_t i = 0; i < t.width; ++i) {
        const float logprob = t.logprobs[std::size_t(b) * t.width + i];
        if (i > n) {
          EXPECT_EQ(logprob, 777.0f);  // kNoToken slots: left as they were
          continue;
        }
        const std::int32_t from = i == 0 ? -1 : t.node(b, i - 1);
        const float p_token = t.p[std::size_t((first + b + from + 1) * V + t.token(b, i))];
        EXPECT_EQ(logprob, float(std::log(double(p_token)))) << "b " << b << " i " << i;
      }
    }
  }
}

TEST(ChainOutputs, LogprobsFollowTheRowsEmittedFrom) {
  std::mt19937_64 rng(37);
  testing::Chains c(50);
  for (std::int32_t b = 0; b < 40; ++b) testing::add_aligned_chain(c, std::int32_t(rng() % 6), 1.0, rng);
  ChainOutput out = c.output();
  std::vector<float> logprobs(c.out_tokens.size(), 777.0f);
  out.logprobs = logprobs.data();
  verify(Standard{}, c.batch(), Randomness{5, 0}, out);
  for (std::int32_t b = 0; b < c.size(); ++b) {
    const std::int32_t n = c.accepted[std::size_t(b)];
    for (std::int32_t i = 0; i < c.width; ++i) {
      const float logprob = logprobs[std::size_t(b) * c.width + i];
      if (i > n) {
        EXPECT_EQ(logprob, 777.0f);
        continue;
      }
      const float p_token = c.p[std::size_t((c.offsets[std::size_t(b)] + b + i) * c.V + c.token(b, i))];
      EXPECT_EQ(logprob, float(std::log(double(p_token))));
    }
  }
}

// ---- Wide nodes: a node may have as many children as its tree has nodes.

// A root with 120 children whose tokens p gives nothing: every residual rule rejects each of them,
// absorbing it into the residual, and draws the extra token from the rest of p, for every
// Drafted, on probability and logits rows. (A fixed room of 64 siblings once refused this.)
template <class Rule>
void expect_wide_root_rejects_every_child(const Rule& rule, const char* name) {
  constexpr std::int32_t V = 200, n = 120;
  std::vector<float> p(V, 0.0f), q(V, 1.0f / V), logits(V, -INFINITY), q_logits(V, 0.0f);
  for (std::int32_t v = n; v < V; ++v) p[std::size_t(v)] = 1.0f / (V - n), logits[std::size_t(v)] = 0.0f;
  std::vector<std::int32_t> parents(n, -1), tokens(n);
  std::iota(tokens.begin(), tokens.end(), 0);
  for (Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
    Trees t(V, how);
    t.add(parents, tokens, std::vector<std::vector<float>>(n + 1, p), std::vector<std::vector<float>>(n + 1, q));
    std::vector<float> target_logits, draft_logits;
    for (std::int32_t r = 0; r <= n; ++r) {
      target_logits.insert(target_logits.end(), logits.begin(), logits.end());
      draft_logits.insert(draft_logits.end(), q_logits.begin(), q_logits.end());
    }
    const SamplingParams params;
    LogitsTreeBatch<float> logit_batch;
    logit_batch.batch_size = 1;
    logit_batch.vocab_size = V;
    logit_batch.node_offsets = t.offsets.data();
    logit_batch.parents = t.parents.data();
    logit_batch.draft_tokens = t.tokens.data();
    logit_batch.target_logits = target_logits.data();
    logit_batch.draft_logits = t.with_q ? draft_logits.data() : nullptr;
    logit_batch.target_params = &params;
    logit_batch.drafted = how;
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      for (const bool from_logits : {false, true}) {
        const TreeOutput out = t.output();
        try {
          if (from_logits) {
            verify(rule, logit_batch, t.randomness(seed), out);
          } else {
            verify(rule, t.batch(), t.randomness(seed), out);
          }
        } catch (const invalid_input& e) {
          ADD_FAILURE() << name << " Drafted " << int(how) << " seed " << seed << ": " << e.what();
          continue;
        }
        const std::string where = std::string(name) + " Drafted " + std::to_string(int(how)) + " seed " +
                                  std::to_string(seed) + (from_logits ? " logits" : " probabilities");
        EXPECT_EQ(t.accepted[0], 0) << where;
        EXPECT_GE(t.token(0, 0), n) << where;
        EXPECT_LT(t.token(0, 0), V) << where;
        EXPECT_NEAR(t.logprobs[0], std::log(1.0f / (V - n)), 1e-5) << where;
      }
    }
  }
}

TEST(WideTrees, EveryResidualRuleRejectsAHundredAndTwentyChildrenOfOneNode) {
  const std::vector<float> scores(120, 0.0f);  // below eta: every child gets SPRINTER's fallback test
  expect_wide_root_rejects_every_child(Standard{}, "Standard");
  expect_wide_root_rejects_every_child(Ears{0.3f}, "Ears");
  expect_wide_root_rejects_every_child(ReducibleFsd{Divergence::tv, 0.5f}, "ReducibleFsd");
  expect_wide_root_rejects_every_child(Sprinter{0.5f, scores.data()}, "Sprinter");
}

// ---- Bad trees (tests/support/trees.hpp, shared with the CUDA suite).

TEST(BadTrees, InvalidInputNamesTheFaultAndWritesNothing) {
  for (Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement}) {
    for (auto& bad : testing::bad_trees(how)) {
      const TreeOutput out = bad.trees.output();
      try {
        verify(Standard{}, bad.batch(), bad.trees.randomness(), out);
        ADD_FAILURE() << bad.name << ": no invalid_input";
      } catch (const invalid_input& e) {
        for (const auto& part : bad.fragments) {
          EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << bad.name << ": " << e.what();
        }
      }
      EXPECT_TRUE(bad.trees.untouched()) << bad.name;
    }
  }
}

TEST(BadTrees, TheUnbrokenBatchIsValid) {
  for (Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
    Trees t = testing::two_trees(how);
    const TreeOutput out = t.output();
    EXPECT_NO_THROW(verify(Standard{}, t.batch(), t.randomness(), out));
  }
}

// ---- The residual kernel against the scalar definition (core::residual_mass / residual_draw).

TEST(ResidualKernel, MatchesTheScalarDefinition) {
  std::mt19937_64 rng(41);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::int32_t draws = 0, mismatches = 0;
  for (std::int32_t n : {1, 7, 16, 17, 33, 1000, 1041, 3000, 70001}) {
    const cpu::Rows<> rows{n};
    for (Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
      for (std::int32_t trial = 0; trial < (n > 5000 ? 3 : 20); ++trial) {
        auto p = testing::random_distribution(n, rng), q = testing::random_distribution(n, rng);
        if (trial % 4 == 1) q = p;  // no mass left after a sibling
        for (std::int32_t i = 0; i < n / 3; ++i) p[rng() % std::size_t(n)] = 0.0f;
        core::Residual<const float*> r;
        r.p = p.data();
        r.q = q.data();
        r.has_q = how != Drafted::deterministic;
        r.drafted = how;
        cpu::SiblingRoom room;
        r.siblings = room.siblings(4);
        // Siblings absorbed as the walk does it: the kernel's mass, compared on the way: one
        // weight definition and FixedSum sums, so the same bits.
        const std::int32_t steps = std::int32_t(rng() % 5);
        for (std::int32_t s = 0; s < steps; ++s) {
          const std::int32_t x = std::int32_t(rng() % std::uint64_t(n));
          const auto z = cpu::residual_mass<>(r, x, n);
          const auto scalar = core::residual_mass(rows, r, x);
          ASSERT_TRUE(z.ok);
          EXPECT_EQ(z.value, scalar.value) << n << " step " << s;
          if (z.value > 0) r.absorb(rows, x, z.value);
        }
        for (std::int32_t x : {std::int32_t(kNoToken), std::int32_t(rng() % std::uint64_t(n))}) {
          const auto scalar = core::residual_mass(rows, r, x);
          const auto vector = cpu::residual_mass<>(r, x, n);
          ASSERT_TRUE(scalar.ok && vector.ok);
          EXPECT_EQ(vector.value, scalar.value) << n;
          for (float u : {0.0f, 0x1.fffffep-1f, uniform(rng), uniform(rng), uniform(rng), uniform(rng)}) {
            ++draws;
            const auto a = core::residual_draw(rows, r, x, u);
            const auto b = cpu::residual_draw<>(r, x, u, n);
            mismatches += a.value != b.value || !b.ok;
          }
        }
        if (how != Drafted::deterministic || trial % 2) {  // an invalid value anywhere is seen
          // A row does not change during a walk, so a node's later passes may rely on its first
          // pass's check: the changed row goes to a residual of its own.
          const core::Residual<const float*> fresh = r;
          (trial % 2 ? p : q)[rng() % std::size_t(n)] = trial % 3 ? std::nanf("") : -1.0f;
          EXPECT_FALSE(cpu::residual_mass<>(fresh, kNoToken, n).ok);
          EXPECT_FALSE(cpu::residual_draw<>(fresh, 0, 0.5f, n).ok);
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << draws << " draws";
}


/// One-hot drafts: a node's later masses and its draw come from the row's summary (chunk sums
/// less the rejected tokens' terms) where the rows keep one. They must give the bits of a pass
/// over the weights and of the scalar definition, for rejected tokens repeated, in one chunk or
/// many, at the row's edges, and on rows scaled out of FixedSum's domain; a summary that forgets
/// to take a token back from its chunk (the planted fault) must be caught.
TEST(ResidualKernel, OneHotSummaryGivesThePassesBits) {
  std::mt19937_64 rng(43);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::int32_t checks = 0, mismatches = 0, planted = 0, tries = 0;
  for (std::int32_t n : {1, 17, 1041, 3000, 70001}) {
    const cpu::Rows<> rows{n};
    for (std::int32_t trial = 0; trial < 12; ++trial) {
      auto p = testing::random_distribution(n, rng);
      if (trial % 3 == 1) {
        for (auto& v : p) v *= 4096.0f;  // outside the domain: summed at a scale
      }
      if (trial % 3 == 2) {
        for (auto& v : p) v *= 0x1p-40f;  // below 2^-32: scaled up
      }
      const std::int32_t steps = 1 + std::int32_t(rng() % 12);
      std::vector<std::int32_t> tokens;
      for (std::int32_t s = 0; s < steps; ++s) {
        const std::int32_t pick = std::int32_t(rng() % 4);
        tokens.push_back(pick == 0 && s > 0 ? tokens[rng() % tokens.size()]  // a repeated child
                         : pick == 1 ? (s % 2 ? 0 : n - 1)                      // the row's edges
                                     : std::int32_t(rng() % std::uint64_t(n)));
      }
      cpu::SiblingRoom summarised, passes;
      core::Residual<const float*> a, b;  // a: the summary's path (room over the vocabulary)
      a.p = b.p = p.data();
      a.drafted = b.drafted = Drafted::deterministic;
      a.siblings = summarised.siblings(steps + 1, n);
      b.siblings = passes.siblings(steps + 1);
      ASSERT_NE(a.siblings.summary, nullptr);
      ASSERT_EQ(b.siblings.summary, nullptr);
      for (std::int32_t s = 0; s <= steps; ++s) {
        const std::int32_t x = s < steps ? tokens[std::size_t(s)] : std::int32_t(kNoToken);
        const auto za = cpu::residual_mass<>(a, x, n), zb = cpu::residual_mass<>(b, x, n);
        const auto scalar = core::residual_mass(rows, a, x);
        ASSERT_TRUE(za.ok && zb.ok && scalar.ok);
        ++checks;
        mismatches += za.value != zb.value || za.value != scalar.value;
        for (float u : {0.0f, 0x1.fffffep-1f, uniform(rng), uniform(rng)}) {
          ++checks;
          const auto da = cpu::residual_draw<>(a, x, u, n), db = cpu::residual_draw<>(b, x, u, n);
          mismatches += da.value != db.value || da.value != core::residual_draw(rows, a, x, u).value;
        }
        if (s == steps || !(za.value > 0)) break;
        a.absorb(rows, x, za.value);
        b.absorb(rows, x, zb.value);
        EXPECT_EQ(a.at(rows, x), 0.0) << "a rejected token weighs 0";
      }
      if (a.steps == 0) continue;  // the first rejection left no mass: nothing was absorbed
      // The planted fault: the last rejected token's term left in its chunk, the total right. A
      // threshold between the chunk's true and planted sums then finds no crossing in that chunk.
      const std::int32_t last = a.siblings.token[a.steps - 1], c = last / core::chunk_length(n);
      const double scale = a.siblings.summary->scale;
      core::ChunkSums right;
      a.one_hot_chunks(rows, kNoToken, n, right);
      core::ChunkSums wrong = right;
      wrong.chunk[c].merge(core::FixedSum::term(double(p[std::size_t(last)]) * scale));
      core::FixedSum through;
      for (std::int32_t k = 0; k <= c; ++k) through.merge(right.chunk[k]);
      const double threshold = through.value() + 0.5 * double(p[std::size_t(last)]) * scale;
      core::FixedSum planted_through = through;
      planted_through.merge(core::FixedSum::term(double(p[std::size_t(last)]) * scale));
      // (A term below the sums' double resolution moves no threshold: nothing to see.)
      if (c + 1 < right.chunks && through.value() < threshold && threshold < planted_through.value() &&
          threshold < right.total.value()) {
        cpu::detail::ResidualLanes<cpu::DefaultArch, const float*> lanes(a, kNoToken, n);
        ++tries;
        planted += cpu::locate<cpu::DefaultArch>(lanes, lanes, n, scale, right, {}, threshold) !=
                   cpu::locate<cpu::DefaultArch>(lanes, lanes, n, scale, wrong, {}, threshold);
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << checks;
  EXPECT_GT(tries, 0);
  EXPECT_EQ(planted, tries) << "a chunk sum that keeps a rejected token moves the draw";
}

TEST(ResidualKernel, OneHotSummaryTakesNoPassPerSibling) {
  // Every later sibling's mass comes from the summary: the row may change after the first pass
  // (it cannot in a walk) and the masses still follow the first pass, which a pass would not.
  const std::int32_t n = 5000;
  std::mt19937_64 rng(7);
  auto p = testing::random_distribution(n, rng);
  cpu::SiblingRoom room;
  core::Residual<const float*> r;
  r.p = p.data();
  r.drafted = Drafted::deterministic;
  r.siblings = room.siblings(4, n);
  const cpu::Rows<> rows{n};
  const auto z = cpu::residual_mass<>(r, 10, n);
  ASSERT_TRUE(z.ok);
  r.absorb(rows, 10, z.value);
  const float was = p[4000];
  p[4000] = 0.5f;  // seen by a pass, not by the summary
  const auto summarised = cpu::residual_mass<>(r, 20, n);
  r.siblings.summary->ready = false;  // what a new node's room gives
  const auto passed = cpu::residual_mass<>(r, 20, n);
  EXPECT_NEAR(passed.value - summarised.value, 0.5 - double(was), 1e-6);
}

/// The CPU rows with the scalar residual passes (core::residual_mass / residual_draw).
struct ScalarResidualRows : cpu::Rows<> {
  cpu::Checked<double> mass(const core::Residual<View>& r, std::int32_t x) const {
    const auto m = core::residual_mass(*this, r, x);
    return {m.value, m.ok};
  }
  cpu::Checked<std::int32_t> draw(const core::Residual<View>& r, std::int32_t x, float u) const {
    const auto d = core::residual_draw(*this, r, x, u);
    return {d.value, d.ok};
  }
};

/// Logits rows with the scalar residual passes (core::residual_mass / residual_draw) over views.
struct ScalarLogitResidualRows : cpu::LogitRows<> {
  cpu::Checked<double> mass(const core::Residual<View>& r, std::int32_t x) const {
    const auto m = core::residual_mass(*this, r, x);
    return {m.value, m.ok};
  }
};

// The kernel over logits views (cpu/logit_residual.hpp): dense, listed (top-k, top-p with min_p),
// greedy and penalised views (their listed entries read through the overlay), split or not.
TEST(ResidualKernel, LogitsViewsMatchTheScalarDefinition) {
  std::mt19937_64 rng(47);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const cpu::TeamLease lease(cpu::RowTeam::instance());
  ASSERT_NE(lease.team(), nullptr);
  SamplingParams params[] = {{0.8f, 0, 1.0f, 0.0f}, {1.0f, 50, 1.0f, 0.0f}, {0.7f, 0, 0.9f, 0.05f},
                             {0.0f, 0, 1.0f, 0.0f}, {0.9f, 20, 1.0f, 0.0f}};
  params[4].repetition_penalty = 1.5f;  // penalised: its overlay holds the listed tokens' values
  params[4].presence_penalty = 0.5f;
  std::int32_t draws = 0, mismatches = 0, split_mismatches = 0;
  for (const std::int32_t n : {17, 1041, 40000}) {
    const ScalarLogitResidualRows rows{{n}};
    std::vector<std::int32_t> history;
    std::vector<std::int32_t> counts;
    for (std::int32_t v = 0; v < n; v += 1 + static_cast<std::int32_t>(rng() % 13)) {
      history.push_back(v);
      counts.push_back(static_cast<std::int32_t>(rng() % 3));
    }
    for (const Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
      for (std::size_t t = 0; t < std::size(params); ++t) {
        std::vector<float> lp(static_cast<std::size_t>(n)), lq(static_cast<std::size_t>(n));
        for (auto& v : lp) v = normal(rng);
        for (auto& v : lq) v = normal(rng);
        core::OverlayRoom rooms[2];
        const auto row_of = [&](std::vector<float>& logits, const SamplingParams& sp, core::OverlayRoom& room) {
          core::LogitRow<float> row;
          row.logits = logits.data();
          row.n = n;
          row.params = sp;
          row.lists.history_tokens = history.data();
          row.lists.history_counts = counts.data();
          row.lists.history_size = static_cast<std::int32_t>(history.size());
          row.lists.penalise = sp.repetition_penalty != 1.0f;
          room.build(row);
          return row;
        };
        std::vector<float> scratch(std::size_t(2) * n);
        core::Residual<core::LogitView<float>> r;
        r.p = cpu::prepare(row_of(lp, params[t], rooms[0]), scratch.data());
        r.q = cpu::prepare(row_of(lq, params[(t + 1) % std::size(params)], rooms[1]), scratch.data() + n);
        ASSERT_TRUE(r.p.ok && r.q.ok);
        r.has_q = how != Drafted::deterministic;
        r.drafted = how;
        cpu::SiblingRoom room;
        r.siblings = room.siblings(4);
        const cpu::RowSplit split = n >= 2 * cpu::RowSplit::kMinPart ? cpu::RowSplit{lease.team(), 2} : cpu::RowSplit{};
        const auto steps = static_cast<std::int32_t>(rng() % 5);
        for (std::int32_t s = 0; s < steps; ++s) {
          const auto x = static_cast<std::int32_t>(rng() % std::uint64_t(n));
          const auto z = cpu::residual_mass<>(r, x, n);
          const auto scalar = core::residual_mass(rows, r, x);
          ASSERT_TRUE(z.ok);
          EXPECT_EQ(z.value, scalar.value) << n << " step " << s;
          if (split.active()) {
            EXPECT_EQ(cpu::residual_mass<>(r, x, n, split).value, z.value);
          }
          if (z.value > 0) r.absorb(rows, x, z.value);
        }
        for (const std::int32_t x : {std::int32_t(kNoToken), static_cast<std::int32_t>(rng() % std::uint64_t(n))}) {
          const auto scalar = core::residual_mass(rows, r, x);
          const auto vector = cpu::residual_mass<>(r, x, n);
          ASSERT_TRUE(scalar.ok && vector.ok);
          EXPECT_EQ(vector.value, scalar.value) << n << " params " << t;
          for (const float u : {0.0f, 0x1.fffffep-1f, uniform(rng), uniform(rng), uniform(rng)}) {
            ++draws;
            const auto a = core::residual_draw(rows, r, x, u);
            const auto b = cpu::residual_draw<>(r, x, u, n);
            mismatches += a.value != b.value || !b.ok;
            if (split.active()) split_mismatches += cpu::residual_draw<>(r, x, u, n, split).value != b.value;
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << draws << " draws";
  EXPECT_EQ(split_mismatches, 0);
}

// Whole walks on wide rows (20 draw chunks; one-hot nodes reuse their first pass's chunk sums)
// give the tokens the same walks give with the scalar residual.
TEST(ResidualKernel, WalksOnWideRowsMatchTheScalarResidual) {
  constexpr std::int32_t V = 20001, B = 6;
  std::mt19937_64 rng(53);
  for (Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
    Trees t(V);
    t.drafted = how;
    for (std::int32_t b = 0; b < B; ++b) {
      // The root's first children carry tokens p gives nothing, so several are rejected in turn.
      const std::vector<std::int32_t> parents = {-1, -1, -1, -1, 0, 4}, tokens = {5, 19999, 1234, 777, 9, 10};
      std::vector<std::vector<float>> ps, qs;
      for (std::size_t r = 0; r <= parents.size(); ++r) {
        ps.push_back(testing::random_distribution(V, rng));
        qs.push_back(testing::random_distribution(V, rng));
      }
      for (std::int32_t c = 0; c < 3 - b % 2; ++c) ps[0][std::size_t(tokens[std::size_t(c)])] = 0.0f;
      t.add(parents, tokens, ps, qs);
    }
    const TreeOutput out = t.output();
    verify(Standard{}, t.batch(), Randomness{8, 1}, out);
    const auto layout = core::TreeLayout::of(t.batch());
    const auto source = core::ProbSource<float>::of(t.batch());
    for (std::int32_t b = 0; b < B; ++b) {
      ScalarResidualRows rows{{V}};
      const core::WalkResult r = core::walk(Standard{}, layout, source, Randomness{8, 1}, b, rows);
      EXPECT_EQ(r.accepted, t.accepted[std::size_t(b)]) << "Drafted " << int(how) << " b " << b;
      EXPECT_EQ(r.extra, t.token(b, r.accepted)) << "Drafted " << int(how) << " b " << b;
    }
  }
}

// Without replacement, the first sibling's pass also sums q for the renormalisation asked next
// (core::Residual::absorb): the value handed over is the separate pass's, bit for bit.
TEST(ResidualKernel, WithoutReplacementHandsOverTheRowsMassOfQ) {
  std::mt19937_64 rng(59);
  for (std::int32_t n : {5, 1000, 1041, 20001}) {
    const auto p = testing::random_distribution(n, rng), q = testing::random_distribution(n, rng);
    core::Residual<const float*> r;
    r.p = p.data();
    r.q = q.data();
    r.has_q = true;
    r.drafted = Drafted::sampled_without_replacement;
    core::Residual<const float*> q_row;
    q_row.p = q.data();
    const double separate = cpu::residual_mass<>(q_row, kNoToken, n).value;
    ASSERT_TRUE(cpu::residual_mass<>(r, 3, n).ok);
    const auto handed = cpu::residual_mass<>(q_row, kNoToken, n);
    EXPECT_TRUE(handed.ok);
    EXPECT_EQ(handed.value, separate) << n;
  }
}

// ---- Tree conversions (include/specverify/tree_conversions.hpp).

/// SGLang's links for a tree given by parents (engine entry 0 the root, entry i + 1 node i),
/// built as build_tree_efficient builds them: nodes visited from the last, each prepended to its
/// parent's child list, so siblings end up in increasing index.
void sglang_links(const std::vector<std::int32_t>& parents, std::vector<std::int64_t>& next_token,
                  std::vector<std::int64_t>& next_sibling) {
  const std::size_t n = parents.size() + 1;
  next_token.assign(n, -1);
  next_sibling.assign(n, -1);
  for (std::size_t e = n - 1; e > 0; --e) {
    const std::size_t parent = std::size_t(parents[e - 1] + 1);
    next_sibling[e] = next_token[parent];
    next_token[parent] = std::int64_t(e);
  }
}

TEST(TreeConversions, NextLinksWorkedExample) {
  const std::int64_t next_token[] = {1, 3, -1, -1}, next_sibling[] = {-1, 2, -1, -1};
  const TreeLinks links = from_next_links(next_token, next_sibling, 4);
  EXPECT_EQ(links.parents, (std::vector<std::int32_t>{-1, -1, 0}));
  EXPECT_EQ(links.engine_index, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_TRUE(links.in_engine_order(1));
}

TEST(TreeConversions, NextLinksRoundTrip) {
  std::mt19937_64 rng(43);
  for (std::int32_t trial = 0; trial < 500; ++trial) {
    const std::int32_t N = 1 + std::int32_t(rng() % 40);
    std::vector<std::int32_t> parents;
    for (std::int32_t i = 0; i < N; ++i) parents.push_back(std::int32_t(rng() % std::uint64_t(i + 1)) - 1);
    std::vector<std::int64_t> next_token, next_sibling;
    sglang_links(parents, next_token, next_sibling);
    const TreeLinks links = from_next_links(next_token.data(), next_sibling.data(), N + 1);
    ASSERT_EQ(links.parents, parents);
    ASSERT_TRUE(links.in_engine_order(1));
    // Renumber the engine entries at random: the links must describe the same tree, with each
    // node's children in the engine's sibling order and parents first.
    std::vector<std::int64_t> perm(std::size_t(N + 1));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin() + 1, perm.end(), rng);
    std::vector<std::int64_t> token2(std::size_t(N + 1), -1), sibling2(std::size_t(N + 1), -1);
    for (std::size_t e = 0; e <= std::size_t(N); ++e) {
      token2[std::size_t(perm[e])] = next_token[e] < 0 ? -1 : perm[std::size_t(next_token[e])];
      sibling2[std::size_t(perm[e])] = next_sibling[e] < 0 ? -1 : perm[std::size_t(next_sibling[e])];
    }
    const TreeLinks shuffled = from_next_links(token2.data(), sibling2.data(), N + 1);
    ASSERT_EQ(shuffled.parents.size(), std::size_t(N));
    std::vector<std::int32_t> last_child(std::size_t(N) + 1, -1);
    for (std::int32_t i = 0; i < N; ++i) {
      const std::int32_t parent = shuffled.parents[std::size_t(i)];
      ASSERT_LT(parent, i);
      const std::int64_t engine_parent = parent < 0 ? 0 : shuffled.engine_index[std::size_t(parent)];
      // engine_index[i]'s engine parent is the engine node of parents[i]
      bool found = false;
      for (std::int64_t c = token2[std::size_t(engine_parent)]; c != -1; c = sibling2[std::size_t(c)]) {
        found = found || c == shuffled.engine_index[std::size_t(i)];
      }
      ASSERT_TRUE(found);
      // siblings in the engine's order: this node follows the previous child of its parent
      const std::int32_t previous = last_child[std::size_t(parent + 1)];
      const std::int64_t expected = previous < 0 ? token2[std::size_t(engine_parent)]
                                                 : sibling2[std::size_t(shuffled.engine_index[std::size_t(previous)])];
      ASSERT_EQ(expected, shuffled.engine_index[std::size_t(i)]);
      last_child[std::size_t(parent + 1)] = i;
    }
  }
}

TEST(TreeConversions, NextLinksRejectMalformedLinks) {
  const auto expect_bad = [](std::vector<std::int64_t> token, std::vector<std::int64_t> sibling, const char* what) {
    try {
      from_next_links(token.data(), sibling.data(), std::int32_t(token.size()));
      ADD_FAILURE() << "accepted: " << what;
    } catch (const invalid_input& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_bad({1, 4, -1, -1}, {-1, 2, -1, -1}, "next_token[1] = 4");
  expect_bad({1, -1, -1}, {-1, -2, -1}, "next_sibling[1] = -2");
  expect_bad({1, 0, -1}, {-1, -1, -1}, "next_token[1] = 0");
  expect_bad({1, 2, 1}, {-1, -1, -1}, "node 1 is reached twice");
  expect_bad({1, -1, -1}, {-1, -1, -1}, "node 2 is not reachable");
  expect_bad({1, -1}, {1, -1}, "next_sibling[0] = 1");
}

TEST(TreeConversions, PathsWorkedExample) {
  // Medusa's order: by length, then lexicographically.
  const TreeLinks links = from_paths({{0}, {1}, {0, 0}, {0, 1}, {2}, {0, 0, 0}});
  EXPECT_EQ(links.parents, (std::vector<std::int32_t>{-1, -1, -1, 0, 0, 3}));
  EXPECT_EQ(links.engine_index, (std::vector<std::int32_t>{0, 1, 4, 2, 3, 5}));
  EXPECT_FALSE(links.in_engine_order(0));
}

TEST(TreeConversions, PathsRoundTrip) {
  std::mt19937_64 rng(47);
  for (std::int32_t trial = 0; trial < 300; ++trial) {
    const std::int32_t N = 1 + std::int32_t(rng() % 30);
    std::vector<std::int32_t> parents, children(std::size_t(N) + 1, 0);
    std::vector<std::vector<std::int32_t>> paths;
    for (std::int32_t i = 0; i < N; ++i) {
      const std::int32_t parent = std::int32_t(rng() % std::uint64_t(i + 1)) - 1;
      std::vector<std::int32_t> path = parent < 0 ? std::vector<std::int32_t>{} : paths[std::size_t(parent)];
      path.push_back(children[std::size_t(parent + 1)]++);
      paths.push_back(path);
    }
    std::shuffle(paths.begin(), paths.end(), rng);
    const TreeLinks links = from_paths(paths);
    ASSERT_EQ(links.parents.size(), paths.size());
    for (std::int32_t i = 0; i < N; ++i) {  // each node's path, rebuilt from the links
      std::vector<std::int32_t> path{paths[std::size_t(links.engine_index[std::size_t(i)])].back()};
      for (std::int32_t a = links.parents[std::size_t(i)]; a >= 0; a = links.parents[std::size_t(a)]) {
        ASSERT_LT(a, i);
        path.insert(path.begin(), paths[std::size_t(links.engine_index[std::size_t(a)])].back());
      }
      ASSERT_EQ(path, paths[std::size_t(links.engine_index[std::size_t(i)])]);
      if (i > 0 && links.parents[std::size_t(i - 1)] == links.parents[std::size_t(i)]) {  // siblings by choice
        EXPECT_GT(path.back(), paths[std::size_t(links.engine_index[std::size_t(i - 1)])].back());
      }
    }
  }
}

TEST(TreeConversions, PathsRejectMalformedLists) {
  const auto expect_bad = [](const std::vector<std::vector<std::int32_t>>& paths, const char* what) {
    try {
      from_paths(paths);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const invalid_input& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_bad({{0}, {}}, "path 1 is empty");
  expect_bad({{0}, {0, -1}}, "path 1 has choice -1");
  expect_bad({{0}, {1}, {0}}, "repeats path");
  expect_bad({{0}, {1, 0}}, "path 1: its parent path is not listed");
}

}  // namespace
}  // namespace specverify
