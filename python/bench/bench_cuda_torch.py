"""The engine-style PyTorch CUDA path, on the shapes bench/bench_cuda.cu measures specverify on.

    python3 python/bench/bench_cuda_torch.py [--json out.json] [--reps 20] [--quick]
                                             [--vocab V ...] [--batch B ...]

For each shape (B, V, K) and row kind it times, with CUDA events on the current stream, what an
engine's batched rejection sampler does with target logits [B, K+1, V] and draft logits [B, K, V]:
softmax at temperature 0.8 (and, for top-k 50 + top-p 0.9, the sort-based filtering engines use)
of every row, p(x) and q(x) gathered, u q(x) < p(x), the residual max(p - q, 0) at every position
and the bonus row drawn by the exponential race (argmax of w / Exp(1) noise). Probability rows skip
the softmax. The names match bench_cuda's (chain/probs/Standard, chain/logits_t0.8/Standard,
chain/logits_topk50_topp0.9/Standard), so tools/gpu_check.sh sets the two side by side. It
also times specverify's own Python call on the same tensors (sv.verify of a ChainBatch or
LogitsChainBatch of CUDA tensors, synchronize=False), which bench_cuda's C++ figure plus the
Python layer's cost should match, where the specverify module is importable and was built with CUDA.
Prints a note and exits 0 where torch has no CUDA device.
"""
import argparse
import json
import statistics
import sys

SHAPES = [(V, K) for V, K in ((32000, 5), (128256, 8), (151936, 5), (262144, 5))]
BATCHES = (1, 4, 16, 32, 64, 256)
KINDS = ("probs", "logits_t0.8", "logits_topk50_topp0.9")


def processed(torch, logits, kind):
    """p from logits as engines compute it: temperature, then top-k and top-p by sorting."""
    logits = logits / 0.8
    if kind == "logits_topk50_topp0.9":
        kth = logits.topk(50, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
        sorted_logits, order = logits.sort(dim=-1, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - 0.9
        drop[..., -1] = False
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return logits.softmax(dim=-1)


def race(torch, weights):
    """One draw per row from unnormalised weights: argmax of w / Exp(1)."""
    return (weights / torch.empty_like(weights).exponential_()).argmax(dim=-1)


def engine_step(torch, target, draft, tokens, kind):
    """One verification step; returns the tokens [B, K+1] (accepted, extra, then -1)."""
    B, K = tokens.shape
    p = target if kind == "probs" else processed(torch, target, kind)
    q = draft if kind == "probs" else processed(torch, draft, kind)
    p_x = p[:, :K].gather(-1, tokens[..., None]).squeeze(-1)
    q_x = q.gather(-1, tokens[..., None]).squeeze(-1)
    accepted = torch.rand(B, K, device=p.device) * q_x < p_x
    n = accepted.to(torch.int64).cumprod(dim=-1).sum(dim=-1)
    residual = (p[:, :K] - q).clamp_min(0)
    recovered = race(torch, residual)
    bonus = race(torch, p[:, K])
    extra = torch.where(n < K, recovered.gather(-1, n.clamp(max=K - 1)[:, None]).squeeze(-1), bonus)
    out = torch.full((B, K + 1), -1, dtype=torch.int64, device=p.device)
    keep = torch.arange(K, device=p.device)[None] < n[:, None]
    out[:, :K] = torch.where(keep, tokens, out[:, :K])
    out.scatter_(1, n[:, None], extra[:, None])
    return out


def inputs(torch, B, V, K, kind, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    target = torch.randn(B, K + 1, V, device="cuda", generator=g) * 3
    draft = target[:, :K] + torch.randn(B, K, V, device="cuda", generator=g)
    if kind == "probs":
        target, draft = target.softmax(-1), draft.softmax(-1)
    tokens = torch.multinomial(draft.reshape(-1, V).softmax(-1) if kind != "probs" else draft.reshape(-1, V), 1,
                               generator=g).view(B, K)
    return target, draft, tokens


def specverify_step(torch, sv, target, draft, tokens, kind):
    """sv.verify from Python on the same CUDA tensors: the padded rows as a ragged ChainBatch, or a
    LogitsChainBatch with the kind's sampling parameters (host arrays, copied by the call)."""
    B, K = tokens.shape
    V = target.shape[-1]
    layout = dict(draft_offsets=torch.arange(B + 1, dtype=torch.int32, device="cuda") * K,
                  draft_tokens=tokens.to(torch.int32).reshape(-1))
    if kind == "probs":
        batch = sv.ChainBatch(**layout, target_probs=target.reshape(-1, V), draft_probs=draft.reshape(-1, V))
    else:
        top = kind == "logits_topk50_topp0.9"
        params = sv.sampling_params(B, temperature=0.8, top_k=50 if top else 0, top_p=0.9 if top else 1.0)
        batch = sv.LogitsChainBatch(**layout, target_logits=target.reshape(-1, V), draft_logits=draft.reshape(-1, V),
                                    target_params=params)
    out = sv.ChainOutput(tokens=torch.empty(B, K + 1, dtype=torch.int32, device="cuda"),
                         num_accepted=torch.empty(B, dtype=torch.int32, device="cuda"))
    steps = iter(range(1 << 62))
    return lambda: sv.verify(sv.Standard(), batch, sv.Randomness(seed=1, offset=next(steps)), out, synchronize=False)


def timed(torch, fn, reps):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)  # us
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="B in {1, 16} and V = 32000 only")
    parser.add_argument("--vocab", type=int, nargs="+", help="only these of the shapes' V")
    parser.add_argument("--batch", type=int, nargs="+", help="only these B")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("bench_cuda_torch: no torch, nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("bench_cuda_torch: no CUDA device, nothing to measure")
        return 0
    try:
        import specverify as sv
        sv = sv if sv.cuda_built else None
    except ImportError:
        sv = None
    shapes = SHAPES[:1] if args.quick else SHAPES
    batches = (1, 16) if args.quick else BATCHES
    if args.vocab:
        shapes = [(V, K) for V, K in SHAPES if V in args.vocab]
    if args.batch:
        batches = tuple(args.batch)
    results = []
    for V, K in shapes:
        for B in batches:
            for kind in KINDS:
                python_us = None
                try:
                    target, draft, tokens = inputs(torch, B, V, K, kind)
                    step = lambda: engine_step(torch, target, draft, tokens, kind)  # noqa: E731
                    step()  # warm-up (allocator, kernels)
                    us = timed(torch, step, args.reps)
                    if sv is not None:
                        ours = specverify_step(torch, sv, target, draft, tokens, kind)
                        ours()  # warm-up (the module's workspace)
                        python_us = timed(torch, ours, args.reps)
                except RuntimeError as error:  # out of memory at the largest shapes
                    if "out of memory" not in str(error):
                        raise
                    us = None
                name = f"chain/{kind}/Standard"
                results.append({"name": name, "B": B, "V": V, "K": K, "torch_us": us, "python_us": python_us})
                print(f"{name:40s} B={B:<4d} V={V:<7d} K={K}  torch {us if us is None else round(us, 1)} us"
                      + ("" if python_us is None else f"  specverify from Python {python_us:.1f} us"), flush=True)
                del target, draft, tokens
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
