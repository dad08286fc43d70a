// Drafting controllers: stop indices for worked sequences, strictness of `>`, length bounds.
#include "specverify/controllers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace specverify {
namespace {

/// Feeds probabilities until the controller says stop; returns the length it stopped at (0: never).
std::int32_t stop_length(SpecDecPPStop& stop, const std::vector<float>& probs) {
  for (const float p : probs)
    if (stop.feed(p)) return stop.length();
  return 0;
}

// Probabilities with exact binary products, so 1 - prod is exact and ties are real ties.
TEST(SpecDecPPStop, StopsAfterTheTokenThatCrossesTheThreshold) {
  SpecDecPPStop stop{0.5f, 1, 20};
  // prod: 0.5 (1 - prod = 0.5, not > 0.5), 0.5, 0.375 (0.625 > 0.5): stop after token 3.
  EXPECT_EQ(stop_length(stop, {0.5f, 1.0f, 0.75f, 1.0f}), 3);
  EXPECT_FLOAT_EQ(stop.rejection_prob(), 0.625f);
  stop.reset();
  EXPECT_EQ(stop.length(), 0);
  // 0.75 * 0.75 = 0.5625 (0.4375), * 0.75 = 0.421875 (0.578125): third token.
  EXPECT_EQ(stop_length(stop, {0.75f, 0.75f, 0.75f, 0.75f}), 3);
}

TEST(SpecDecPPStop, ComparisonIsStrict) {
  SpecDecPPStop stop{0.75f, 1, 20};
  // 1 - 0.25 = 0.75 exactly: equal is not above, so drafting continues; the next token tips it.
  EXPECT_FALSE(stop.feed(0.25f));
  EXPECT_TRUE(stop.feed(0.5f));
  EXPECT_EQ(stop.length(), 2);
}

TEST(SpecDecPPStop, NotBeforeMinLength) {
  SpecDecPPStop stop{0.3f, 3, 20};
  EXPECT_FALSE(stop.feed(0.25f));  // 0.75 > 0.3, but only 1 token
  EXPECT_FALSE(stop.feed(1.0f));   // 2 tokens
  EXPECT_TRUE(stop.feed(1.0f));    // 3 tokens: still 0.75 > 0.3
  EXPECT_EQ(stop.length(), 3);
}

TEST(SpecDecPPStop, AlwaysAtMaxLength) {
  SpecDecPPStop stop{0.7f, 2, 20};
  EXPECT_EQ(stop_length(stop, std::vector<float>(30, 1.0f)), 20);
  SpecDecPPStop never{1.0f, 1, 5};  // 1 - prod can never exceed 1: only max_length stops
  EXPECT_EQ(stop_length(never, {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}), 5);
  SpecDecPPStop one{0.0f, 0, 1};
  EXPECT_TRUE(one.feed(1.0f));
}

TEST(SpecDecPPStop, ThresholdZeroStopsAtTheFirstUncertainToken) {
  SpecDecPPStop stop{0.0f, 1, 10};
  EXPECT_EQ(stop_length(stop, {1.0f, 1.0f, 0.999f, 1.0f}), 3);
}

TEST(SpecDecPPStop, FeedingAfterStopNeedsReset) {
  SpecDecPPStop stop{0.5f, 1, 2};
  EXPECT_FALSE(stop.feed(1.0f));
  EXPECT_TRUE(stop.feed(1.0f));
  EXPECT_THROW(stop.feed(1.0f), invalid_input);
  stop.reset();
  EXPECT_FALSE(stop.feed(0.9f));
  EXPECT_EQ(stop.length(), 1);
}

TEST(SpecDecPPStop, InvalidParametersAndInputs) {
  EXPECT_THROW((SpecDecPPStop{NAN, 1, 20}), invalid_input);
  EXPECT_THROW((SpecDecPPStop{-0.1f, 1, 20}), invalid_input);
  EXPECT_THROW((SpecDecPPStop{1.5f, 1, 20}), invalid_input);
  EXPECT_THROW((SpecDecPPStop{0.5f, 1, 0}), invalid_input);
  EXPECT_THROW((SpecDecPPStop{0.5f, -1, 20}), invalid_input);
  EXPECT_THROW((SpecDecPPStop{0.5f, 21, 20}), invalid_input);
  SpecDecPPStop stop{0.5f, 1, 20};
  EXPECT_THROW(stop.feed(NAN), invalid_input);
  EXPECT_THROW(stop.feed(1.5f), invalid_input);
  EXPECT_THROW(stop.feed(-0.01f), invalid_input);
  EXPECT_EQ(stop.length(), 0);  // refused values are not counted
  EXPECT_FALSE(stop.feed(1.0f));
}

TEST(SprinterGate, TargetChecksScoresBelowEta) {
  const SprinterGate gate{0.5f};
  EXPECT_FALSE(gate.must_check(0.5f));  // >= eta passes
  EXPECT_FALSE(gate.must_check(0.9f));
  EXPECT_TRUE(gate.must_check(std::nextafter(0.5f, 0.0f)));
  EXPECT_TRUE(gate.must_check(0.0f));
  const SprinterGate all{1.0f};
  EXPECT_TRUE(all.must_check(0.999f));
  EXPECT_FALSE(all.must_check(1.0f));
  const SprinterGate none{0.0f};
  EXPECT_FALSE(none.must_check(0.0f));
}

TEST(SprinterGate, InvalidParametersAndScores) {
  EXPECT_THROW(SprinterGate{NAN}, invalid_input);
  EXPECT_THROW(SprinterGate{-0.5f}, invalid_input);
  EXPECT_THROW(SprinterGate{1.01f}, invalid_input);
  const SprinterGate gate{0.5f};
  EXPECT_THROW(gate.must_check(NAN), invalid_input);
  EXPECT_THROW(gate.must_check(1.5f), invalid_input);
  EXPECT_THROW(gate.must_check(-1.0f), invalid_input);
}

}  // namespace
}  // namespace specverify
