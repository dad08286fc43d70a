// One plain (non-speculative) draw from a row of logits with its sampling parameters, by
// Gumbel-max with noise keyed only by (seed, position, token): API.md "Coupled verification".
// Speculative decoding with the Coupled rule emits exactly these tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "specverify/core/logit_rows.hpp"
#include "specverify/cpu/logit_kernels.hpp"
#include "specverify/sampling.hpp"
#include "specverify/types.hpp"

namespace specverify {

/// The token at `position` of a sampled decode: argmax over the kept tokens of
/// (g(v) - max g) / T + Gumbel(seed, position, v); argmax g (lowest index) at T = 0.
/// Throws invalid_input for a null or empty row, parameters out of range, a NaN or +inf logit,
/// or a row whose every logit is -inf.
inline std::int32_t sample(const float* logits, std::int32_t vocab_size, const SamplingParams& params,
                           std::uint64_t seed, std::int64_t position) {
  if (!logits) throw invalid_input("sample: logits is null");
  if (vocab_size < 1) throw invalid_input("sample: vocab_size is " + std::to_string(vocab_size));
  if (const Problem problem = check_sampling_params(params)) {
    throw invalid_input(std::string("sample: ") + problem.what + " is " + std::to_string(problem.value));
  }
  thread_local std::vector<float> scratch;  // top_k and top_p candidates: one row, reused
  if (scratch.size() < static_cast<std::size_t>(vocab_size)) scratch.resize(static_cast<std::size_t>(vocab_size));
  core::LogitRow<float> row;
  row.logits = logits;
  row.n = vocab_size;
  row.params = params;
  const core::LogitView<float> view = cpu::prepare(row, scratch.data());
  if (!view.ok) {
    std::int32_t v = 0;
    while (v + 1 < vocab_size && core::processed_logit(row, v).valid) ++v;
    throw invalid_input("sample: position " + std::to_string(position) + ": logit of token " +
                        std::to_string(v) + " is " + std::to_string(logits[v]));
  }
  if (!view.has_mass()) {
    throw invalid_input("sample: position " + std::to_string(position) + ": every logit is -inf");
  }
  return cpu::LogitRows<>{vocab_size}.gumbel_argmax(view, seed, position).value;
}

}  // namespace specverify
