// Per-sequence sampling parameters for the logits front end (docs/api.md "Logits and
// sampling parameters"), and their range check.
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
  float repetition_penalty = 1.0f;  // > 0 and finite; 1 = off
  float presence_penalty = 0.0f;    // finite; 0 = off
  float frequency_penalty = 0.0f;   // finite; 0 = off
};

/// Whether the parameters change no logit in step 3 (penalties): such rows need no overlay.
SPECVERIFY_HD inline bool penalties_off(const SamplingParams& params) {
  return params.repetition_penalty == 1.0f && params.presence_penalty == 0.0f && params.frequency_penalty == 0.0f;
}

/// The first parameter out of range, named with the value seen: temperature >= 0 and finite,
/// top_k >= 0, top_p in (0, 1], min_p in [0, 1], repetition_penalty > 0, presence_penalty and
/// frequency_penalty finite. NaN is out of every range.
SPECVERIFY_HD inline Problem check_sampling_params(const SamplingParams& params) {
  if (Problem p = Problem::unless_within("temperature", params.temperature, 0.0, 3.4028234663852886e+38)) {
    return p;
  }
  if (params.top_k < 0) return Problem{"top_k", static_cast<double>(params.top_k)};
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) return Problem{"top_p", params.top_p};
  if (Problem p = Problem::unless_within("min_p", params.min_p, 0.0, 1.0)) return p;
  constexpr double kMax = 3.4028234663852886e+38;
  if (!(params.repetition_penalty > 0.0f) || !(params.repetition_penalty <= kMax)) {
    return Problem{"repetition_penalty", params.repetition_penalty};
  }
  if (Problem p = Problem::unless_within("presence_penalty", params.presence_penalty, -kMax, kMax)) return p;
  return Problem::unless_within("frequency_penalty", params.frequency_penalty, -kMax, kMax);
}

}  // namespace specverify
