// Reproducibility: same inputs give the same tokens; per-sequence seeds make a sequence's tokens
// independent of its batch; thread count does not matter; a new offset gives new draws.
#include <gtest/gtest.h>

#include "support.hpp"

namespace specverify {
namespace {

using testing::Chains;

/// B sequences with aligned-but-different p and q over V, drafts sampled from q.
Chains random_chains(std::int32_t B, std::int32_t V, std::int32_t K, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Chains c(V);
  for (std::int32_t b = 0; b < B; ++b) testing::add_aligned_chain(c, 1 + b % K, 1.5, rng);
  return c;
}

std::vector<std::int32_t> run(Chains& c, const Randomness& r, CpuOptions options = {}) {
  ChainOutput out = c.output();
  verify(Standard{}, c.batch(), r, out, options);
  return c.out_tokens;
}

TEST(Determinism, SameInputsSameTokens) {
  Chains c = random_chains(40, 300, 5, 1);
  EXPECT_EQ(run(c, Randomness{7, 3}), run(c, Randomness{7, 3}));
}

TEST(Determinism, DifferentOffsetsOrSeedsGiveDifferentDraws) {
  Chains c = random_chains(200, 300, 5, 2);
  const auto base = run(c, Randomness{7, 3});
  EXPECT_NE(base, run(c, Randomness{7, 4}));
  EXPECT_NE(base, run(c, Randomness{8, 3}));
}

TEST(Determinism, ThreadCountDoesNotChangeResults) {
  // Enough row work (64 chains of V = 32000) that two threads are really used.
  Chains c = random_chains(64, 32000, 5, 3);
  ASSERT_GE(cpu::detail::thread_count(64, 64, 32000, 2), 2);
  const auto one = run(c, Randomness{9, 1}, CpuOptions{1});
  const auto accepted_one = c.accepted;
  const auto two = run(c, Randomness{9, 1}, CpuOptions{2});
  EXPECT_EQ(one, two);
  EXPECT_EQ(accepted_one, c.accepted);
}

TEST(Determinism, PerSequenceSeedsMakeASequenceBatchInvariant) {
  // Sequence 0 of `alone` reappears as sequence 3 of a larger, differently seeded batch.
  Chains others = random_chains(6, 200, 4, 4);
  Chains alone = random_chains(1, 200, 4, 5);
  Chains mixed(200);
  std::vector<std::uint64_t> seeds;
  for (std::int32_t b = 0; b < 6; ++b) {
    if (b == 3) {
      mixed.offsets.push_back(mixed.offsets.back() + alone.offsets[1]);
      mixed.tokens.insert(mixed.tokens.end(), alone.tokens.begin(), alone.tokens.end());
      mixed.p.insert(mixed.p.end(), alone.p.begin(), alone.p.end());
      mixed.q.insert(mixed.q.end(), alone.q.begin(), alone.q.end());
      mixed.width = std::max(mixed.width, alone.width);
      seeds.push_back(4242);
    }
    const std::int32_t k = others.offsets[b + 1] - others.offsets[b];
    const std::int64_t first_row = others.offsets[b] + b;
    mixed.offsets.push_back(mixed.offsets.back() + k);
    mixed.tokens.insert(mixed.tokens.end(), others.tokens.begin() + others.offsets[b],
                        others.tokens.begin() + others.offsets[b + 1]);
    mixed.p.insert(mixed.p.end(), others.p.begin() + first_row * 200,
                   others.p.begin() + (first_row + k + 1) * 200);
    mixed.q.insert(mixed.q.end(), others.q.begin() + std::int64_t{others.offsets[b]} * 200,
                   others.q.begin() + std::int64_t{others.offsets[b + 1]} * 200);
    mixed.width = std::max(mixed.width, k + 1);
    seeds.push_back(100 + b);
  }
  const std::uint64_t alone_seed = 4242;
  for (std::uint64_t step = 0; step < 20; ++step) {
    Randomness r{1, step, &alone_seed};
    const auto solo = run(alone, r);
    const std::int32_t n = alone.accepted[0];
    const auto batch = run(mixed, Randomness{99, step, seeds.data()});
    ASSERT_EQ(mixed.accepted[3], n) << "step " << step;
    for (std::int32_t i = 0; i <= n; ++i) {
      ASSERT_EQ(mixed.token(3, i), solo[std::size_t(i)]) << "step " << step << " token " << i;
    }
  }
}

}  // namespace
}  // namespace specverify
