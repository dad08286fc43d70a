"""specverify from Python against batched PyTorch rejection samplers, side by side in one process.

    python3 python/bench/bench_sampler.py [--vocab 32000 128256] [--threads 1 2] [--reps 7]

Same inputs for every sampler: B = 64 chains of K = 5 drafts, target rows p [B, K+1, V] and draft
rows q [B, K, V] (softmax of heavy-tailed logits; q from the same logits plus N(0, noise) noise),
drafts sampled from q. Same thread count: torch.set_num_threads(t) and verify(max_threads=t).

- specverify: ChainBatch over the same tensors (zero-copy), Randomness, verify(Standard()); the
  timing includes building the Python objects, as an engine would each step.
- torch (engine): the way engines write it (vLLM's batched rejection sampler): gather p(x), q(x),
  accept while u q(x) < p(x), the residual max(p - q, 0) at every position drawn by the exponential
  race (argmax of w / Exp(1) noise), the bonus token from the last row the same way.
- torch (rejection row): the same, but the residual only at each chain's first rejected row
  (a tighter PyTorch baseline).

Medians over --reps interleaved runs (after --warmup rounds); speedup = torch time / specverify
time. PyTorch's CPU ops allocate fresh [B, K, V] tensors, which glibc maps from the OS and unmaps
again each time (blocks over 32 MB); page faults then dominate on some machines (about 170 ms per
40 MB tensor on the VM this was written on). Engines run these ops under a caching allocator, so
by default the script restarts itself with glibc told to keep freed memory (MALLOC_MMAP_MAX_=0,
MALLOC_TRIM_THRESHOLD_); --os-allocator measures torch with the default behaviour instead.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

import specverify as sv


def make_inputs(B, K, V, noise, seed):
    g = torch.Generator().manual_seed(seed)
    # Student-t logits (3 degrees of freedom): heavy tails, as LM logits have.
    normal = torch.randn(B, K + 1, V, generator=g)
    chi2 = torch.randn(3, B, K + 1, V, generator=g).square_().sum(0)
    logits = normal.div_(chi2.div_(3).sqrt_())
    del chi2
    p = torch.softmax(logits, dim=-1)
    q = torch.softmax(logits[:, :K] + noise * torch.randn(B, K, V, generator=g), dim=-1)
    del logits
    tokens = torch.multinomial(q.view(-1, V), 1, generator=g).view(B, K)
    return p.contiguous(), q.contiguous(), tokens


def exponential_race(weights, generator):
    """One draw per row from weights (not normalised): argmax of w / Exp(1)."""
    noise = torch.empty_like(weights).exponential_(generator=generator)
    return weights.div_(noise).argmax(dim=-1)


def assemble(tokens, n, extra):
    """n accepted drafts, the extra token, then -1 (kNoToken)."""
    B, K = tokens.shape
    out = torch.full((B, K + 1), -1, dtype=torch.int64)
    positions = torch.arange(K + 1).expand(B, K + 1)
    out[:, :K] = torch.where(positions[:, :K] < n[:, None], tokens, out[:, :K])
    out.scatter_(1, n[:, None], extra[:, None])
    return out


def torch_engine(p, q, tokens, generator):
    """Batched rejection sampling as engines write it: residual draws at every position."""
    B, K1, V = p.shape
    K = K1 - 1
    p_draft = p[:, :K]
    p_x = p_draft.gather(-1, tokens[..., None]).squeeze(-1)
    q_x = q.gather(-1, tokens[..., None]).squeeze(-1)
    u = torch.rand(B, K, generator=generator)
    accepted = u * q_x < p_x
    n = accepted.to(torch.int64).cumprod(dim=-1).sum(dim=-1)
    residual = (p_draft - q).clamp_min_(0)
    empty = residual.sum(dim=-1) == 0  # no residual mass: draw from p
    if bool(empty.any()):
        residual[empty] = p_draft[empty]
    recovered = exponential_race(residual, generator)                    # [B, K]
    bonus = exponential_race(p[:, K].clone(), generator)                 # [B]
    extra = torch.where(n < K, recovered.gather(1, n.clamp(max=K - 1)[:, None]).squeeze(1), bonus)
    return assemble(tokens, n, extra), n


def torch_rejection_row(p, q, tokens, generator):
    """The same rule with the residual formed only at each chain's first rejected row."""
    B, K1, V = p.shape
    K = K1 - 1
    p_x = p[:, :K].gather(-1, tokens[..., None]).squeeze(-1)
    q_x = q.gather(-1, tokens[..., None]).squeeze(-1)
    u = torch.rand(B, K, generator=generator)
    n = (u * q_x < p_x).to(torch.int64).cumprod(dim=-1).sum(dim=-1)
    rows = torch.arange(B)
    p_row = p[rows, n]                                                   # [B, V] (bonus row where n == K)
    q_row = torch.where((n < K)[:, None], q[rows, n.clamp(max=K - 1)], torch.zeros(()))
    weights = (p_row - q_row).clamp_min_(0)
    empty = weights.sum(dim=-1) == 0
    if bool(empty.any()):
        weights[empty] = p_row[empty]
    return assemble(tokens, n, exponential_race(weights, generator)), n


class SpecverifyStep:
    def __init__(self, B, K):
        self.offsets = torch.arange(0, (B + 1) * K, K, dtype=torch.int32)
        self.out = sv.ChainOutput(tokens=torch.empty(B, K + 1, dtype=torch.int32),
                                  num_accepted=torch.empty(B, dtype=torch.int32))
        self.step = 0

    def __call__(self, p, q, tokens, threads):
        B, K1, V = p.shape
        batch = sv.ChainBatch(draft_offsets=self.offsets, draft_tokens=tokens, target_probs=p.view(-1, V),
                              draft_probs=q.view(-1, V))
        self.step += 1
        sv.verify(sv.Standard(), batch, sv.Randomness(seed=1, offset=self.step), self.out, max_threads=threads)
        return self.out.tokens, self.out.num_accepted


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--drafts", type=int, default=5)
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 128256])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--noise", type=float, default=1.0, help="draft logit noise (sets the acceptance rate)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--os-allocator", action="store_true",
                        help="leave glibc's malloc as it is (torch then page-faults on every large tensor)")
    args = parser.parse_args()
    if not args.os_allocator and os.environ.get("MALLOC_MMAP_MAX_") != "0":
        env = dict(os.environ, MALLOC_MMAP_MAX_="0", MALLOC_TRIM_THRESHOLD_=str(1 << 40))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    B, K = args.batch, args.drafts
    print(f"specverify {sv.__version__}, torch {torch.__version__}, numpy {np.__version__}; "
          f"B = {B}, K = {K}, draft noise {args.noise}, median of {args.reps}, "
          f"{'OS allocator' if args.os_allocator else 'glibc keeps freed memory'}")
    header = (f"{'V':>7} {'threads':>7} {'accept':>6} {'specverify ms':>13} {'torch engine ms':>15} "
              f"{'torch rej-row ms':>16} {'speedup engine':>14} {'speedup rej-row':>15}")
    print(header)
    print("-" * len(header))
    for V in args.vocab:
        p, q, tokens = make_inputs(B, K, V, args.noise, seed=V)
        tokens32 = tokens.to(torch.int32).view(-1)
        for threads in args.threads:
            torch.set_num_threads(threads)
            step = SpecverifyStep(B, K)
            gen = torch.Generator().manual_seed(0)
            runs = {
                "sv": lambda: step(p, q, tokens32, threads),
                "engine": lambda: torch_engine(p, q, tokens, gen),
                "row": lambda: torch_rejection_row(p, q, tokens, gen),
            }
            times = {name: [] for name in runs}
            accepted = {name: [] for name in runs}
            for rep in range(args.warmup + args.reps):
                for name, run in runs.items():
                    seconds, (_, n) = timed(run)
                    if rep >= args.warmup:
                        times[name].append(seconds)
                        accepted[name].append(float(n.double().mean()))
            ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
            accept = statistics.mean(accepted["sv"]) / K
            print(f"{V:>7} {threads:>7} {accept:>6.3f} {ms['sv']:>13.2f} {ms['engine']:>15.2f} "
                  f"{ms['row']:>16.2f} {ms['engine'] / ms['sv']:>13.1f}x {ms['row'] / ms['sv']:>14.1f}x")
            for name in ("engine", "row"):  # same rule, so the same acceptance in expectation
                other = statistics.mean(accepted[name]) / K
                if abs(other - accept) > 0.1:
                    print(f"  warning: torch {name} accepts {other:.3f} vs specverify {accept:.3f}")
        del p, q, tokens


if __name__ == "__main__":
    main()
