/* consumer_cpu.cpp's chain through the C API (specverify::c): exits non-zero unless the result is
 * the only possible one (p puts all mass on the drafted token, then on token 2). */
#include <specverify/specverify.h>

#include <stdio.h>

int main(void) {
  const int32_t offsets[2] = {0, 1}, drafts[1] = {1};
  const float p[2][3] = {{0.0f, 1.0f, 0.0f}, {0.0f, 0.0f, 1.0f}};
  int32_t tokens[2], accepted = -1;
  sv_chain_batch batch = {.struct_size = sizeof batch};
  batch.batch_size = 1;
  batch.vocab_size = 3;
  batch.draft_offsets = offsets;
  batch.draft_tokens = drafts;
  batch.target_probs = p;
  sv_chain_output out = {.struct_size = sizeof out};
  out.tokens = tokens;
  out.row_width = 2;
  out.num_accepted = &accepted;
  const sv_rule rule = {.kind = SV_STANDARD};
  sv_error err;
  if (sv_verify_chains(&rule, &batch, NULL, &out, 1, &err) != SV_OK) {
    printf("error: %s\n", err.message);
    return 1;
  }
  printf("accepted %d, tokens %d %d\n", (int)accepted, (int)tokens[0], (int)tokens[1]);
  return accepted == 1 && tokens[0] == 1 && tokens[1] == 2 ? 0 : 1;
}
