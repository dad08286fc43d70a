"""One decode step of a toy speculative engine, verified through torch.ops.specverify.verify_padded.

The models are bigram tables (row t: the next token's logits after t), the draft a noisy copy of
the target. A step drafts K tokens per sequence, verifies them against the target's rows with
Standard speculative sampling, and commits the kept drafts plus the one extra token. The step is a
function of tensors only, so torch.compile (torch >= 2) traces it whole: the operator is one node.
Each call advances the offset tensor on the rows' device (offset_increment=1), so consecutive steps
draw fresh uniforms without the host, and counts the drafts kept at each position there.

    python3 engine_step.py [--device cpu|cuda] [--steps N]

On CUDA this version of the operator reads its seed and offset on the host (one synchronisation per
call), so the step runs under torch.compile but is not captured in a CUDA graph.
"""
import argparse

import torch

import specverify  # noqa: F401  (registers torch.ops.specverify)

B, K, V = 4, 4, 64


def models(device):
    g = torch.Generator().manual_seed(7)
    target = torch.randn(V, V, generator=g) * 3
    draft = target + torch.randn(V, V, generator=g)
    return target.to(device), draft.to(device)


def step(last, target_table, draft_table, seed, offset, kept_at, generator):
    """Drafts K tokens after each sequence's `last` token, verifies them, and returns the tokens to
    commit [B, K+1] (-1 past each sequence's) and how many of the drafts each sequence kept;
    kept_at[j] gains the number of sequences that kept draft j (the engine's metrics)."""
    drafts, draft_rows, token = [], [], last
    for _ in range(K):
        logits = draft_table[token.long()]
        draft_rows.append(logits)
        token = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)[:, 0].to(torch.int32)
        drafts.append(token)
    drafts = torch.stack(drafts, dim=1)                                          # [B, K]
    context = torch.cat([last[:, None], drafts], dim=1).long()                   # the target sees each prefix
    target_rows = target_table[context]                                          # [B, K+1, V] logits
    draft_rows = torch.stack(draft_rows, dim=1)                                  # [B, K, V]
    ones = torch.ones(last.shape[0], device=last.device)
    return torch.ops.specverify.verify_padded(
        "standard", drafts, target_rows.contiguous(), draft_rows.contiguous(), None,
        ones, torch.zeros_like(ones, dtype=torch.int32), ones, torch.zeros_like(ones),  # T = 1, no top-k/p/min-p
        seed, offset, 1, None, kept_at)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    target_table, draft_table = models(device)
    seed = torch.tensor([2024], dtype=torch.int64, device=device)
    offset = torch.zeros(1, dtype=torch.int64, device=device)
    kept_at = torch.zeros(K, dtype=torch.int64, device=device)
    generator = torch.Generator(device=device).manual_seed(1)
    run = torch.compile(step) if hasattr(torch, "compile") else step

    last = torch.zeros(B, dtype=torch.int32, device=device)
    sequences = [[0] for _ in range(B)]
    kept = 0
    for _ in range(args.steps):
        tokens, accepted = run(last, target_table, draft_table, seed, offset, kept_at, generator)
        tokens, accepted = tokens.cpu(), accepted.cpu()  # the engine's commit, on the host here
        for b in range(B):
            n = int(accepted[b])
            sequences[b] += tokens[b, : n + 1].tolist()
            last[b] = int(tokens[b, n])
        kept += int(accepted.sum())
    print(f"{args.steps} steps on {device}: {kept} of {args.steps * B * K} drafts kept, offset now {int(offset)}")
    print(f"kept at each draft position: {kept_at.tolist()}")
    for b, s in enumerate(sequences):
        print(f"sequence {b}: {s}")


if __name__ == "__main__":
    main()
