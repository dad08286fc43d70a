/* specverify's C API (C99): speculative-decoding verification over a compiled library
 * (libspecverify; CMake target specverify::c; pkg-config specverify). The C++ API's types and
 * semantics (docs/api.md) in C structs: what a call returns is the C++ verify's output for the
 * same rows and randomness, bit for bit.
 *
 * Versioned structs: every struct a caller fills that may grow starts with `struct_size`, which the
 * caller sets to sizeof as it compiled it. The library reads only the fields that size covers and
 * takes the later ones as zero, so a caller built against an older header keeps working. A struct
 * zero-initialised with its struct_size set is a valid default: every pointer null, every count 0.
 *
 * Errors: every entry point returns SV_OK (0) or an error code, which it also stores with the
 * message in *err when err is not null. SV_INVALID_INPUT is the C++ invalid_input, with its message
 * (sequence, position and value at fault); on it, and on every other error, no output was written.
 * Nothing aborts, prints, or lets an exception cross the ABI.
 *
 *   sv_chain_batch batch = {.struct_size = sizeof batch};
 *   batch.batch_size = B; batch.vocab_size = V;
 *   batch.draft_offsets = offsets; batch.draft_tokens = drafts;
 *   batch.target_probs = p; batch.draft_probs = q;                 // float32 rows
 *   sv_chain_output out = {.struct_size = sizeof out};
 *   out.tokens = tokens; out.row_width = K + 1; out.num_accepted = accepted;
 *   sv_randomness r = {.struct_size = sizeof r}; r.seed = 1; r.offset = step;
 *   sv_rule rule = {.kind = SV_STANDARD};
 *   sv_error err;
 *   if (sv_verify_chains(&rule, &batch, &r, &out, 0, &err) != SV_OK) fprintf(stderr, "%s\n", err.message);
 */
#ifndef SPECVERIFY_SPECVERIFY_H
#define SPECVERIFY_SPECVERIFY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(SPECVERIFY_C_SHARED)
#ifdef SPECVERIFY_C_BUILDING
#define SV_API __declspec(dllexport)
#else
#define SV_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define SV_API __attribute__((visibility("default")))
#else
#define SV_API
#endif

/* The version, major * 10000 + minor * 100 + patch: SV_VERSION the header's, sv_version() the
 * library's (the project's version, 0.1.0). */
#define SV_VERSION 100
SV_API int sv_version(void);

typedef enum sv_status {
  SV_OK = 0,
  SV_INVALID_INPUT = 1,  /* the input is malformed: the message names sequence, position and value */
  SV_OUT_OF_MEMORY = 2,  /* scratch could not be allocated */
  SV_COMMUNICATOR = 3,   /* a sharded call's all_gather returned non-zero (its ranks are then out of step) */
  SV_INTERNAL = 4,       /* anything else the library threw: a defect, reported with its message */
  SV_UNSUPPORTED = 5     /* SPECVERIFY_ISA names an instruction set this library or this CPU lacks (sv_isa) */
} sv_status;

typedef struct sv_error {
  int code;            /* an sv_status */
  char message[512];   /* NUL-terminated; cut at 511 bytes */
} sv_error;

/* Row element types. Probability rows are SV_F32 on the CPU; logits rows any of the three (16-bit
 * rows are widened exactly as they are read). */
typedef enum sv_row_type { SV_F32 = 0, SV_F16 = 1, SV_BF16 = 2 } sv_row_type;

typedef enum sv_rule_kind {
  SV_STANDARD,   /* u q(x) < p(x); lossless */
  SV_GREEDY,     /* x == argmax p */
  SV_EARS,       /* beta */
  SV_FSD,        /* divergence, threshold */
  SV_RFSD,       /* reducible FSD: divergence, threshold */
  SV_BLOCK,      /* chains only */
  SV_TRAVERSAL,  /* trees of sampled children, and chains */
  SV_COUPLED,    /* needs sv_randomness.positions */
  SV_TYPICAL     /* Medusa's typical acceptance: not built into this version (SV_INVALID_INPUT) */
} sv_rule_kind;

typedef enum sv_divergence { SV_KL_TARGET_DRAFT, SV_KL_DRAFT_TARGET, SV_JS, SV_JS_FSD, SV_TV } sv_divergence;

/* A rule and its parameters; fields a rule does not name are ignored. */
typedef struct sv_rule {
  sv_rule_kind kind;
  sv_divergence divergence;
  float beta;
  float threshold;
} sv_rule;

/* The C++ SamplingParams, field for field. Its defaults are not all zero: start from
 * sv_sampling_params_default(). */
typedef struct sv_sampling_params {
  float temperature;         /* >= 0; 0: greedy */
  int32_t top_k;             /* >= 0; 0: off */
  float top_p;               /* (0, 1]; 1: off */
  float min_p;               /* [0, 1]; 0: off */
  float repetition_penalty;  /* > 0; 1: off */
  float presence_penalty;    /* 0: off */
  float frequency_penalty;   /* 0: off */
} sv_sampling_params;
SV_API sv_sampling_params sv_sampling_params_default(void);

typedef struct sv_randomness {
  size_t struct_size;
  uint64_t seed;
  uint64_t offset;                  /* step counter: advance it between steps */
  const uint64_t* sequence_seeds;   /* optional [B] */
  const float* accept_uniforms;     /* optional [draft positions], each in [0, 1) */
  const float* sample_uniforms;     /* optional [B], each in [0, 1) */
  const int64_t* positions;         /* [B] for SV_COUPLED: absolute position of each first draft */
} sv_randomness;

/* A rank's slice of the vocabulary (sharded verify). All zero, or ranks 1 with the rest zero, is
 * one rank holding everything. */
typedef struct sv_vocab_shard {
  int32_t rank;
  int32_t ranks;             /* 0 is read as 1 */
  int32_t vocab_start;
  int32_t local_vocab_size;  /* 0 with one rank: vocab_size */
} sv_vocab_shard;

/* The collective of a sharded call: blocking, on every rank with the same `bytes`; recv receives
 * ranks * bytes, rank r's contribution at offset r * bytes. Returns 0 on success. */
typedef int (*sv_all_gather_fn)(void* context, const void* send, size_t bytes, void* recv);
typedef struct sv_communicator {
  sv_all_gather_fn all_gather;
  void* context;
} sv_communicator;

/* Statistics of one call (the C++ VerifyStats). */
typedef struct sv_stats {
  int64_t drafted;
  int64_t accepted;
  int64_t relaxed;
  int64_t target_checked;
} sv_stats;

/* A batch of draft chains: the C++ ChainBatch (probability rows) or LogitsChainBatch (logits
 * rows: target_logits and target_params set; a rank whose slice is empty may leave its rows null),
 * its fields under their C++ names.
 * Rows are of row_type; the fields after draft_params are LogitsChainBatch's alone, except
 * target_row_max (ChainBatch's) and shard (both). */
typedef struct sv_chain_batch {
  size_t struct_size;
  int32_t batch_size;
  int32_t vocab_size;
  const int32_t* draft_offsets;         /* [B+1] */
  const int32_t* draft_tokens;          /* [offsets[B]] */
  sv_row_type row_type;
  const void* target_probs;             /* [offsets[B] + B rows], or */
  const void* draft_probs;              /* [offsets[B] rows], null: one-hot drafts */
  const void* target_logits;            /* rows as target_probs */
  const void* draft_logits;             /* rows as draft_probs, null: one-hot drafts */
  int64_t target_stride;                /* elements between rows; 0: the row's length */
  int64_t draft_stride;
  const sv_sampling_params* target_params;  /* [B] */
  const sv_sampling_params* draft_params;   /* [B], null: the target's */
  const float* target_row_max;          /* optional, probability rows: max_v p(v) per target row */
  int32_t draft_vocab_size;             /* reduced draft vocabulary: 0 = the target's */
  const int32_t* draft_to_target;       /* [draft_vocab_size] */
  const void* unconditional_logits;     /* guidance companion rows, of row_type */
  int64_t unconditional_stride;
  const int64_t* unconditional_first_row;  /* [B], -1: no guidance */
  const float* guidance_scale;          /* [B] */
  const uint32_t* allowed_tokens;       /* [target rows][ceil(V / 32)] grammar bitmask */
  const int32_t* history_offsets;       /* [B+1], or null: no history */
  const int32_t* history_tokens;
  const int32_t* history_counts;
  const int32_t* bias_offsets;          /* [B+1], or null: no logit bias */
  const int32_t* bias_tokens;
  const float* bias_values;
  sv_vocab_shard shard;
  const sv_communicator* communicator;  /* required when shard.ranks > 1 */
} sv_chain_batch;

typedef struct sv_chain_output {
  size_t struct_size;
  int32_t* tokens;        /* [B][row_width] */
  int32_t row_width;      /* >= max k_b + 1 */
  int32_t* num_accepted;  /* [B] */
  float* logprobs;        /* optional [B][row_width] */
  sv_stats* stats;        /* optional: the call's statistics */
} sv_chain_output;

typedef enum sv_drafted { SV_SAMPLED, SV_SAMPLED_WITHOUT_REPLACEMENT, SV_DETERMINISTIC } sv_drafted;

/* A batch of draft trees: the C++ TreeBatch or LogitsTreeBatch, as sv_chain_batch. */
typedef struct sv_tree_batch {
  size_t struct_size;
  int32_t batch_size;
  int32_t vocab_size;
  const int32_t* node_offsets;          /* [B+1] */
  const int32_t* parents;               /* [N]: sequence-local, -1 = child of the root */
  const int32_t* draft_tokens;          /* [N] */
  sv_row_type row_type;
  const void* target_probs;             /* [N + B rows] */
  const void* draft_probs;              /* [N + B rows], null when deterministic */
  const void* target_logits;
  const void* draft_logits;
  int64_t target_stride;
  int64_t draft_stride;
  sv_drafted drafted;
  const sv_sampling_params* target_params;
  const sv_sampling_params* draft_params;
  int32_t draft_vocab_size;
  const int32_t* draft_to_target;
  const void* unconditional_logits;
  int64_t unconditional_stride;
  const int64_t* unconditional_first_row;
  const float* guidance_scale;
  const uint32_t* allowed_tokens;
  const int32_t* history_offsets;
  const int32_t* history_tokens;
  const int32_t* history_counts;
  const int32_t* bias_offsets;
  const int32_t* bias_tokens;
  const float* bias_values;
  sv_vocab_shard shard;
  const sv_communicator* communicator;
} sv_tree_batch;

typedef struct sv_tree_output {
  size_t struct_size;
  int32_t* tokens;          /* [B][row_width] */
  int32_t row_width;        /* >= deepest path + 1 */
  int32_t* num_accepted;    /* [B] */
  int32_t* accepted_nodes;  /* optional [B][row_width] */
  float* logprobs;          /* optional [B][row_width] */
  sv_stats* stats;          /* optional */
} sv_tree_output;

/* Verifies a batch (C++ verify with CpuOptions{max_threads}; 0: every hardware thread). r may be
 * null: seed 0, offset 0. */
SV_API int sv_verify_chains(const sv_rule* rule, const sv_chain_batch* batch, const sv_randomness* r,
                            const sv_chain_output* out, int max_threads, sv_error* err);
SV_API int sv_verify_trees(const sv_rule* rule, const sv_tree_batch* batch, const sv_randomness* r,
                           const sv_tree_output* out, int max_threads, sv_error* err);

/* One plain draw from a row of float logits processed by params (C++ sample): the token in *token.
 * The history and bias lists may be null when their sizes are 0. */
SV_API int sv_sample(const float* logits, int32_t vocab_size, const sv_sampling_params* params, uint64_t seed,
                     int64_t position, const int32_t* history_tokens, const int32_t* history_counts,
                     int32_t history_size, const int32_t* bias_tokens, const float* bias_values, int32_t bias_size,
                     int32_t* token, sv_error* err);

/* The instruction set the library's kernels run on: "sse2", "avx2" or "avx512" ("generic" off
 * x86-64). On x86-64 the library holds its kernels for each of the three (a build for one machine,
 * SPECVERIFY_NATIVE, holds that machine's in place of one of them) and picks, at the first call, the
 * best this CPU runs; the outputs are the same bits on each. SPECVERIFY_ISA=sse2|avx2|avx512 in the
 * environment forces one; where this library or CPU lacks it, sv_isa() returns "none" and every
 * other call SV_UNSUPPORTED, its message naming what is missing. */
SV_API const char* sv_isa(void);

#ifdef __cplusplus
}
#endif

#endif /* SPECVERIFY_SPECVERIFY_H */
