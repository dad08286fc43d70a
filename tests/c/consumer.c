/* A C99 program over the installed C API (specverify.h, libspecverify, pkg-config specverify), as
 * an engine written in C uses it: a chain batch of probability rows, one of float logits with
 * sampling parameters, penalties and bias, a tree batch, sv_sample, and one bad input. It checks
 * what it can on its own and prints `hash <16 hex digits>`, an FNV-1a over every output, which
 * consumer_hash.cpp computes through the C++ API on the same inputs (consumer_inputs.h): the two
 * lines must be equal. It prints `isa <name>` first (sv_isa()); where that is "none" (SPECVERIFY_ISA
 * names an instruction set the library or CPU lacks) it checks SV_UNSUPPORTED, prints
 * `unsupported <message>` and exits 3. Exits 0 on success, 1 on any failed check. Notation: p =
 * target, q = draft. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <specverify/specverify.h>

#include "consumer_inputs.h"

static int failures = 0;

#define CHECK(cond, what)                                        \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "consumer: check failed: %s\n", what);     \
      ++failures;                                                \
    }                                                            \
  } while (0)

static uint64_t hash_stats(uint64_t h, const sv_stats* s) {
  h = ci_fnv(h, &s->drafted, sizeof s->drafted);
  h = ci_fnv(h, &s->accepted, sizeof s->accepted);
  h = ci_fnv(h, &s->relaxed, sizeof s->relaxed);
  return ci_fnv(h, &s->target_checked, sizeof s->target_checked);
}

/* Each sequence's row: n_b accepted drafts in [0, V), one more token, then -1. */
static void check_rows(const int32_t* tokens, const int32_t* accepted, int32_t B, int32_t width, const char* what) {
  int32_t b, i;
  for (b = 0; b < B; ++b) {
    CHECK(accepted[b] >= 0 && accepted[b] < width, what);
    for (i = 0; i < width; ++i) {
      const int32_t t = tokens[b * width + i];
      if (i <= accepted[b]) {
        CHECK(t >= 0 && t < CI_V, what);
      } else {
        CHECK(t == -1, what);
      }
    }
  }
}

static void fill(int32_t* tokens, float* logprobs, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) tokens[i] = CI_SENTINEL_TOKEN, logprobs[i] = CI_SENTINEL_LOGPROB;
}

static int call_ok(int code, const sv_error* err, const char* what) {
  if (code != SV_OK) {
    fprintf(stderr, "consumer: %s returned %d: %s\n", what, code, err->message);
    ++failures;
    return 0;
  }
  CHECK(err->code == SV_OK && err->message[0] == '\0', what);
  return 1;
}

int main(void) {
  static ci_inputs in;
  sv_sampling_params params[CI_B];
  sv_sampling_params d;
  sv_error err;
  sv_rule rule;
  sv_randomness r;
  sv_chain_batch chains;
  sv_chain_output out;
  sv_tree_batch trees;
  sv_tree_output tree_out;
  sv_stats stats;
  int32_t tokens[CI_B * CI_WIDTH], accepted[CI_B];
  float logprobs[CI_B * CI_WIDTH];
  int32_t tree_tokens[CI_TB * CI_TWIDTH], tree_accepted[CI_TB], tree_nodes[CI_TB * CI_TWIDTH];
  float tree_logprobs[CI_TB * CI_TWIDTH];
  int32_t bad_tokens[CI_DRAFTS];
  uint64_t h = CI_FNV_START;
  int32_t b, i;
  int code;

  ci_build(&in);

  CHECK(sv_version() == SV_VERSION, "sv_version() == SV_VERSION");
  CHECK(sv_isa() != NULL && sv_isa()[0] != '\0', "sv_isa()");
  printf("isa %s\n", sv_isa());
  if (strcmp(sv_isa(), "none") == 0) {
    /* SPECVERIFY_ISA names an instruction set this library or CPU lacks: every call says so. */
    memset(&err, 0, sizeof err);
    code = sv_verify_chains(NULL, NULL, NULL, NULL, 0, &err);
    CHECK(code == SV_UNSUPPORTED && err.code == SV_UNSUPPORTED, "SV_UNSUPPORTED");
    CHECK(sv_sample(NULL, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL, 0, NULL, NULL) == SV_UNSUPPORTED, "sv_sample");
    printf("unsupported %s\n", err.message);
    return failures ? 1 : 3;
  }
  d = sv_sampling_params_default();
  CHECK(d.temperature == 1.0f && d.top_k == 0 && d.top_p == 1.0f && d.min_p == 0.0f && d.repetition_penalty == 1.0f &&
            d.presence_penalty == 0.0f && d.frequency_penalty == 0.0f,
        "sv_sampling_params_default() changes nothing");

  /* 1. Chains of probability rows, Standard. */
  memset(&chains, 0, sizeof chains);
  chains.struct_size = sizeof chains;
  chains.batch_size = CI_B;
  chains.vocab_size = CI_V;
  chains.draft_offsets = in.offsets;
  chains.draft_tokens = in.tokens;
  chains.row_type = SV_F32;
  chains.target_probs = in.p;
  chains.draft_probs = in.q;
  memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  out.tokens = tokens;
  out.row_width = CI_WIDTH;
  out.num_accepted = accepted;
  out.logprobs = logprobs;
  out.stats = &stats;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  r.seed = 11;
  r.offset = 2;
  memset(&rule, 0, sizeof rule);
  rule.kind = SV_STANDARD;
  fill(tokens, logprobs, CI_B * CI_WIDTH);
  code = sv_verify_chains(&rule, &chains, &r, &out, 0, &err);
  if (call_ok(code, &err, "sv_verify_chains (probabilities)")) {
    check_rows(tokens, accepted, CI_B, CI_WIDTH, "probability chains: rows");
    CHECK(stats.drafted == CI_DRAFTS, "probability chains: stats.drafted");
  }
  h = ci_fnv(h, tokens, sizeof tokens);
  h = ci_fnv(h, accepted, sizeof accepted);
  h = ci_fnv(h, logprobs, sizeof logprobs);
  h = hash_stats(h, &stats);

  /* 2. Chains of float logits with sampling parameters, penalties and bias, per-sequence seeds, EARS. */
  for (b = 0; b < CI_B; ++b) {
    params[b] = sv_sampling_params_default();
    params[b].temperature = in.temperature[b];
    params[b].top_k = in.top_k[b];
    params[b].top_p = in.top_p[b];
    params[b].min_p = in.min_p[b];
    params[b].repetition_penalty = in.repetition_penalty[b];
    params[b].presence_penalty = in.presence_penalty[b];
    params[b].frequency_penalty = in.frequency_penalty[b];
  }
  chains.target_probs = NULL;
  chains.draft_probs = NULL;
  chains.target_logits = in.target_logits;
  chains.draft_logits = in.draft_logits;
  chains.target_params = params;
  chains.history_offsets = in.history_offsets;
  chains.history_tokens = in.history_tokens;
  chains.history_counts = in.history_counts;
  chains.bias_offsets = in.bias_offsets;
  chains.bias_tokens = in.bias_tokens;
  chains.bias_values = in.bias_values;
  r.sequence_seeds = in.sequence_seeds;
  rule.kind = SV_EARS;
  rule.beta = 0.25f;
  fill(tokens, logprobs, CI_B * CI_WIDTH);
  code = sv_verify_chains(&rule, &chains, &r, &out, 1, &err);
  if (call_ok(code, &err, "sv_verify_chains (logits)")) check_rows(tokens, accepted, CI_B, CI_WIDTH, "logits chains: rows");
  h = ci_fnv(h, tokens, sizeof tokens);
  h = ci_fnv(h, accepted, sizeof accepted);
  h = ci_fnv(h, logprobs, sizeof logprobs);
  h = hash_stats(h, &stats);

  /* 3. Trees of sampled children over probability rows, Standard. */
  memset(&trees, 0, sizeof trees);
  trees.struct_size = sizeof trees;
  trees.batch_size = CI_TB;
  trees.vocab_size = CI_V;
  trees.node_offsets = in.tree_offsets;
  trees.parents = in.parents;
  trees.draft_tokens = in.tree_tokens;
  trees.row_type = SV_F32;
  trees.target_probs = in.tree_p;
  trees.draft_probs = in.tree_q;
  trees.drafted = SV_SAMPLED;
  memset(&tree_out, 0, sizeof tree_out);
  tree_out.struct_size = sizeof tree_out;
  tree_out.tokens = tree_tokens;
  tree_out.row_width = CI_TWIDTH;
  tree_out.num_accepted = tree_accepted;
  tree_out.accepted_nodes = tree_nodes;
  tree_out.logprobs = tree_logprobs;
  tree_out.stats = &stats;
  r.sequence_seeds = NULL;
  r.seed = 5;
  rule.kind = SV_STANDARD;
  fill(tree_tokens, tree_logprobs, CI_TB * CI_TWIDTH);
  for (i = 0; i < CI_TB * CI_TWIDTH; ++i) tree_nodes[i] = CI_SENTINEL_TOKEN;
  code = sv_verify_trees(&rule, &trees, &r, &tree_out, 0, &err);
  if (call_ok(code, &err, "sv_verify_trees")) {
    check_rows(tree_tokens, tree_accepted, CI_TB, CI_TWIDTH, "trees: rows");
    CHECK(stats.drafted >= 1, "trees: stats.drafted");
  }
  h = ci_fnv(h, tree_tokens, sizeof tree_tokens);
  h = ci_fnv(h, tree_accepted, sizeof tree_accepted);
  h = ci_fnv(h, tree_nodes, sizeof tree_nodes);
  h = ci_fnv(h, tree_logprobs, sizeof tree_logprobs);
  h = hash_stats(h, &stats);

  /* 4. sv_sample: one row, with history and bias, at several positions. */
  {
    sv_sampling_params sp = sv_sampling_params_default();
    sp.temperature = 0.75f;
    sp.top_k = 20;
    sp.repetition_penalty = 1.25f;
    sp.frequency_penalty = 0.5f;
    for (i = 0; i < CI_SAMPLES; ++i) {
      int32_t token = CI_SENTINEL_TOKEN;
      code = sv_sample(in.sample_logits, CI_V, &sp, 99, i, in.sample_history_tokens, in.sample_history_counts, 3,
                       in.sample_bias_tokens, in.sample_bias_values, 2, &token, &err);
      if (call_ok(code, &err, "sv_sample")) CHECK(token >= 0 && token < CI_V, "sv_sample: token in [0, V)");
      h = ci_fnv(h, &token, sizeof token);
    }
  }

  /* 5. A bad input: draft token V. Code 1, a message, nothing written. */
  memcpy(bad_tokens, in.tokens, sizeof bad_tokens);
  bad_tokens[4] = CI_V;
  memset(&chains, 0, sizeof chains);
  chains.struct_size = sizeof chains;
  chains.batch_size = CI_B;
  chains.vocab_size = CI_V;
  chains.draft_offsets = in.offsets;
  chains.draft_tokens = bad_tokens;
  chains.target_probs = in.p;
  chains.draft_probs = in.q;
  fill(tokens, logprobs, CI_B * CI_WIDTH);
  for (b = 0; b < CI_B; ++b) accepted[b] = CI_SENTINEL_TOKEN;
  stats.drafted = stats.accepted = stats.relaxed = stats.target_checked = -5;
  memset(&err, 0, sizeof err);
  code = sv_verify_chains(&rule, &chains, &r, &out, 0, &err);
  CHECK(code == SV_INVALID_INPUT && err.code == SV_INVALID_INPUT, "bad token: SV_INVALID_INPUT");
  CHECK(err.message[0] != '\0' && strchr(err.message, '\0') < err.message + sizeof err.message, "bad token: a message");
  for (i = 0; i < CI_B * CI_WIDTH; ++i) {
    CHECK(tokens[i] == CI_SENTINEL_TOKEN && logprobs[i] == CI_SENTINEL_LOGPROB, "bad token: outputs untouched");
  }
  for (b = 0; b < CI_B; ++b) CHECK(accepted[b] == CI_SENTINEL_TOKEN, "bad token: num_accepted untouched");
  CHECK(stats.drafted == -5 && stats.target_checked == -5, "bad token: stats untouched");
  CHECK(sv_verify_chains(&rule, &chains, &r, &out, 0, NULL) == SV_INVALID_INPUT, "bad token, err null");
  h = ci_fnv(h, &code, sizeof code);
  h = ci_fnv(h, err.message, strlen(err.message));

  if (failures) {
    fprintf(stderr, "consumer: %d checks failed\n", failures);
    return 1;
  }
  printf("hash %016" PRIx64 "\n", h);
  return 0;
}
