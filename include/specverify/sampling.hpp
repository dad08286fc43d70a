// Per-sequence sampling parameters for the logits front end (API.md "Logits and sampling
// parameters"), and their range check.
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/rule.hpp"

namespace specverify {

struct SamplingParams {             // per sequence; the defaults change nothing
  float temperature = 1.0f;         // >= 0; 0 means greedy: p is one-hot on argmax (lowest index on ties)
  std::int32_t top_k = 0;           // >= 0; 0 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1]; 0 = off
};

/// The first parameter out of range, named with the value seen: temperature >= 0 and finite,
/// top_k >= 0, top_p in (0, 1], min_p in [0, 1]. NaN is out of every range.
SPECVERIFY_HD inline Problem check_sampling_params(const SamplingParams& params) {
  if (Problem p = Problem::unless_within("temperature", params.temperature, 0.0, 3.4028234663852886e+38)) {
    return p;
  }
  if (params.top_k < 0) return Problem{"top_k", static_cast<double>(params.top_k)};
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) return Problem{"top_p", params.top_p};
  return Problem::unless_within("min_p", params.min_p, 0.0, 1.0);
}

}  // namespace specverify
