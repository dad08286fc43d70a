/* The C API in one step of a decode loop: two sequences drafted chains of 3 and 1 tokens over a
 * vocabulary of 4; the target's rows p and the draft's rows q are probabilities. Standard
 * speculative sampling keeps n_b drafts of sequence b and adds one token.
 *
 *   cc -std=c99 verify_chain.c $(pkg-config --cflags --libs specverify) */
#include <stdio.h>

#include <specverify/specverify.h>

int main(void) {
  enum { B = 2, V = 4, K = 3 };
  const int32_t offsets[B + 1] = {0, 3, 4};  /* k_0 = 3, k_1 = 1 */
  const int32_t drafts[4] = {1, 2, 3, 0};
  /* Sequence b owns k_b + 1 target rows from offsets[b] + b: p after each draft, then its bonus row. */
  const float p[4 + B][V] = {{0.1f, 0.6f, 0.2f, 0.1f}, {0.2f, 0.2f, 0.5f, 0.1f}, {0.7f, 0.1f, 0.1f, 0.1f},
                             {0.25f, 0.25f, 0.25f, 0.25f}, {0.4f, 0.3f, 0.2f, 0.1f}, {0.1f, 0.1f, 0.1f, 0.7f}};
  const float q[4][V] = {{0.1f, 0.7f, 0.1f, 0.1f}, {0.1f, 0.1f, 0.7f, 0.1f}, {0.1f, 0.1f, 0.1f, 0.7f},
                         {0.7f, 0.1f, 0.1f, 0.1f}};
  int32_t tokens[B][K + 1];
  int32_t accepted[B];
  sv_stats stats;

  sv_chain_batch batch = {.struct_size = sizeof batch};
  batch.batch_size = B;
  batch.vocab_size = V;
  batch.draft_offsets = offsets;
  batch.draft_tokens = drafts;
  batch.row_type = SV_F32;
  batch.target_probs = p;
  batch.draft_probs = q;

  sv_chain_output out = {.struct_size = sizeof out};
  out.tokens = &tokens[0][0];
  out.row_width = K + 1;
  out.num_accepted = accepted;
  out.stats = &stats;

  sv_randomness randomness = {.struct_size = sizeof randomness};
  randomness.seed = 2024;
  randomness.offset = 0; /* the step: advance it every step */

  const sv_rule rule = {.kind = SV_STANDARD};
  sv_error err;
  if (sv_verify_chains(&rule, &batch, &randomness, &out, 0, &err) != SV_OK) {
    fprintf(stderr, "verify: %s\n", err.message);
    return 1;
  }
  for (int b = 0; b < B; ++b) {
    printf("sequence %d: %d of %d drafts kept, tokens", b, (int)accepted[b], (int)(offsets[b + 1] - offsets[b]));
    for (int j = 0; j <= accepted[b]; ++j) printf(" %d", (int)tokens[b][j]);
    printf("\n");
  }
  printf("accepted %lld of %lld drafted\n", (long long)stats.accepted, (long long)stats.drafted);
  return 0;
}
