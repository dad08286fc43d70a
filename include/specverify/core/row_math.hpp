// Per-element row arithmetic shared by every backend (host and device): the draw's chunking and
// weights, and the terms of entropy and the divergences. One definition of
// each term, and sums that are core::FixedSum, keep the backends' tokens and statistics identical.
#pragma once

#include <cmath>
#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/core/fixed_sum.hpp"
#include "specverify/core/fused.hpp"
#include "specverify/rule.hpp"

namespace specverify::core {

/// Elements per chunk of the two-level draw: at least 1024 and at most kMaxChunks chunks per row,
/// so the chunk sums fit on the stack (CPU) or in shared memory (CUDA). The chunking is part of
/// the draw's definition: backends that chunk alike find the crossing in the same chunk.
inline constexpr std::int32_t kMaxChunks = 256;
SPECVERIFY_HD constexpr std::int32_t chunk_length(std::int32_t n) {
  const std::int64_t even = (std::int64_t{n} + kMaxChunks - 1) / kMaxChunks;
  const std::int64_t rounded = (even + 63) / 64 * 64;
  return static_cast<std::int32_t>(rounded > 1024 ? rounded : 1024);
}

/// The sums of a row's (or slice's) weights, chunk by chunk, at one scale: the draw's first level.
struct ChunkSums {
  FixedSum chunk[kMaxChunks];
  FixedSum total;
  std::int32_t chunks = 0;
};

/// Residual weight max(p - q, 0), in double where p - q of two floats is (nearly always) exact.
SPECVERIFY_HD inline double residual_weight(double p, double q) { return p > q ? p - q : 0.0; }

/// -p log p with 0 log 0 = 0.
SPECVERIFY_HD inline double entropy_term(double p) { return p > 0 ? -p * std::log(p) : 0.0; }

/// a log(a / b): 0 when a = 0, +inf when a > 0 = b.
SPECVERIFY_HD inline double kl_term(double a, double b) {
  if (a <= 0) return 0.0;
  if (b <= 0) return HUGE_VAL;
  return a * std::log(a / b);
}

/// The contribution of one token (p_i, q_i) to D(p, q); D is the sum over the vocabulary.
SPECVERIFY_HD inline double divergence_term(Divergence d, double p, double q) {
  const double m = 0.5 * (p + q);
  switch (d) {
    case Divergence::kl_target_draft: return kl_term(p, q);
    case Divergence::kl_draft_target: return kl_term(q, p);
    case Divergence::js: return 0.5 * (kl_term(p, m) + kl_term(q, m));
    case Divergence::js_fsd: return 0.5 * (kl_term(m, p) + kl_term(m, q));
    case Divergence::tv: break;
  }
  return 0.5 * std::fabs(p - q);
}

}  // namespace specverify::core
