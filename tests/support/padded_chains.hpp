// Padded chains as an engine holds a step, for the tests of core/padded_chain.hpp on every backend.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "specverify/core/padded_chain.hpp"
#include "support.hpp"

namespace specverify::testing {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// B sequences of K draft slots over V tokens, held as an engine holds a step: [B, K] drafts,
/// [B, K+1, V] target rows, [B, K, V] draft rows. The slots past each count hold a token outside
/// the vocabulary and NaN rows, so reading one would be reported.
struct Padded {
  std::int32_t B, K, V;
  std::vector<std::int32_t> offsets, tokens, counts;
  std::vector<float> p, q;
  std::vector<std::int32_t> out_tokens, accepted;
  std::vector<float> logprobs;

  Padded(std::int32_t batch, std::int32_t k, std::int32_t vocab, std::mt19937_64& rng)
      : B(batch), K(k), V(vocab), tokens(std::size_t(B) * K, V + 7),
        p(std::size_t(B) * (K + 1) * V, kNaN), q(std::size_t(B) * K * V, kNaN) {
    for (std::int32_t b = 0; b <= B; ++b) offsets.push_back(b * K);
    std::uniform_int_distribution<std::int32_t> count(0, K);
    std::normal_distribution<double> noise(0.0, 1.0);
    for (std::int32_t b = 0; b < B; ++b) {
      counts.push_back(count(rng));
      // q resembles p as a draft model resembles its target, so that some drafts are kept.
      for (std::int32_t j = 0; j <= counts[b]; ++j) {
        std::vector<double> logits = random_logits(V, rng, 4.0);
        const auto target = softmax(logits);
        std::copy(target.begin(), target.end(), p.begin() + (std::int64_t{b} * (K + 1) + j) * V);
        if (j == counts[b]) break;
        for (double& l : logits) l += noise(rng);
        const auto draft = softmax(logits);
        std::copy(draft.begin(), draft.end(), q.begin() + (std::int64_t{b} * K + j) * V);
        tokens[std::size_t(b) * K + j] = sample(draft, rng);
      }
    }
  }

  core::PaddedChainBatch<float> batch() const {
    core::PaddedChainBatch<float> batch;
    batch.batch_size = B;
    batch.vocab_size = V;
    batch.draft_offsets = offsets.data();
    batch.draft_tokens = tokens.data();
    batch.target_probs = p.data();
    batch.draft_probs = q.data();
    batch.num_draft_tokens = counts.data();
    return batch;
  }

  /// The ragged batch of the same drafts and rows, packed.
  Chains ragged() const {
    Chains c(V);
    for (std::int32_t b = 0; b < B; ++b) {
      std::vector<std::int32_t> xs(tokens.begin() + std::int64_t{b} * K, tokens.begin() + std::int64_t{b} * K + counts[b]);
      std::vector<std::vector<float>> ps, qs;
      for (std::int32_t j = 0; j <= counts[b]; ++j) {
        const float* row = p.data() + (std::int64_t{b} * (K + 1) + j) * V;
        ps.emplace_back(row, row + V);
      }
      for (std::int32_t j = 0; j < counts[b]; ++j) {
        const float* row = q.data() + (std::int64_t{b} * K + j) * V;
        qs.emplace_back(row, row + V);
      }
      c.add(xs, ps, qs);
    }
    return c;
  }

  /// Outputs [B, K+1] filled with 12345 (logprobs NaN).
  ChainOutput output() {
    out_tokens.assign(std::size_t(B) * (K + 1), 12345);
    accepted.assign(std::size_t(B), 12345);
    logprobs.assign(std::size_t(B) * (K + 1), kNaN);
    ChainOutput out{out_tokens.data(), K + 1, accepted.data()};
    out.logprobs = logprobs.data();
    return out;
  }
};

}  // namespace specverify::testing
