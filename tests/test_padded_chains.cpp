// Padded chains (core/padded_chain.hpp, Python's specverify.padded) on the CPU, of probabilities
// and of logits: sequence b walks its first num_draft_tokens[b] slots in place and gets the
// tokens, counts, logprobs and statistics of the ragged batch that packs those rows; the slots
// past a count (tokens outside the vocabulary, NaN rows) are never read; a count outside its
// slots is named before any write.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "padded_chains.hpp"
#include "support.hpp"

namespace specverify {
namespace {

using testing::kNaN;
using testing::mixed_params;
using testing::Padded;

template <class Rule>
VerifyStats verify_padded(const Rule& rule, const core::PaddedChainBatch<float>& batch, const Randomness& r,
                          const ChainOutput& out, std::int32_t threads = 0) {
  return verify(rule, batch, r, out, CpuOptions{threads});
}

/// The padded step (probabilities, or with `logits` their logs under mixed_params) gives the
/// outputs and statistics of the ragged batch that packs its rows.
template <class Rule>
void expect_ragged_outputs(const Rule& rule, std::uint64_t seed, bool logits = false) {
  std::mt19937_64 rng(seed);
  Padded padded(23, 5, 300, rng);
  const std::vector<std::int64_t> positions(std::size_t(padded.B), 40);  // Coupled keys its samples by them
  Randomness r{seed, 9};
  r.positions = positions.data();
  const std::vector<SamplingParams> params = mixed_params(padded.B);
  const testing::Chains ragged = padded.ragged(logits);
  std::vector<std::int32_t> tokens(std::size_t(padded.B) * (padded.K + 1), 12345), accepted(std::size_t(padded.B), 12345);
  std::vector<float> logprobs(tokens.size(), kNaN);
  ChainOutput out{tokens.data(), padded.K + 1, accepted.data()};
  out.logprobs = logprobs.data();
  VerifyStats stats, expected;
  if (logits) {
    const core::PaddedLogitsChainBatch<float> batch = padded.logits_batch(params.data());
    stats = verify(rule, batch, r, padded.output());
    const ChainBatch<float> shape = ragged.batch();
    LogitsChainBatch<float> whole{shape.batch_size, shape.vocab_size, shape.draft_offsets, shape.draft_tokens,
                                  shape.target_probs, shape.draft_probs};
    whole.target_params = params.data();
    expected = verify(rule, whole, r, out);
  } else {
    stats = verify_padded(rule, padded.batch(), r, padded.output());
    expected = verify(rule, ragged.batch(), r, out);
  }

  EXPECT_EQ(padded.out_tokens, tokens);
  EXPECT_EQ(padded.accepted, accepted);
  ASSERT_EQ(padded.logprobs.size(), logprobs.size());
  for (std::size_t i = 0; i < logprobs.size(); ++i) {
    EXPECT_TRUE(std::isnan(padded.logprobs[i]) ? std::isnan(logprobs[i]) : padded.logprobs[i] == logprobs[i]) << i;
  }
  EXPECT_EQ(stats.drafted, expected.drafted);
  EXPECT_EQ(stats.accepted, expected.accepted);
  EXPECT_EQ(stats.relaxed, expected.relaxed);
  EXPECT_EQ(stats.target_checked, expected.target_checked);
  // The comparison has teeth: the batch has short chains, and some drafts are kept.
  std::int32_t short_chains = 0;
  for (std::int32_t b = 0; b < padded.B; ++b) short_chains += padded.counts[b] < padded.K;
  EXPECT_GT(short_chains, 0);
  EXPECT_GT(expected.accepted, 0);
}

TEST(PaddedChains, StandardGivesTheRaggedBatchsOutputs) { expect_ragged_outputs(Standard{}, 1); }
TEST(PaddedChains, GreedyGivesTheRaggedBatchsOutputs) { expect_ragged_outputs(Greedy{}, 2); }
TEST(PaddedChains, EarsGivesTheRaggedBatchsOutputs) { expect_ragged_outputs(Ears{0.3f}, 3); }
TEST(PaddedChains, BlockGivesTheRaggedBatchsOutputs) { expect_ragged_outputs(Block{}, 4); }
TEST(PaddedChains, TraversalGivesTheRaggedBatchsOutputs) { expect_ragged_outputs(Traversal{}, 5); }

TEST(PaddedLogitsChains, EveryKindOfRuleGivesTheRaggedBatchsOutputs) {
  expect_ragged_outputs(Standard{}, 21, true);
  expect_ragged_outputs(Greedy{}, 22, true);
  expect_ragged_outputs(Ears{0.3f}, 23, true);
  expect_ragged_outputs(Block{}, 24, true);
  expect_ragged_outputs(Traversal{}, 25, true);
  expect_ragged_outputs(Coupled{}, 26, true);
}

TEST(PaddedChains, ThreadsGiveOneThreadsTokens) {
  std::mt19937_64 rng(6);
  Padded padded(64, 4, 2000, rng);
  verify_padded(Standard{}, padded.batch(), {6, 0}, padded.output(), 1);
  const auto one = padded.out_tokens;
  verify_padded(Standard{}, padded.batch(), {6, 0}, padded.output(), 4);
  EXPECT_EQ(padded.out_tokens, one);
}

/// Expects invalid_input with exactly `message` and no output written.
void expect_refused(Padded& padded, const core::PaddedChainBatch<float>& batch, const std::string& message) {
  try {
    verify_padded(Standard{}, batch, {1, 0}, padded.output());
    ADD_FAILURE() << "no invalid_input; expected " << message;
  } catch (const invalid_input& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
  EXPECT_THAT(padded.out_tokens, ::testing::Each(12345));
  EXPECT_THAT(padded.accepted, ::testing::Each(12345));
}

TEST(PaddedChains, ACountOutsideItsSlotsIsNamedBeforeAnyWrite) {
  std::mt19937_64 rng(7);
  Padded padded(4, 3, 50, rng);
  padded.counts[2] = 4;
  expect_refused(padded, padded.batch(),
                 "specverify::verify: sequence 2: num_draft_tokens = 4 must be in [0, 3] (its draft slots)");
  padded.counts[2] = -1;
  expect_refused(padded, padded.batch(),
                 "specverify::verify: sequence 2: num_draft_tokens = -1 must be in [0, 3] (its draft slots)");
}

TEST(PaddedLogitsChains, ACountOutsideItsSlotsIsNamedBeforeAnyWrite) {
  std::mt19937_64 rng(27);
  Padded padded(4, 3, 50, rng);
  padded.counts[1] = 5;
  const std::vector<SamplingParams> params = mixed_params(padded.B);
  const core::PaddedLogitsChainBatch<float> batch = padded.logits_batch(params.data());
  try {
    verify(Standard{}, batch, {1, 0}, padded.output());
    ADD_FAILURE() << "no invalid_input";
  } catch (const invalid_input& e) {
    EXPECT_EQ(std::string(e.what()),
              "specverify::verify: sequence 1: num_draft_tokens = 5 must be in [0, 3] (its draft slots)");
  }
  EXPECT_THAT(padded.out_tokens, ::testing::Each(12345));
  EXPECT_THAT(padded.accepted, ::testing::Each(12345));
}

TEST(PaddedChains, NullCountsAreNamed) {
  std::mt19937_64 rng(8);
  Padded padded(2, 3, 50, rng);
  core::PaddedChainBatch<float> batch = padded.batch();
  batch.num_draft_tokens = nullptr;
  expect_refused(padded, batch, "specverify::verify: num_draft_tokens is null");
}

TEST(PaddedChains, DraftsWithinTheCountAreStillChecked) {
  std::mt19937_64 rng(9);
  Padded padded(3, 4, 50, rng);
  padded.counts = {4, 2, 3};
  for (std::int32_t j = 0; j < 4; ++j) padded.tokens[j] = 1;
  for (std::int32_t j = 0; j < 5; ++j) {
    const auto row = testing::random_distribution(50, rng);
    std::copy(row.begin(), row.end(), padded.p.begin() + j * 50);
    if (j < 4) std::copy(row.begin(), row.end(), padded.q.begin() + j * 50);
  }
  padded.tokens[3] = 50;
  expect_refused(padded, padded.batch(), "specverify::verify: sequence 0, position 3: draft token 50 is outside [0, 50)");
}

}  // namespace
}  // namespace specverify
