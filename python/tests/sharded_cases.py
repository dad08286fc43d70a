"""The batches the sharded tests verify, and one rank's verify of its slice (shared by
test_sharded.py and the rank processes of sharded_rank.py)."""
import numpy as np


def _case(seed, B, V, K, rule, one_hot=False):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, K + 1, size=B)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    N = int(offsets[-1])
    p = rng.gamma(0.3, size=(N + B, V)).astype(np.float32)
    p /= p.sum(axis=1, keepdims=True)
    q = rng.gamma(0.3, size=(N, V)).astype(np.float32)
    q /= q.sum(axis=1, keepdims=True)
    tokens = np.array([rng.choice(V, p=r / r.sum()) for r in q.astype(np.float64)], np.int32)
    return {"B": B, "V": V, "K": K, "offsets": offsets, "tokens": tokens, "p": p, "q": None if one_hot else q,
            "rule": rule}


CASES = {
    "standard": _case(1, 6, 300, 4, "standard"),
    "standard_one_hot": _case(2, 5, 97, 3, "standard", one_hot=True),
    "fsd_js": _case(3, 4, 500, 5, "fsd_js"),
    "coupled": _case(4, 5, 64, 4, "coupled"),
    "greedy": _case(5, 3, 40, 4, "greedy"),
}


def bounds(V, ranks):
    """Uneven slices of [0, V), the second one empty where there are three ranks or more."""
    cuts = [0] + [min(V, (V * r * r) // (ranks * ranks)) for r in range(1, ranks)] + [V]
    if ranks >= 3:
        cuts[2] = cuts[1]
    return cuts


def rule_of(sv, name):
    return {"standard": sv.Standard(), "fsd_js": sv.Fsd(sv.Divergence.js, 0.4), "coupled": sv.Coupled(),
            "greedy": sv.Greedy()}[name]


def run(sv, case, lo, hi, rank, ranks, all_gather):
    """Verifies columns [lo, hi) of `case`'s rows (all of them with all_gather None, unsharded)."""
    B, K = case["B"], case["K"]
    tokens = np.full((B, K + 1), 777, np.int32)
    accepted = np.full(B, 777, np.int32)
    logprobs = np.full((B, K + 1), 0.5, np.float32)
    out = sv.ChainOutput(tokens=tokens, num_accepted=accepted, logprobs=logprobs)
    q = case["q"]
    randomness = sv.Randomness(seed=99, offset=3, positions=np.arange(B, dtype=np.int64) * 7)
    kwargs = {}
    if all_gather is not None:
        kwargs = {"shard": sv.VocabShard(rank=rank, ranks=ranks, vocab_start=lo, local_vocab_size=hi - lo),
                  "vocab_size": case["V"]}
    batch = sv.ChainBatch(draft_offsets=case["offsets"], draft_tokens=case["tokens"],
                          target_probs=np.ascontiguousarray(case["p"][:, lo:hi]),
                          draft_probs=None if q is None else np.ascontiguousarray(q[:, lo:hi]), **kwargs)
    rule = rule_of(sv, case["rule"])
    if all_gather is None:
        stats = sv.verify(rule, batch, randomness, out)
    else:
        stats = sv.verify(rule, batch, randomness, out, all_gather=all_gather)
    return {"tokens": tokens, "accepted": accepted, "logprobs": logprobs,
            "stats": np.array([stats.drafted, stats.accepted, stats.relaxed, stats.target_checked])}
