// consumer.c's twin over the C++ API: the same inputs (consumer_inputs.h), the same calls through
// specverify::verify and specverify::sample, the same outputs hashed in the same order, so its
// `hash <16 hex digits>` line must be consumer.c's (the c_api_consumer test compares them).
// Notation: p = target, q = draft.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "consumer_inputs.h"
#include "specverify/specverify.hpp"

namespace sv = specverify;

namespace {

std::uint64_t hash_stats(std::uint64_t h, const sv::VerifyStats& s) {
  h = ci_fnv(h, &s.drafted, sizeof s.drafted);
  h = ci_fnv(h, &s.accepted, sizeof s.accepted);
  h = ci_fnv(h, &s.relaxed, sizeof s.relaxed);
  return ci_fnv(h, &s.target_checked, sizeof s.target_checked);
}

void fill(std::int32_t* tokens, float* logprobs, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) tokens[i] = CI_SENTINEL_TOKEN, logprobs[i] = CI_SENTINEL_LOGPROB;
}

}  // namespace

int main() {
  static ci_inputs in;
  ci_build(&in);
  std::uint64_t h = CI_FNV_START;
  std::int32_t tokens[CI_B * CI_WIDTH], accepted[CI_B];
  float logprobs[CI_B * CI_WIDTH];
  const sv::ChainOutput out{tokens, CI_WIDTH, accepted, logprobs};
  try {
    // 1. Chains of probability rows, Standard.
    sv::ChainBatch<float> chains;
    chains.batch_size = CI_B;
    chains.vocab_size = CI_V;
    chains.draft_offsets = in.offsets;
    chains.draft_tokens = in.tokens;
    chains.target_probs = in.p;
    chains.draft_probs = in.q;
    sv::Randomness r{11, 2};
    fill(tokens, logprobs, CI_B * CI_WIDTH);
    sv::VerifyStats stats = sv::verify(sv::Standard{}, chains, r, out);
    h = ci_fnv(h, tokens, sizeof tokens);
    h = ci_fnv(h, accepted, sizeof accepted);
    h = ci_fnv(h, logprobs, sizeof logprobs);
    h = hash_stats(h, stats);

    // 2. Chains of float logits with sampling parameters, penalties and bias, per-sequence seeds, EARS.
    sv::SamplingParams params[CI_B];
    for (int b = 0; b < CI_B; ++b) {
      params[b].temperature = in.temperature[b];
      params[b].top_k = in.top_k[b];
      params[b].top_p = in.top_p[b];
      params[b].min_p = in.min_p[b];
      params[b].repetition_penalty = in.repetition_penalty[b];
      params[b].presence_penalty = in.presence_penalty[b];
      params[b].frequency_penalty = in.frequency_penalty[b];
    }
    sv::LogitsChainBatch<float> logits;
    logits.batch_size = CI_B;
    logits.vocab_size = CI_V;
    logits.draft_offsets = in.offsets;
    logits.draft_tokens = in.tokens;
    logits.target_logits = in.target_logits;
    logits.draft_logits = in.draft_logits;
    logits.target_params = params;
    logits.history_offsets = in.history_offsets;
    logits.history_tokens = in.history_tokens;
    logits.history_counts = in.history_counts;
    logits.bias_offsets = in.bias_offsets;
    logits.bias_tokens = in.bias_tokens;
    logits.bias_values = in.bias_values;
    r.sequence_seeds = in.sequence_seeds;
    fill(tokens, logprobs, CI_B * CI_WIDTH);
    stats = sv::verify(sv::Ears{0.25f}, logits, r, out, sv::CpuOptions{1});
    h = ci_fnv(h, tokens, sizeof tokens);
    h = ci_fnv(h, accepted, sizeof accepted);
    h = ci_fnv(h, logprobs, sizeof logprobs);
    h = hash_stats(h, stats);

    // 3. Trees of sampled children over probability rows, Standard.
    std::int32_t tree_tokens[CI_TB * CI_TWIDTH], tree_accepted[CI_TB], tree_nodes[CI_TB * CI_TWIDTH];
    float tree_logprobs[CI_TB * CI_TWIDTH];
    sv::TreeBatch<float> trees;
    trees.batch_size = CI_TB;
    trees.vocab_size = CI_V;
    trees.node_offsets = in.tree_offsets;
    trees.parents = in.parents;
    trees.draft_tokens = in.tree_tokens;
    trees.target_probs = in.tree_p;
    trees.draft_probs = in.tree_q;
    trees.drafted = sv::Drafted::sampled;
    r.sequence_seeds = nullptr;
    r.seed = 5;
    fill(tree_tokens, tree_logprobs, CI_TB * CI_TWIDTH);
    for (auto& n : tree_nodes) n = CI_SENTINEL_TOKEN;
    stats = sv::verify(sv::Standard{}, trees, r,
                       sv::TreeOutput{tree_tokens, CI_TWIDTH, tree_accepted, tree_nodes, tree_logprobs});
    h = ci_fnv(h, tree_tokens, sizeof tree_tokens);
    h = ci_fnv(h, tree_accepted, sizeof tree_accepted);
    h = ci_fnv(h, tree_nodes, sizeof tree_nodes);
    h = ci_fnv(h, tree_logprobs, sizeof tree_logprobs);
    h = hash_stats(h, stats);

    // 4. sample: one row, with history and bias, at several positions.
    sv::SamplingParams sp;
    sp.temperature = 0.75f;
    sp.top_k = 20;
    sp.repetition_penalty = 1.25f;
    sp.frequency_penalty = 0.5f;
    for (int i = 0; i < CI_SAMPLES; ++i) {
      const std::int32_t token = sv::sample(in.sample_logits, CI_V, sp, 99, i, in.sample_history_tokens,
                                            in.sample_history_counts, 3, in.sample_bias_tokens, in.sample_bias_values, 2);
      h = ci_fnv(h, &token, sizeof token);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_hash: %s\n", e.what());
    return 1;
  }

  // 5. The bad input: draft token V. The C API's code and message (cut at 511 bytes, as sv_error's).
  std::int32_t bad_tokens[CI_DRAFTS];
  std::memcpy(bad_tokens, in.tokens, sizeof bad_tokens);
  bad_tokens[4] = CI_V;
  sv::ChainBatch<float> bad;
  bad.batch_size = CI_B;
  bad.vocab_size = CI_V;
  bad.draft_offsets = in.offsets;
  bad.draft_tokens = bad_tokens;
  bad.target_probs = in.p;
  bad.draft_probs = in.q;
  std::string message;
  try {
    sv::verify(sv::Standard{}, bad, sv::Randomness{5, 2}, out);
    std::fprintf(stderr, "consumer_hash: the bad input was accepted\n");
    return 1;
  } catch (const sv::invalid_input& e) {
    message = std::string(e.what()).substr(0, 511);
  }
  const int code = 1;  // SV_INVALID_INPUT
  h = ci_fnv(h, &code, sizeof code);
  h = ci_fnv(h, message.data(), message.size());

  std::printf("hash %016" PRIx64 "\n", h);
  return 0;
}
