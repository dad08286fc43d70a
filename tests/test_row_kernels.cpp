// CPU row kernels against plain scalar loops: vector bodies, tails and chunk edges.
#include <gtest/gtest.h>

#include <limits>

#include "specverify/cpu/row_kernels.hpp"
#include "support.hpp"

namespace specverify::cpu {
namespace {

/// Smallest i with w_0 + ... + w_i > u * sum(w), in long double.
std::int32_t reference_draw(const Weights& w, float u) {
  long double total = 0, running = 0;
  for (std::int32_t i = 0; i < w.n; ++i) total += w.at(i);
  for (std::int32_t i = 0; i < w.n; ++i) {
    running += w.at(i);
    if (w.at(i) > 0 && running > u * total) return i;
  }
  return -1;
}

TEST(RowKernels, MaxAndArgmaxFindTheLowestMaximumAnywhere) {
  for (const std::int32_t n : {1, 15, 16, 17, 100, 1031}) {
    for (std::int32_t at = 0; at < n; at += std::max(1, n / 7)) {
      std::vector<float> p(std::size_t(n), 0.25f);
      p[std::size_t(at)] = 0.5f;
      if (at + 3 < n) p[std::size_t(at + 3)] = 0.5f;  // a later tie
      EXPECT_EQ(row_max(p.data(), n).value, 0.5f);
      EXPECT_EQ(row_argmax(p.data(), n).value, at) << "n " << n;
    }
  }
}

TEST(RowKernels, EveryPassFlagsInvalidValuesInBodyAndTail) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity(), -1e-30f}) {
    for (const std::int32_t at : {0, 20, 40}) {
      std::vector<float> p(41, 0.01f), q(41, 0.01f);
      p[std::size_t(at)] = bad;
      EXPECT_FALSE(row_max(p.data(), 41).ok) << at;
      EXPECT_FALSE(row_argmax(p.data(), 41).ok) << at;
      EXPECT_FALSE(draw(Weights::target(p.data(), 41), 0.5f).ok) << at;
      EXPECT_FALSE(draw(Weights::residual(q.data(), p.data(), 3, 41), 0.5f).ok) << at;
      EXPECT_TRUE(draw(Weights::residual(q.data(), q.data(), 3, 41), 0.5f).ok);
    }
  }
}

TEST(RowKernels, NegativeZeroAndHugeFiniteValuesAreValid) {
  // The vector passes screen validity by the bits; -0 (sign bit) and pairs of large values whose
  // OR-ed bits reach +inf's must still pass through the exact check as valid.
  for (const std::int32_t at : {0, 20, 40}) {
    std::vector<float> p(41, 0.01f), q(41, 0.01f);
    p[std::size_t(at)] = -0.0f;
    EXPECT_TRUE(row_max(p.data(), 41).ok) << at;
    EXPECT_EQ(row_max(p.data(), 41).value, 0.01f);
    EXPECT_TRUE(draw(Weights::target(p.data(), 41), 0.5f).ok) << at;
    p[std::size_t(at)] = 3e38f;
    q[std::size_t(at)] = 1.5e38f;
    const auto d = draw(Weights::residual(p.data(), q.data(), 3, 41), 0.5f);
    EXPECT_TRUE(d.ok) << at;
    EXPECT_EQ(d.value, at) << "nearly all the residual mass is there";
    EXPECT_EQ(row_max(p.data(), 41).value, 3e38f);
  }
}

TEST(RowKernels, DrawMatchesInverseCdfReferenceAcrossChunks) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (const std::int32_t n : {1, 7, 16, 1023, 1024, 1025, 4099, 300001}) {
    const auto p = testing::random_distribution(n, rng);
    const auto q = testing::random_distribution(n, rng);
    const std::int32_t x = n / 2;
    for (const Weights& w : {Weights::target(p.data(), n), Weights::residual(p.data(), q.data(), x, n),
                             Weights::residual(p.data(), nullptr, x, n)}) {
      for (int trial = 0; trial < 40; ++trial) {
        const float u = trial == 0 ? 0.0f : trial == 1 ? 0x1.fffffep-1f : unit(rng);
        const auto got = draw(w, u);
        ASSERT_TRUE(got.ok);
        const std::int32_t expected = reference_draw(w, u);
        if (expected < 0) {
          EXPECT_EQ(got.value, -1);
          continue;
        }
        ASSERT_GE(got.value, 0);
        ASSERT_LT(got.value, n);
        EXPECT_GT(w.at(got.value), 0.0f);
        EXPECT_EQ(got.value, expected) << "n " << n << " u " << u;
      }
    }
  }
}

TEST(RowKernels, OneHotResidualNeverDrawsTheRejectedToken) {
  const std::vector<float> p{0.1f, 0.6f, 0.3f};
  for (float u = 0; u < 1; u += 0.01f) {
    EXPECT_NE(draw(Weights::residual(p.data(), nullptr, 1, 3), u).value, 1);
  }
  const std::vector<float> one_hot{0.0f, 1.0f, 0.0f};
  EXPECT_EQ(draw(Weights::residual(one_hot.data(), nullptr, 1, 3), 0.5f).value, -1);
}

TEST(RowKernels, ChunksAreBoundedSoSumsFitOnTheStack) {
  for (const std::int32_t n : {1, 1024, 262144, 262145, 1000000, std::numeric_limits<std::int32_t>::max()}) {
    const std::int64_t chunks = (std::int64_t{n} + chunk_length(n) - 1) / chunk_length(n);
    EXPECT_LE(chunks, kMaxChunks) << n;
  }
}

}  // namespace
}  // namespace specverify::cpu

TEST(Draw, NegativeZeroIsAZeroWeightNotABound) {
  // fuzz_verify and fuzz_trees found it: -0.0's bits lie above every positive float's, so a bound
  // on the row taken from the largest bits made the row's scale tiny and its mass round to zero.
  const float p[2] = {-0.0f, 3.76f}, q[2] = {0.0f, 1.0f};
  for (const float u : {0.0f, 0.5f, 0.99f}) {
    EXPECT_EQ(specverify::cpu::draw(specverify::cpu::Weights::target(p, 2), u).value, 1);
    EXPECT_EQ(specverify::cpu::draw(specverify::cpu::Weights::residual(p, q, -1, 2), u).value, 1);
  }
  std::vector<float> wide(1000, 1e-3f);
  wide[17] = -0.0f;
  EXPECT_GE(specverify::cpu::draw(specverify::cpu::Weights::target(wide.data(), 1000), 0.5f).value, 0);
}
