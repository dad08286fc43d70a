// Synthetic LLM-like batches for benchmarks: heavy-tailed target logits, a draft that is the
// target's logits plus Gaussian noise of a chosen size (its misalignment).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "specverify/specverify.hpp"

namespace specverify::bench {

/// A batch of B chains of K drafts each over V, with owned storage.
struct SyntheticBatch {
  std::int32_t B, K, V;
  std::vector<std::int32_t> offsets, tokens, out_tokens, accepted;
  std::vector<float> p, q;

  ChainBatch<float> batch() const {
    return ChainBatch<float>{B, V, offsets.data(), tokens.data(), p.data(), q.data()};
  }
  ChainOutput output() { return ChainOutput{out_tokens.data(), K + 1, accepted.data()}; }

  /// Bytes of the row pair (p, q) at position j of every chain: what a residual draw there reads.
  std::int64_t row_pair_bytes() const { return std::int64_t{B} * V * 2 * sizeof(float); }
};

inline void softmax_into(const std::vector<float>& logits, float* out) {
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) sum += out[i] = std::exp(logits[i] - top);
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(out[i] / sum);
}

/// Target logits are Student-t (3 dof) clamped to +-12: heavy-tailed, yet no probability
/// underflows, so every divergence stays finite and no row holds subnormals.
inline constexpr float kLogitBound = 12.0f;

template <class Rng>
void heavy_tailed_logits(std::vector<float>& logits, Rng& rng) {
  std::student_t_distribution<float> heavy(3.0f);
  for (auto& l : logits) l = std::clamp(heavy(rng), -kLogitBound, kLogitBound);
}

/// `misalignment` is the standard deviation of the noise added to the target's logits to make
/// the draft's; 0 gives q == p. When `reject_first`, p(x) = 0 at every chain's first draft, so
/// every chain is rejected there and goes through the residual draw.
inline SyntheticBatch make_batch(std::int32_t B, std::int32_t K, std::int32_t V,
                                 double misalignment, bool reject_first, std::uint64_t seed) {
  SyntheticBatch s{B, K, V, {}, {}, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, static_cast<float>(misalignment));
  s.p.resize(std::size_t(B) * (K + 1) * V);
  s.q.resize(std::size_t(B) * K * V);
  std::vector<float> logits(static_cast<std::size_t>(V)), draft_logits(static_cast<std::size_t>(V));
  for (std::int32_t b = 0; b < B; ++b) {
    s.offsets.push_back(b * K);
    for (std::int32_t j = 0; j <= K; ++j) {
      heavy_tailed_logits(logits, rng);
      float* p = s.p.data() + (std::size_t(b) * (K + 1) + j) * V;
      softmax_into(logits, p);
      if (j == K) break;
      for (std::int32_t v = 0; v < V; ++v) draft_logits[v] = logits[v] + noise(rng);
      float* q = s.q.data() + (std::size_t(b) * K + j) * V;
      softmax_into(draft_logits, q);
      std::discrete_distribution<std::int32_t> draft(q, q + V);
      const std::int32_t x = draft(rng);
      s.tokens.push_back(x);
      if (reject_first && j == 0) p[x] = 0.0f;
    }
  }
  s.offsets.push_back(B * K);
  s.out_tokens.resize(std::size_t(B) * (K + 1));
  s.accepted.resize(std::size_t(B));
  return s;
}

/// A batch of B chains of K drafts whose rows are copies of a small pool of distinct synthetic
/// rows: every chain reads its own memory (as in an engine) without generating B (K + 1) softmax
/// rows, which at B = 256, K = 8, V = 256000 would take minutes.
inline SyntheticBatch tile_batch(std::int32_t B, std::int32_t K, std::int32_t V, bool reject_first,
                                 std::uint64_t seed) {
  constexpr std::int32_t kPool = 16;
  const SyntheticBatch pool = make_batch(1, kPool, V, 1.0, false, seed);
  SyntheticBatch s{B, K, V, {}, {}, {}, {}, {}, {}};
  s.p.resize(std::size_t(B) * (K + 1) * V);
  s.q.resize(std::size_t(B) * K * V);
  for (std::int32_t b = 0; b < B; ++b) {
    s.offsets.push_back(b * K);
    for (std::int32_t j = 0; j <= K; ++j) {
      const std::int32_t r = (b * (K + 1) + j) % kPool;  // pool row r, drafted token pool.tokens[r]
      float* p = s.p.data() + (std::size_t(b) * (K + 1) + j) * V;
      std::copy_n(pool.p.data() + std::size_t(r) * V, V, p);
      if (j == K) break;
      std::copy_n(pool.q.data() + std::size_t(r) * V, V, s.q.data() + (std::size_t(b) * K + j) * V);
      s.tokens.push_back(pool.tokens[r]);
      if (reject_first && j == 0) p[pool.tokens[r]] = 0.0f;
    }
  }
  s.offsets.push_back(B * K);
  s.out_tokens.resize(std::size_t(B) * (K + 1));
  s.accepted.resize(std::size_t(B));
  return s;
}

}  // namespace specverify::bench
