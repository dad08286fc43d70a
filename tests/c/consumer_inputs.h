/* The inputs of the C consumer (consumer.c, over the C API) and of its C++ twin (consumer_hash.cpp,
 * over the C++ API), built here once so that both verify exactly the same rows, and the FNV-1a
 * hash both print over their outputs. C99 and C++ alike; no library header needed.
 *
 * Every value is exact in float (integers over powers of two), so the two compilers build the same
 * bits whatever their floating-point flags. Notation: p = target, q = draft. */
#ifndef SPECVERIFY_TESTS_CONSUMER_INPUTS_H
#define SPECVERIFY_TESTS_CONSUMER_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#define CI_V 40

/* Chains: 3 sequences drafting 3, 1 and 2 tokens. */
#define CI_B 3
#define CI_DRAFTS 6
#define CI_ROWS (CI_DRAFTS + CI_B) /* target rows: k_b + 1 per sequence */
#define CI_WIDTH 4                 /* the longest chain + 1 */

/* Trees: 2 sequences, nodes {-1, -1, 0, 2} and {-1, 0, 0, 1, -1}. */
#define CI_TB 2
#define CI_TN 9
#define CI_TROWS (CI_TN + CI_TB)
#define CI_TWIDTH 4 /* the deepest path + 1 */

/* Histories and biases of the chain logits batch. */
#define CI_HISTORY 5
#define CI_BIAS 4

/* sv_sample's draws: one row at CI_SAMPLES positions. */
#define CI_SAMPLES 8

/* What a call must not have written (the error case checks it). */
#define CI_SENTINEL_TOKEN 12345
#define CI_SENTINEL_LOGPROB 777.0f

typedef struct ci_inputs {
  /* Chains: probability rows (unnormalised weights) and logits rows over the same drafts. */
  int32_t offsets[CI_B + 1];
  int32_t tokens[CI_DRAFTS];
  float p[CI_ROWS * CI_V];
  float q[CI_DRAFTS * CI_V];
  float target_logits[CI_ROWS * CI_V];
  float draft_logits[CI_DRAFTS * CI_V];
  /* Per-sequence sampling parameters of the logits batch (SamplingParams' fields in order). */
  float temperature[CI_B];
  int32_t top_k[CI_B];
  float top_p[CI_B];
  float min_p[CI_B];
  float repetition_penalty[CI_B];
  float presence_penalty[CI_B];
  float frequency_penalty[CI_B];
  int32_t history_offsets[CI_B + 1];
  int32_t history_tokens[CI_HISTORY];
  int32_t history_counts[CI_HISTORY];
  int32_t bias_offsets[CI_B + 1];
  int32_t bias_tokens[CI_BIAS];
  float bias_values[CI_BIAS];
  uint64_t sequence_seeds[CI_B];
  /* Trees of sampled children: probability rows. */
  int32_t tree_offsets[CI_TB + 1];
  int32_t parents[CI_TN];
  int32_t tree_tokens[CI_TN];
  float tree_p[CI_TROWS * CI_V];
  float tree_q[CI_TROWS * CI_V];
  /* sv_sample's row, with its own history and bias. */
  float sample_logits[CI_V];
  int32_t sample_history_tokens[3];
  int32_t sample_history_counts[3];
  int32_t sample_bias_tokens[2];
  float sample_bias_values[2];
} ci_inputs;

/* A 64-bit LCG (Knuth's MMIX constants); the high bits are the draw. */
static inline uint32_t ci_next(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*state >> 33);
}

/* Weights k / 256, k in [0, 255]: about one in eight zero. */
static inline void ci_weights(float* row, uint64_t* state) {
  int v;
  for (v = 0; v < CI_V; ++v) {
    const uint32_t r = ci_next(state);
    row[v] = r % 8 == 0 ? 0.0f : (float)(r % 256) / 256.0f;
  }
}

/* Logits in [-8, 8) in steps of 1/32. */
static inline void ci_logits(float* row, uint64_t* state) {
  int v;
  for (v = 0; v < CI_V; ++v) row[v] = (float)((int32_t)(ci_next(state) % 512) - 256) / 32.0f;
}

static inline int32_t ci_argmax(const float* row) {
  int32_t v, best = 0;
  for (v = 1; v < CI_V; ++v) {
    if (row[v] > row[best]) best = v;
  }
  return best;
}

/* q near p: p's row plus a small exact perturbation (logits) or times 1/2 to 3/2 (weights), so
 * that drafts are often accepted and the walk reaches later rows. */
static inline void ci_near_weights(float* q, const float* p, uint64_t* state) {
  int v;
  for (v = 0; v < CI_V; ++v) q[v] = p[v] * (float)(64 + ci_next(state) % 128) / 128.0f;
}
static inline void ci_near_logits(float* q, const float* p, uint64_t* state) {
  int v;
  for (v = 0; v < CI_V; ++v) q[v] = p[v] + (float)((int32_t)(ci_next(state) % 33) - 16) / 32.0f;
}

/* A draft token: mostly the draft row's most likely, sometimes any. */
static inline int32_t ci_draft(const float* q, uint64_t* state) {
  const uint32_t r = ci_next(state);
  return r % 4 == 0 ? (int32_t)(ci_next(state) % CI_V) : ci_argmax(q);
}

static inline void ci_build(ci_inputs* in) {
  static const int32_t k[CI_B] = {3, 1, 2};
  static const int32_t parents[CI_TN] = {-1, -1, 0, 2, -1, 0, 0, 1, -1};
  uint64_t state = 20240601u;
  int32_t b, j, i;
  in->offsets[0] = 0;
  for (b = 0; b < CI_B; ++b) in->offsets[b + 1] = in->offsets[b] + k[b];
  /* Sequence b's target rows start at offsets[b] + b: row offsets[b] + b + j is p after drafts
   * 0..j-1; its draft j was drafted from q row offsets[b] + j, near that p. */
  for (b = 0; b < CI_B; ++b) {
    for (j = 0; j <= k[b]; ++j) {
      const int32_t row = in->offsets[b] + b + j;
      ci_weights(&in->p[row * CI_V], &state);
      ci_logits(&in->target_logits[row * CI_V], &state);
      if (j < k[b]) {
        const int32_t d = in->offsets[b] + j;
        ci_near_weights(&in->q[d * CI_V], &in->p[row * CI_V], &state);
        ci_near_logits(&in->draft_logits[d * CI_V], &in->target_logits[row * CI_V], &state);
        in->tokens[d] = ci_draft(&in->q[d * CI_V], &state);
      }
    }
  }
  /* Parameters: plain; top-k, top-p and min-p with penalties; greedy. */
  in->temperature[0] = 1.0f, in->top_k[0] = 0, in->top_p[0] = 1.0f, in->min_p[0] = 0.0f;
  in->temperature[1] = 0.75f, in->top_k[1] = 12, in->top_p[1] = 0.875f, in->min_p[1] = 0.03125f;
  in->temperature[2] = 0.0f, in->top_k[2] = 0, in->top_p[2] = 1.0f, in->min_p[2] = 0.0f;
  for (b = 0; b < CI_B; ++b) {
    in->repetition_penalty[b] = b == 1 ? 1.25f : 1.0f;
    in->presence_penalty[b] = b == 1 ? 0.5f : 0.0f;
    in->frequency_penalty[b] = b == 1 ? 0.25f : 0.0f;
    in->sequence_seeds[b] = 1000u + 17u * (uint64_t)b;
  }
  /* History: sequence 0 two tokens, sequence 1 three (ascending), sequence 2 none. Bias: one
   * token on sequence 0, three on sequence 2. */
  in->history_offsets[0] = 0, in->history_offsets[1] = 2, in->history_offsets[2] = 5, in->history_offsets[3] = 5;
  in->history_tokens[0] = 3, in->history_tokens[1] = 30;
  in->history_tokens[2] = in->tokens[in->offsets[1]], in->history_tokens[3] = 38, in->history_tokens[4] = 39;
  if (in->history_tokens[2] >= 38) in->history_tokens[2] = 37;
  for (i = 0; i < CI_HISTORY; ++i) in->history_counts[i] = i % 3;
  in->bias_offsets[0] = 0, in->bias_offsets[1] = 1, in->bias_offsets[2] = 1, in->bias_offsets[3] = 4;
  in->bias_tokens[0] = 7, in->bias_tokens[1] = 20, in->bias_tokens[2] = 2, in->bias_tokens[3] = 11;
  in->bias_values[0] = 1.5f, in->bias_values[1] = -2.0f, in->bias_values[2] = 0.5f, in->bias_values[3] = 3.0f;

  /* Trees: sequence b's rows start at tree_offsets[b] + b; row 0 is p at the root, row 1 + i p
   * after node i; q rows alike (the q node i's children were drafted from). */
  in->tree_offsets[0] = 0, in->tree_offsets[1] = 4, in->tree_offsets[2] = CI_TN;
  for (i = 0; i < CI_TN; ++i) in->parents[i] = parents[i];
  for (i = 0; i < CI_TROWS; ++i) {
    ci_weights(&in->tree_p[i * CI_V], &state);
    ci_near_weights(&in->tree_q[i * CI_V], &in->tree_p[i * CI_V], &state);
  }
  for (b = 0; b < CI_TB; ++b) {
    for (i = in->tree_offsets[b]; i < in->tree_offsets[b + 1]; ++i) {
      const int32_t parent_row = in->tree_offsets[b] + b + 1 + parents[i];
      in->tree_tokens[i] = ci_draft(&in->tree_q[parent_row * CI_V], &state);
    }
  }

  ci_logits(in->sample_logits, &state);
  in->sample_history_tokens[0] = 1, in->sample_history_tokens[1] = 9, in->sample_history_tokens[2] = 33;
  in->sample_history_counts[0] = 0, in->sample_history_counts[1] = 2, in->sample_history_counts[2] = 1;
  in->sample_bias_tokens[0] = 5, in->sample_bias_tokens[1] = 9;
  in->sample_bias_values[0] = 2.0f, in->sample_bias_values[1] = -1.0f;
}

/* FNV-1a, 64 bits, continued from h over n bytes. */
static inline uint64_t ci_fnv(uint64_t h, const void* data, size_t n) {
  const unsigned char* bytes = (const unsigned char*)data;
  size_t i;
  for (i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}
#define CI_FNV_START 14695981039346656037ull

#endif /* SPECVERIFY_TESTS_CONSUMER_INPUTS_H */
