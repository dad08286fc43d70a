// The relaxed rules against their formulas: decisions at and around their boundaries with caller
// uniforms, acceptance probabilities in distribution, reductions to Standard, statistics, masks.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <limits>

#include "support.hpp"
#include "typical_acceptance.hpp"

namespace specverify {
namespace {

using testing::Chains;

/// Verifies one single-draft chain (x, p, q, bonus row) with a caller uniform u.
template <class Rule>
struct OneDraft {
  Chains c;
  VerifyStats stats;
  OneDraft(const Rule& rule, std::int32_t x, const std::vector<float>& p, const std::vector<float>& q,
           float u, float sample = 0.5f)
      : c(static_cast<std::int32_t>(p.size())) {
    c.add({x}, {p, p}, {q});
    Randomness r;
    r.accept_uniforms = &u;
    r.sample_uniforms = &sample;
    stats = verify(rule, c.batch(), r, c.output());
  }
  bool accepted() const { return c.accepted[0] == 1; }
};

template <class Rule>
bool accepts(const Rule& rule, std::int32_t x, const std::vector<float>& p, const std::vector<float>& q, float u) {
  return OneDraft<Rule>(rule, x, p, q, u).accepted();
}

float below(float v) { return std::nextafter(v, 0.0f); }

TEST(Ears, DecisionFollowsTheFormulaAtItsBoundary) {
  // p(x) / q(x) = 0.5 and beta (1 - max p) = 0.5 * 0.5: accept iff u < 0.75, strictly.
  const std::vector<float> p{0.25f, 0.5f, 0.25f}, q{0.5f, 0.25f, 0.25f};
  const Ears ears{0.5f};
  EXPECT_TRUE(accepts(ears, 0, p, q, below(0.75f)));
  EXPECT_FALSE(accepts(ears, 0, p, q, 0.75f));
  EXPECT_TRUE(accepts(ears, 0, p, q, below(0.5f)));   // the lossless test alone
  const OneDraft<Ears> pardon(ears, 0, p, q, 0.6f);
  EXPECT_EQ(pardon.stats.relaxed, 1);
  const OneDraft<Ears> exact(ears, 0, p, q, 0.4f);
  EXPECT_EQ(exact.stats.relaxed, 0);
  EXPECT_EQ(exact.stats.target_checked, 1);
}

TEST(Ears, UsesTheEnginesRowMaxWhenGiven) {
  const std::vector<float> p{0.25f, 0.5f, 0.25f}, q{0.5f, 0.25f, 0.25f};
  Chains c(3);
  c.add({0}, {p, p}, {q});
  const float row_max[2] = {0.0f, 0.5f};  // claims max p = 0: tolerance 0.5, boundary 1.0
  ChainBatch<float> batch = c.batch();
  batch.target_row_max = row_max;
  const float u = 0.9f;
  Randomness r;
  r.accept_uniforms = &u;
  verify(Ears{0.5f}, batch, r, c.output());
  EXPECT_EQ(c.accepted[0], 1);
}

TEST(Ears, AcceptanceProbabilityIsTheExpectedTolerantRatio) {
  // P(accept) = E_{x~q}[min(1, p(x)/q(x) + beta (1 - max p))] over p(x) > 0.
  constexpr std::int32_t V = 40, kTrials = 200000;
  std::mt19937_64 rng(21);
  const auto p = testing::random_distribution(V, rng, 1.0), q = testing::random_distribution(V, rng, 1.0);
  const float beta = 0.2f;
  const double top = *std::max_element(p.begin(), p.end());
  double expected = 0;
  for (std::int32_t v = 0; v < V; ++v) expected += q[v] * std::min(1.0, p[v] / q[v] + beta * (1 - top));
  Chains c(V);
  for (std::int32_t t = 0; t < kTrials; ++t) c.add({testing::sample(q, rng)}, {p, p}, {q});
  const VerifyStats s = verify(Ears{beta}, c.batch(), Randomness{5}, c.output());
  const double sigma = std::sqrt(expected * (1 - expected) / kTrials);
  EXPECT_NEAR(double(s.accepted) / kTrials, expected, 5 * sigma);
  EXPECT_GT(s.relaxed, 0);
}

TEST(Reductions, EarsWithZeroBetaAndRfsdWithZeroThresholdAreStandard) {
  std::mt19937_64 rng(31);
  Chains c(500);
  for (int b = 0; b < 200; ++b) {
    std::vector<std::vector<float>> ps, qs;
    std::vector<std::int32_t> xs;
    for (int j = 0; j <= 4; ++j) {
      ps.push_back(testing::random_distribution(500, rng, 1.0));
      if (j < 4) {
        qs.push_back(testing::random_distribution(500, rng, 1.0));
        xs.push_back(testing::sample(qs.back(), rng));
      }
    }
    c.add(xs, ps, qs);
  }
  const auto run = [&](const auto& rule) {
    const VerifyStats s = verify(rule, c.batch(), Randomness{77, 3}, c.output());
    EXPECT_EQ(s.relaxed, 0);
    return std::make_pair(c.out_tokens, c.accepted);
  };
  const auto standard = run(Standard{});
  EXPECT_EQ(run(Ears{0.0f}), standard);
  for (const Divergence d : {Divergence::js, Divergence::kl_target_draft, Divergence::tv}) {
    EXPECT_EQ(run(ReducibleFsd{d, 0.0f}), standard);
  }
}

TEST(Fsd, DecisionIsDeterministicAndInclusiveAtTheThreshold) {
  // TV((0.9, 0.1), (0.1, 0.9)) = 0.8 exactly in float arithmetic of halves of |p - q|.
  const std::vector<float> p{0.9f, 0.1f}, q{0.1f, 0.9f};
  const float tv = 0.5f * ((0.9f - 0.1f) + (0.9f - 0.1f));
  for (const float u : {0.0f, 0.5f, below(1.0f)}) {
    EXPECT_TRUE(accepts(Fsd{Divergence::tv, tv}, 1, p, q, u));
    EXPECT_FALSE(accepts(Fsd{Divergence::tv, below(tv)}, 1, p, q, u));
  }
  // The worked JS value of docs/api.md "Divergence", 0.368064, either side.
  EXPECT_TRUE(accepts(Fsd{Divergence::js, 0.36807f}, 0, p, q, 0.9f));
  EXPECT_FALSE(accepts(Fsd{Divergence::js, 0.36805f}, 0, p, q, 0.9f));
  EXPECT_TRUE(accepts(Fsd{Divergence::js_fsd, 0.51083f}, 0, p, q, 0.9f));
  EXPECT_FALSE(accepts(Fsd{Divergence::js_fsd, 0.51082f}, 0, p, q, 0.9f));
  const OneDraft<Fsd> d(Fsd{Divergence::tv, 1.0f}, 1, p, q, 0.99f);
  EXPECT_EQ(d.stats.relaxed, 1);
}

TEST(Fsd, ExtraTokenOnRejectionFollowsTarget) {
  constexpr std::int32_t V = 30, kTrials = 100000;
  std::mt19937_64 rng(41);
  const auto p = testing::random_distribution(V, rng, 1.0), q = testing::random_distribution(V, rng, 1.0);
  Chains c(V);
  for (std::int32_t t = 0; t < kTrials; ++t) c.add({testing::sample(q, rng)}, {p, p}, {q});
  const VerifyStats s = verify(Fsd{Divergence::kl_target_draft, 0.0f}, c.batch(), Randomness{8}, c.output());
  ASSERT_EQ(s.accepted, 0);  // D > 0 for p != q: every draft rejected
  std::vector<std::int64_t> counts(V);
  for (std::int32_t b = 0; b < kTrials; ++b) ++counts[c.token(b, 0)];
  const auto chi = testing::chi_square(counts, p);
  EXPECT_TRUE(chi.fits()) << chi.statistic << " df " << chi.df;
}

TEST(ReducibleFsd, AcceptsCloseDraftsAndOtherwiseTheStandardTest) {
  const std::vector<float> p{0.6f, 0.4f}, q{0.5f, 0.5f};  // TV = 0.1
  // x = 1: p/q = 0.8. Far (threshold 0.1, strict): standard only.
  EXPECT_TRUE(accepts(ReducibleFsd{Divergence::tv, 0.1f}, 1, p, q, 0.79f));
  EXPECT_FALSE(accepts(ReducibleFsd{Divergence::tv, 0.1f}, 1, p, q, 0.81f));
  // Close: accepted whatever u, counted as relaxed when the lossless test fails.
  const OneDraft<ReducibleFsd> close(ReducibleFsd{Divergence::tv, 0.2f}, 1, p, q, 0.99f);
  EXPECT_TRUE(close.accepted());
  EXPECT_EQ(close.stats.relaxed, 1);
}

TEST(Sprinter, VerifierPassedDraftsSkipTheTargetTest) {
  const std::vector<float> p{0.1f, 0.9f}, q{0.9f, 0.1f};
  const float scores[1] = {0.7f};
  const OneDraft<Sprinter> passed(Sprinter{0.5f, scores}, 0, p, q, 0.99f);  // lossless would reject
  EXPECT_TRUE(passed.accepted());
  EXPECT_EQ(passed.stats.target_checked, 0);
  EXPECT_EQ(passed.stats.relaxed, 1);
  const OneDraft<Sprinter> flagged(Sprinter{0.8f, scores}, 0, p, q, 0.99f);
  EXPECT_FALSE(flagged.accepted());
  EXPECT_EQ(flagged.stats.target_checked, 1);
  EXPECT_EQ(flagged.c.token(0, 0), 1);  // the residual max(p - q, 0) is all on token 1
  EXPECT_TRUE(accepts(Sprinter{0.7f, scores}, 0, p, q, 0.99f)) << "score >= eta passes";
}

TEST(SpecDecPP, CutsAfterTheFirstPositionWhoseStopProbabilityExceedsTheThreshold) {
  // 1 - prod: 0.1, 0.28, 0.64 > 0.3 at j = 2, so drafts 0..2 are kept and verified.
  constexpr std::int32_t V = 8;
  std::mt19937_64 rng(2);
  std::vector<std::vector<float>> ps;
  std::vector<std::int32_t> argmax;
  for (int j = 0; j <= 5; ++j) {
    ps.push_back(testing::random_distribution(V, rng));
    argmax.push_back(std::int32_t(std::max_element(ps.back().begin(), ps.back().end()) - ps.back().begin()));
  }
  Chains c(V, true);
  c.add({argmax[0], argmax[1], argmax[2], argmax[3], argmax[4]}, ps);
  const float probs[5] = {0.9f, 0.8f, 0.5f, 1.0f, 1.0f};
  const SpecDecPP<Greedy> rule{0.3f, probs, Greedy{}};
  const VerifyStats s = verify(rule, c.batch(), Randomness{}, c.output());
  EXPECT_EQ(c.accepted[0], 3);
  EXPECT_EQ(c.token(0, 3), argmax[3]) << "bonus from the row after the cut";
  EXPECT_EQ(c.token(0, 4), kNoToken);
  EXPECT_EQ(s.drafted, 5);
  EXPECT_EQ(s.target_checked, 3);
  // The stop test is strict: 1 - 0.9 * 0.8 = 0.28 at a threshold of exactly that does not cut.
  const float at_threshold = 1.0f - 0.9f * 0.8f;
  const SpecDecPP<Greedy> strict{at_threshold, probs, Greedy{}};
  verify(strict, c.batch(), Randomness{}, c.output());
  EXPECT_EQ(c.accepted[0], 3);
  const SpecDecPP<Greedy> never{0.99f, probs, Greedy{}};
  verify(never, c.batch(), Randomness{}, c.output());
  EXPECT_EQ(c.accepted[0], 5);
}

TEST(CustomRule, TypicalAcceptanceFollowsItsFormula) {
  // H(uniform over 4) = ln 4: floor = min(0.09, 0.3 / 4) = 0.075.
  const std::vector<float> p{0.25f, 0.25f, 0.25f, 0.25f}, q{0.1f, 0.1f, 0.1f, 0.7f};
  EXPECT_TRUE(accepts(TypicalAcceptance{}, 0, p, q, 0.99f));
  EXPECT_TRUE(accepts(TypicalAcceptance{0.09f, 0.99f}, 0, p, q, 0.0f)) << "floor 0.09 < 0.25";
  EXPECT_FALSE(accepts(TypicalAcceptance{0.09f, 0.3f}, 0, std::vector<float>{0.07f, 0.31f, 0.31f, 0.31f}, q, 0.0f));
  const OneDraft<TypicalAcceptance> rejected(TypicalAcceptance{0.5f, 2.0f}, 3, p, q, 0.0f);
  EXPECT_FALSE(rejected.accepted());
  EXPECT_EQ(rejected.c.token(0, 0), 0) << "argmax p, lowest index on ties";
}

TEST(MaskSafety, NoLossyRuleAcceptsATokenTheTargetExcludes) {
  const std::vector<float> p{0.0f, 0.5f, 0.5f}, q{0.0001f, 0.5f, 0.4999f};
  const float scores[1] = {1.0f};
  const float probs[1] = {1.0f};
  for (const float u : {0.0f, 0.5f}) {
    EXPECT_FALSE(accepts(Ears{1000.0f}, 0, p, q, u));
    EXPECT_FALSE(accepts(Fsd{Divergence::tv, 1.0f}, 0, p, q, u));
    EXPECT_FALSE(accepts(ReducibleFsd{Divergence::tv, 1.0f}, 0, p, q, u));
    EXPECT_FALSE(accepts(Sprinter{0.0f, scores}, 0, p, q, u));
    EXPECT_FALSE(accepts(SpecDecPP<Ears>{0.5f, probs, Ears{1000.0f}}, 0, p, q, u));
    EXPECT_FALSE(accepts(TypicalAcceptance{0.0f, 0.0f}, 0, p, q, u));
  }
}

template <class Rule>
void expect_invalid(const Rule& rule, std::initializer_list<const char*> fragments) {
  const std::vector<float> p{0.5f, 0.5f};
  Chains c(2);
  c.add({0}, {p, p}, {p});
  try {
    verify(rule, c.batch(), Randomness{}, c.output());
    ADD_FAILURE() << "no invalid_input";
  } catch (const invalid_input& e) {
    for (const char* f : fragments) EXPECT_THAT(e.what(), ::testing::HasSubstr(f));
  }
  EXPECT_EQ(c.accepted[0], 12345) << "output written before the error";
}

TEST(BadRuleInput, ParametersAndPerDraftInputsAreNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_invalid(Ears{-0.1f}, {"beta = -0.1"});
  expect_invalid(Ears{nan}, {"beta = nan"});
  expect_invalid(Fsd{Divergence::js, -1.0f}, {"threshold = -1"});
  expect_invalid(ReducibleFsd{Divergence::tv, nan}, {"threshold = nan"});
  const float bad_score[1] = {1.5f}, nan_score[1] = {nan}, good[1] = {0.5f};
  expect_invalid(Sprinter{0.5f, nullptr}, {"verifier_scores is null"});
  expect_invalid(Sprinter{1.5f, good}, {"eta = 1.5"});
  expect_invalid(Sprinter{0.5f, bad_score}, {"sequence 0, position 0", "verifier score = 1.5"});
  expect_invalid(Sprinter{0.5f, nan_score}, {"sequence 0, position 0", "verifier score = nan"});
  expect_invalid(SpecDecPP<Standard>{0.5f, nullptr}, {"accept_probs is null"});
  expect_invalid(SpecDecPP<Standard>{-0.5f, good}, {"threshold = -0.5"});
  expect_invalid(SpecDecPP<Standard>{0.5f, bad_score}, {"position 0", "accept prob = 1.5"});
  expect_invalid(SpecDecPP<Sprinter>{0.5f, good, Sprinter{0.5f, nan_score}}, {"verifier score = nan"});
  expect_invalid(TypicalAcceptance{2.0f, 0.3f}, {"epsilon = 2"});
}

TEST(BadRuleInput, NaNInARowAStatisticReadsIsNamed) {
  std::vector<float> p{0.5f, 0.25f, 0.25f}, bad{0.5f, std::numeric_limits<float>::quiet_NaN(), 0.25f};
  for (const bool in_target : {true, false}) {
    Chains c(3);
    c.add({0}, {in_target ? bad : p, p}, {in_target ? p : bad});
    try {
      verify(Fsd{Divergence::js, 0.5f}, c.batch(), Randomness{}, c.output());
      ADD_FAILURE() << "no invalid_input";
    } catch (const invalid_input& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(in_target ? "target row 0" : "draft row 0"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("token 1"));
    }
  }
}

}  // namespace
}  // namespace specverify
