// Standard and Greedy: the emitted tokens follow p exactly (chi-square at every chain position),
// the acceptance rate at each position is sum_v min(p, q), and Greedy is exact argmax.
#include <gtest/gtest.h>

#include "support.hpp"

namespace specverify {
namespace {

using testing::Chains;
using testing::chi_square;

/// Many independent chains over fixed per-position rows: drafts x_j ~ q_j are redrawn for every
/// trial (or fixed, for one-hot drafts), the library verifies them, and the emitted tokens are
/// tallied per position among the chains that reached it.
struct Experiment {
  std::int32_t V, K;
  std::vector<std::vector<float>> p, q;  // K + 1 target rows; K draft rows (empty: one-hot)
  std::vector<std::int32_t> fixed_drafts;

  std::vector<std::vector<std::int64_t>> emitted;  // [position][token]
  std::vector<std::int64_t> reached, accepted;

  void run(std::int64_t trials, std::uint64_t seed) {
    const bool one_hot = q.empty();
    constexpr std::int32_t kBatch = 1024;
    Chains chains(V, one_hot);
    std::vector<std::int32_t> xs(static_cast<std::size_t>(K));
    for (std::int32_t b = 0; b < kBatch; ++b) chains.add(xs, p, q);
    emitted.assign(static_cast<std::size_t>(K) + 1, std::vector<std::int64_t>(static_cast<std::size_t>(V)));
    reached.assign(static_cast<std::size_t>(K) + 1, 0);
    accepted.assign(static_cast<std::size_t>(K), 0);
    std::mt19937_64 rng(seed);
    for (std::int64_t done = 0, call = 0; done < trials; done += kBatch, ++call) {
      for (std::int32_t b = 0; b < kBatch; ++b) {
        for (std::int32_t j = 0; j < K; ++j) {
          chains.tokens[std::size_t(b) * K + j] = one_hot ? fixed_drafts[j] : testing::sample(q[j], rng);
        }
      }
      const ChainOutput out = chains.output();
      verify(Standard{}, chains.batch(), Randomness{seed, static_cast<std::uint64_t>(call)}, out);
      for (std::int32_t b = 0; b < kBatch; ++b) {
        const std::int32_t n = chains.accepted[b];
        ASSERT_GE(n, 0);
        ASSERT_LE(n, K);
        for (std::int32_t i = 0; i <= n; ++i) {
          const std::int32_t t = chains.token(b, i);
          ASSERT_GE(t, 0);
          ASSERT_LT(t, V);
          ++emitted[i][t];
          ++reached[i];
          if (i < n) ++accepted[i];
        }
        for (std::int32_t i = n + 1; i <= K; ++i) ASSERT_EQ(chains.token(b, i), kNoToken);
      }
    }
  }

  /// Positions reached by fewer than 10 tokens per bin are too rare to test; position 0 always is.
  void expect_exact() const {
    ASSERT_GE(reached[0], 10 * V);
    for (std::int32_t i = 0; i <= K; ++i) {
      if (reached[i] < 10 * V) continue;
      const auto chi = chi_square(emitted[i], p[i]);
      EXPECT_TRUE(chi.fits()) << "position " << i << ": chi2 " << chi.statistic << " with df "
                              << chi.df << " over " << reached[i] << " tokens";
    }
  }

  /// Standard accepts a draft x ~ q with probability sum_v min(p, q) (x fixed: min(1, p(x))).
  void expect_acceptance_rates() const {
    for (std::int32_t j = 0; j < K; ++j) {
      if (reached[j] < 1000) continue;
      const double a = q.empty() ? std::min(1.0f, p[j][fixed_drafts[j]]) : testing::overlap(p[j], q[j]);
      const double rate = double(accepted[j]) / reached[j];
      // Five binomial sigmas, plus five counts for rates so near 0 or 1 that the count of the rare
      // outcome is Poisson rather than normal.
      const double sigma = std::sqrt(std::max(0.0, a * (1 - a)) / reached[j]);
      EXPECT_NEAR(rate, a, 5 * sigma + 5.0 / reached[j]) << "position " << j;
    }
  }
};

Experiment random_experiment(std::int32_t V, std::int32_t K, bool one_hot, std::uint64_t seed) {
  // A draft like a real one: the target's logits plus noise, so chains reach every position.
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 1.0);
  Experiment e{V, K, {}, {}, {}, {}, {}, {}};
  for (std::int32_t j = 0; j <= K; ++j) {
    auto logits = testing::random_logits(V, rng);
    e.p.push_back(testing::softmax(logits));
    if (j == K) break;
    if (one_hot) {
      e.fixed_drafts.push_back(testing::sample(e.p.back(), rng));
    } else {
      for (auto& l : logits) l += noise(rng);
      e.q.push_back(testing::softmax(logits));
    }
  }
  return e;
}

struct Shape {
  std::int32_t V, K;
  bool one_hot;
  std::int64_t trials;
};

class StandardExactness : public ::testing::TestWithParam<Shape> {};

TEST_P(StandardExactness, EmittedTokensFollowTargetAtEveryPosition) {
  const Shape s = GetParam();
  // Under AddressSanitizer (testing::repeats) the shapes with V >= 1000, whose chi-square needs
  // 10 V chains at every position, take 40-120 s; the smaller shapes walk the same paths.
  if (testing::kSanitized && s.V >= 1000) GTEST_SKIP() << "V " << s.V << ": run by the release build";
  Experiment e = random_experiment(s.V, s.K, s.one_hot, 1000 + s.V * 7 + s.K);
  e.run(s.trials, 99);
  e.expect_exact();
  e.expect_acceptance_rates();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, StandardExactness,
    ::testing::Values(Shape{2, 1, false, 100000}, Shape{2, 3, true, 100000},
                      Shape{16, 1, false, 100000}, Shape{16, 3, false, 100000},
                      Shape{64, 5, false, 100000}, Shape{64, 5, true, 100000},
                      Shape{1000, 3, false, 100000}, Shape{3000, 5, false, 60000},
                      Shape{3000, 5, true, 60000}),
    [](const auto& info) {
      return "V" + std::to_string(info.param.V) + "_K" + std::to_string(info.param.K) +
             (info.param.one_hot ? "_onehot" : "_dense");
    });

/// Draft = softmax(-target logits): most mass goes through the residual, where a stream shared
/// between acceptance and resampling, or a biased residual, shows up as a large chi-square.
TEST(StandardExactness, AdversarialReversedDraft) {
  constexpr std::int32_t V = 16, K = 3;
  std::mt19937_64 rng(5);
  Experiment e{V, K, {}, {}, {}, {}, {}, {}};
  for (std::int32_t j = 0; j <= K; ++j) {
    const auto logits = testing::random_logits(V, rng, 1.5);
    e.p.push_back(testing::softmax(logits));
    if (j < K) {
      std::vector<double> negated(logits);
      for (auto& l : negated) l = -l;
      e.q.push_back(testing::softmax(negated));
    }
  }
  for (std::int32_t j = 0; j < K; ++j) {
    ASSERT_LT(testing::overlap(e.p[j], e.q[j]), 0.5) << "not adversarial enough at " << j;
  }
  e.run(200000, 7);
  e.expect_exact();
  e.expect_acceptance_rates();
  EXPECT_GT(e.reached[0] - e.accepted[0], e.reached[0] / 2) << "most first drafts are rejected";
}

TEST(Greedy, AcceptsExactlyTheArgmaxPrefixAndEmitsArgmax) {
  constexpr std::int32_t V = 50;
  std::mt19937_64 rng(3);
  std::vector<std::vector<float>> p;
  for (int j = 0; j < 4; ++j) p.push_back(testing::random_distribution(V, rng));
  std::vector<std::int32_t> argmax;
  for (const auto& row : p) argmax.push_back(std::int32_t(std::max_element(row.begin(), row.end()) - row.begin()));
  Chains c(V, true);
  c.add({argmax[0], argmax[1], argmax[2]}, p);                  // all accepted: bonus is argmax
  c.add({argmax[0], (argmax[1] + 1) % V, argmax[2]}, p);        // rejected at position 1
  const ChainOutput out = c.output();
  const VerifyStats stats = verify(Greedy{}, c.batch(), Randomness{1}, out);
  EXPECT_EQ(c.accepted[0], 3);
  EXPECT_EQ(c.token(0, 3), argmax[3]);
  EXPECT_EQ(c.accepted[1], 1);
  EXPECT_EQ(c.token(1, 1), argmax[1]);
  EXPECT_EQ(c.token(1, 2), kNoToken);
  EXPECT_EQ(stats.accepted, 4);
  EXPECT_EQ(stats.drafted, 6);
  EXPECT_EQ(stats.target_checked, 5);
  EXPECT_EQ(stats.relaxed, 0);
}

TEST(Greedy, TiesGoToTheLowestIndex) {
  const std::vector<float> tied{0.1f, 0.4f, 0.1f, 0.4f};
  Chains c(4, true);
  c.add({3}, {tied, tied});  // 3 ties with 1 for the max but is not the lowest: rejected
  c.add({1}, {tied, tied});
  const ChainOutput out = c.output();
  verify(Greedy{}, c.batch(), Randomness{}, out);
  EXPECT_EQ(c.accepted[0], 0);
  EXPECT_EQ(c.token(0, 0), 1);
  EXPECT_EQ(c.accepted[1], 1);
  EXPECT_EQ(c.token(1, 1), 1);
}

}  // namespace
}  // namespace specverify
