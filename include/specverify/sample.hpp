// One plain (non-speculative) draw from a row of logits with its sampling parameters, by
// Gumbel-max with noise keyed only by (seed, position, token): docs/api.md "Coupled".
// Speculative decoding with the Coupled rule emits exactly these tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "specverify/core/logit_rows.hpp"
#include "specverify/core/overlay.hpp"
#include "specverify/core/validate_logits.hpp"
#include "specverify/cpu/logit_kernels.hpp"
#include "specverify/sampling.hpp"
#include "specverify/types.hpp"

namespace specverify {

/// The token at `position` of a sampled decode: argmax over the kept tokens of
/// (g(v) - max g) / T + Gumbel(seed, position, v); argmax g (lowest index) at T = 0.
/// `history_tokens` (ascending, unique) with `history_counts` (>= 0) and the bias list are the
/// row's penalties and logit bias (docs/api.md "Penalties and logit bias"); the
/// row's own drafts are in the history already.
/// Throws invalid_input for a null or empty row, parameters out of range, a NaN or +inf logit,
/// a row whose every logit is -inf, a bad list entry, or a logit that bias or penalties overflow.
inline std::int32_t sample(const float* logits, std::int32_t vocab_size, const SamplingParams& params,
                           std::uint64_t seed, std::int64_t position, const std::int32_t* history_tokens,
                           const std::int32_t* history_counts, std::int32_t history_size,
                           const std::int32_t* bias_tokens = nullptr, const float* bias_values = nullptr,
                           std::int32_t bias_size = 0) {
  if (!logits) throw invalid_input("sample: logits is null");
  if (vocab_size < 1) throw invalid_input("sample: vocab_size is " + std::to_string(vocab_size));
  core::detail::check_logits_vocab(vocab_size, "sample: ");
  if (const Problem problem = check_sampling_params(params)) {
    throw invalid_input(std::string("sample: ") + problem.what + " is " + std::to_string(problem.value));
  }
  // Before the batch checks, which would name the offsets built from these sizes.
  if (history_size < 0) throw invalid_input("sample: history_size is " + std::to_string(history_size) + " (must be >= 0)");
  if (bias_size < 0) throw invalid_input("sample: bias_size is " + std::to_string(bias_size) + " (must be >= 0)");
  // The batch checks, on a batch of one sequence: the same rules and the same words.
  const std::int32_t history_offsets[2] = {0, history_size}, bias_offsets[2] = {0, bias_size};
  LogitsChainBatch<float> one;
  one.batch_size = 1;
  one.vocab_size = vocab_size;
  one.history_offsets = history_size != 0 ? history_offsets : nullptr;
  one.history_tokens = history_tokens;
  one.history_counts = history_counts;
  one.bias_offsets = bias_size != 0 ? bias_offsets : nullptr;
  one.bias_tokens = bias_tokens;
  one.bias_values = bias_values;
  thread_local std::vector<std::int32_t> bias_order;
  try {
    core::detail::check_penalty_lists(one, bias_order);
  } catch (const invalid_input& e) {
    const std::string what = e.what();
    throw invalid_input("sample: " + what.substr(what.find("sequence 0: ") == std::string::npos ? what.find(": ") + 2
                                                                                               : what.find("sequence 0: ") + 12));
  }
  thread_local std::vector<float> scratch;  // top_k and top_p candidates: one row, reused
  if (scratch.size() < static_cast<std::size_t>(vocab_size)) scratch.resize(static_cast<std::size_t>(vocab_size));
  core::LogitRow<float> row;
  row.logits = logits;
  row.n = vocab_size;
  row.params = params;
  row.lists.penalise = !penalties_off(params);
  row.lists.history_tokens = history_tokens;
  row.lists.history_counts = history_counts;
  row.lists.history_size = history_size;
  if (bias_size > 0) {
    row.lists.bias_tokens = bias_tokens;
    row.lists.bias_values = bias_values;
    row.lists.bias_order = bias_order.data();
    row.lists.bias_size = bias_size;
  }
  thread_local core::OverlayRoom overlay;
  overlay.build(row);
  const core::LogitView<float> view = cpu::prepare(row, scratch.data());
  if (!view.ok) {
    std::int32_t v = 0;
    while (v + 1 < vocab_size && core::processed_logit(row, v).valid) ++v;
    const core::Processed before = core::guided_logit(row, v);
    if (const std::int32_t k = row.overlay.find(v); k >= 0) {
      const float after = core::penalised(before.g, row.overlay, k, row.params);
      if (before.valid && core::finite(before.g) && !core::finite(after)) {
        throw invalid_input("sample: position " + std::to_string(position) + ": bias and penalties give " +
                            std::to_string(after) + " at token " + std::to_string(v) + " (logit " +
                            std::to_string(before.g) + ": a finite logit must stay finite)");
      }
    }
    throw invalid_input("sample: position " + std::to_string(position) + ": logit of token " +
                        std::to_string(v) + " is " + std::to_string(logits[v]));
  }
  if (!view.has_mass()) {
    throw invalid_input("sample: position " + std::to_string(position) + ": every logit is -inf");
  }
  return cpu::LogitRows<>{vocab_size}.gumbel_argmax(view, seed, position).value;
}

/// The token at `position` without penalties or bias.
inline std::int32_t sample(const float* logits, std::int32_t vocab_size, const SamplingParams& params,
                           std::uint64_t seed, std::int64_t position) {
  return sample(logits, vocab_size, params, seed, position, nullptr, nullptr, 0);
}

}  // namespace specverify
