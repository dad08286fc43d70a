// Padded chains as an engine holds a step, for the tests of core/padded_chain.hpp on every backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "specverify/core/padded_chain.hpp"
#include "specverify/sampling.hpp"
#include "support.hpp"

namespace specverify::testing {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Sampling parameters that vary by sequence: temperature alone, with top-k, with top-p, greedy.
inline std::vector<SamplingParams> mixed_params(std::int32_t B) {
  std::vector<SamplingParams> params(static_cast<std::size_t>(B));
  for (std::int32_t b = 0; b < B; ++b) {
    params[b].temperature = b % 4 == 3 ? 0.0f : 0.8f;
    if (b % 4 == 1) params[b].top_k = 20;
    if (b % 4 == 2) params[b].top_p = 0.9f;
  }
  return params;
}

/// B sequences of K draft slots over V tokens, held as an engine holds a step: [B, K] drafts,
/// [B, K+1, V] target rows, [B, K, V] draft rows, as probabilities and as logits (their logs).
/// The slots past each count hold a token outside the vocabulary and NaN rows, so reading one
/// would be reported.
struct Padded {
  std::int32_t B, K, V;
  std::vector<std::int32_t> offsets, tokens, counts;
  std::vector<float> p, q, log_p, log_q;
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
    const auto logs = [](const std::vector<float>& rows) {
      std::vector<float> out(rows.size());
      std::transform(rows.begin(), rows.end(), out.begin(), [](float x) { return std::log(x); });
      return out;
    };
    log_p = logs(p);
    log_q = logs(q);
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

  /// The step as logits, sampled with `params` [B].
  core::PaddedLogitsChainBatch<float> logits_batch(const SamplingParams* params) const {
    core::PaddedLogitsChainBatch<float> batch;
    batch.batch_size = B;
    batch.vocab_size = V;
    batch.draft_offsets = offsets.data();
    batch.draft_tokens = tokens.data();
    batch.target_logits = log_p.data();
    batch.draft_logits = log_q.data();
    batch.target_params = params;
    batch.num_draft_tokens = counts.data();
    return batch;
  }

  /// The ragged batch of the same drafts and rows (probabilities, or with `logits` their logs),
  /// packed.
  Chains ragged(bool logits = false) const {
    const std::vector<float>& target = logits ? log_p : p;
    const std::vector<float>& draft = logits ? log_q : q;
    Chains c(V);
    for (std::int32_t b = 0; b < B; ++b) {
      std::vector<std::int32_t> xs(tokens.begin() + std::int64_t{b} * K, tokens.begin() + std::int64_t{b} * K + counts[b]);
      std::vector<std::vector<float>> ps, qs;
      for (std::int32_t j = 0; j <= counts[b]; ++j) {
        const float* row = target.data() + (std::int64_t{b} * (K + 1) + j) * V;
        ps.emplace_back(row, row + V);
      }
      for (std::int32_t j = 0; j < counts[b]; ++j) {
        const float* row = draft.data() + (std::int64_t{b} * K + j) * V;
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
