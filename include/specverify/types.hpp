// The public layout types of docs/api.md ("Layout"): what an engine hands to verify() and what it gets back.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "specverify/dtypes.hpp"
#include "specverify/sampling.hpp"

namespace specverify {

inline constexpr std::int32_t kNoToken = -1;

/// A rank's slice of the vocabulary (docs/api.md "Sharded vocabulary"): element i of this call's rows
/// is token vocab_start + i. The default, one rank holding everything, changes nothing; any other
/// value needs the verify overload that takes a communicator.
struct VocabShard {
  std::int32_t rank = 0;              // 0 .. ranks - 1
  std::int32_t ranks = 1;
  std::int32_t vocab_start = 0;
  std::int32_t local_vocab_size = 0;  // this call's row length; 0 (with ranks == 1) means vocab_size

  bool whole() const { return rank == 0 && ranks == 1 && vocab_start == 0 && local_vocab_size == 0; }
};

/// A batch of draft chains with their target rows p and (optionally) draft rows q.
/// Sequence b drafted k_b = draft_offsets[b+1] - draft_offsets[b] tokens and owns the k_b + 1
/// target rows starting at draft_offsets[b] + b; the last of them is its bonus row.
template <class Prob = float>
struct ChainBatch {
  std::int32_t batch_size = 0;
  std::int32_t vocab_size = 0;
  const std::int32_t* draft_offsets{};
  const std::int32_t* draft_tokens{};
  const Prob* target_probs{};
  const Prob* draft_probs{};  // nullptr: q is one-hot on the drafted token
  std::int64_t target_stride = 0;  // 0 means vocab_size
  std::int64_t draft_stride = 0;   // 0 means vocab_size
  const float* target_row_max{};   // optional max_v p(v) per target row
  VocabShard shard{};                             // this rank's slice (sharded verify only)
};

/// Where verify() writes: per sequence n_b accepted drafts, exactly one more token, then kNoToken.
struct ChainOutput {
  std::int32_t* tokens{};
  std::int32_t row_width = 0;
  std::int32_t* num_accepted{};
  float* logprobs{};  // optional [B][row_width]: log p(token) under the row it was emitted from
};

/// How the children of each tree node were drafted; the lossless tree test depends on it.
enum class Drafted {
  sampled,                      // independently from q (with replacement; duplicates allowed)
  sampled_without_replacement,  // one after another from q with earlier siblings removed
  deterministic,                // chosen without sampling (top-k of q, beam, lookup): q is not read
};

/// A batch of draft trees. Sequence b owns nodes node_offsets[b] .. node_offsets[b+1]-1; a node's
/// parent is a sequence-local index below its own (-1: a child of the root, the last committed
/// token). Its k_b + 1 target rows start at node_offsets[b] + b: row 0 is p at the root, row 1 + i
/// is p after node i. Draft rows are laid out alike: the q that node's children were drafted from.
template <class Prob = float>
struct TreeBatch {
  std::int32_t batch_size = 0;
  std::int32_t vocab_size = 0;
  const std::int32_t* node_offsets{};
  const std::int32_t* parents{};
  const std::int32_t* draft_tokens{};
  const Prob* target_probs{};
  const Prob* draft_probs{};  // nullptr when deterministic
  std::int64_t target_stride = 0, draft_stride = 0;  // 0 means vocab_size
  Drafted drafted = Drafted::sampled;
  VocabShard shard{};                             // this rank's slice (sharded verify only)
};

/// Where verify() writes for trees: the accepted path's tokens, one more token, then kNoToken.
struct TreeOutput {
  std::int32_t* tokens{};
  std::int32_t row_width = 0;         // >= deepest path + 1
  std::int32_t* num_accepted{};
  std::int32_t* accepted_nodes{};     // optional [B][row_width]: sequence-local node of each
                                      //   accepted token (KV-cache compaction), then kNoToken
  float* logprobs{};                  // optional, as ChainOutput
};

/// Seeds and optional caller uniforms. Advance `offset` between steps (any new value gives fresh
/// uniforms: the offset is part of the Philox counter, not a count of draws).
struct Randomness {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  const std::uint64_t* sequence_seeds{};
  const float* accept_uniforms{};
  const float* sample_uniforms{};
  const std::int64_t* positions{};  // [B]: absolute position of sequence b's first draft (Coupled)
};

struct VerifyStats {
  std::int64_t drafted = 0;         // positions offered: sum of k_b
  std::int64_t accepted = 0;        // sum of n_b
  std::int64_t relaxed = 0;         // accepted only through a lossy path
  std::int64_t target_checked = 0;  // positions whose decision consulted p
};

/// A batch of draft chains whose rows are logits: verify applies each sequence's sampling
/// parameters itself (docs/api.md "Logits and sampling parameters"), without writing probability rows.
/// Rows are laid out as ChainBatch's; the optional fields are independent of one another.
template <class Logit = float>
struct LogitsChainBatch {
  std::int32_t batch_size = 0;
  std::int32_t vocab_size = 0;                    // V of the target
  const std::int32_t* draft_offsets{};
  const std::int32_t* draft_tokens{};             // target vocabulary ids
  const Logit* target_logits{};
  const Logit* draft_logits{};                    // nullptr: one-hot drafts
  std::int64_t target_stride = 0;                 // 0 means vocab_size
  std::int64_t draft_stride = 0;                  // 0 means the draft vocabulary size
  const SamplingParams* target_params{};          // [B] (required)
  const SamplingParams* draft_params{};           // [B] what the drafter sampled with; nullptr: the target's
  std::int32_t draft_vocab_size = 0;              // reduced draft vocabulary: 0 = the target's
  const std::int32_t* draft_to_target{};          // [draft_vocab_size]: injective into [0, V)
  const Logit* unconditional_logits{};            // classifier-free guidance companion rows
  std::int64_t unconditional_stride = 0;          // 0 means vocab_size
  const std::int64_t* unconditional_first_row{};  // [B]: first of sequence b's k_b + 1 rows, -1 = none
  const float* guidance_scale{};                  // [B]: s_b (finite)
  const std::uint32_t* allowed_tokens{};          // [target rows][ceil(V / 32)] grammar bitmask
  // Penalties and logit bias (docs/api.md "Penalties and logit bias"): per
  // sequence, ragged like the drafts; a pointer may be null when its list's total is 0.
  const std::int32_t* history_offsets{};          // [B+1], or nullptr: no history
  const std::int32_t* history_tokens{};           // prompt and generated tokens: ascending, unique per sequence
  const std::int32_t* history_counts{};           // times each was generated so far (0: prompt only), >= 0
  const std::int32_t* bias_offsets{};             // [B+1], or nullptr: no logit bias
  const std::int32_t* bias_tokens{};              // unique per sequence, any order
  const float* bias_values{};                     // finite; added to the token's target logit
  VocabShard shard{};                             // this rank's slice (sharded verify only)
};

/// TreeBatch with rows of logits and LogitsChainBatch's parameters (rows laid out as TreeBatch's).
template <class Logit = float>
struct LogitsTreeBatch {
  std::int32_t batch_size = 0;
  std::int32_t vocab_size = 0;
  const std::int32_t* node_offsets{};
  const std::int32_t* parents{};
  const std::int32_t* draft_tokens{};
  const Logit* target_logits{};
  const Logit* draft_logits{};                    // nullptr when deterministic
  std::int64_t target_stride = 0, draft_stride = 0;
  Drafted drafted = Drafted::sampled;
  const SamplingParams* target_params{};
  const SamplingParams* draft_params{};
  std::int32_t draft_vocab_size = 0;
  const std::int32_t* draft_to_target{};
  const Logit* unconditional_logits{};
  std::int64_t unconditional_stride = 0;
  const std::int64_t* unconditional_first_row{};
  const float* guidance_scale{};
  const std::uint32_t* allowed_tokens{};
  // Penalties and logit bias (docs/api.md "Penalties and logit bias"): per
  // sequence, ragged like the drafts; a pointer may be null when its list's total is 0.
  const std::int32_t* history_offsets{};          // [B+1], or nullptr: no history
  const std::int32_t* history_tokens{};           // prompt and generated tokens: ascending, unique per sequence
  const std::int32_t* history_counts{};           // times each was generated so far (0: prompt only), >= 0
  const std::int32_t* bias_offsets{};             // [B+1], or nullptr: no logit bias
  const std::int32_t* bias_tokens{};              // unique per sequence, any order
  const float* bias_values{};                     // finite; added to the token's target logit
  VocabShard shard{};                             // this rank's slice (sharded verify only)
};

/// Bad input. Thrown before any output is written; the message names sequence, position and value.
class invalid_input : public std::invalid_argument {
 public:
  explicit invalid_input(const std::string& what) : std::invalid_argument(what) {}
};

}  // namespace specverify
