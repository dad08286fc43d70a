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


def _logits_case(seed, B, V, K, rule, dtype=np.float32, one_hot=False):
    """Rows of logits with every kind of kept set (temperature, greedy, min_p, top_k with ties,
    top_p alone, top_k + top_p), a bitmask, guidance, penalties and a logit bias."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, K + 1, size=B)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    N = int(offsets[-1])
    target = np.round(rng.normal(0.0, 3.0, size=(N + B, V)) * 2.0) / 2.0  # ties, at the k-th value too
    draft = target[[offsets[b] + b + d for b in range(B) for d in range(lengths[b])]] + rng.normal(0.0, 0.5, (N, V))
    tokens = np.array([rng.choice(np.argsort(r)[-3:]) if rng.random() < 0.7 else rng.integers(V) for r in draft],
                      np.int32)
    params = {"temperature": rng.choice([0.0, 0.8, 1.0], B).astype(np.float32),
              "top_k": rng.choice([0, 5, 40], B).astype(np.int32),
              "top_p": rng.choice([1.0, 0.9], B).astype(np.float32),
              "min_p": rng.choice([0.0, 0.05], B).astype(np.float32),
              "repetition_penalty": rng.choice([1.0, 1.3], B).astype(np.float32),
              "presence_penalty": rng.choice([0.0, 0.5], B).astype(np.float32),
              "frequency_penalty": rng.choice([0.0, 0.2], B).astype(np.float32)}
    words = (V + 31) // 32
    allowed = rng.integers(0, 2**32, size=(N + B, words), dtype=np.uint64).astype(np.uint32)
    allowed |= rng.integers(0, 2**32, size=(N + B, words), dtype=np.uint64).astype(np.uint32)
    history = [np.sort(rng.choice(V, size=min(V, 20), replace=False)).astype(np.int32) for _ in range(B)]
    bias = [rng.choice(V, size=min(V, 4), replace=False).astype(np.int32) for _ in range(B)]
    return {"B": B, "V": V, "K": K, "offsets": offsets, "tokens": tokens, "rule": rule, "logits": True,
            "target": target.astype(dtype), "draft": None if one_hot else draft.astype(dtype), "params": params,
            "allowed": allowed, "unconditional": rng.normal(0.0, 3.0, size=(N + B, V)).astype(dtype),
            "first_row": np.array([offsets[b] + b if b % 2 == 0 else -1 for b in range(B)], np.int64),
            "guidance": np.full(B, 1.5, np.float32),
            "history_offsets": np.concatenate([[0], np.cumsum([len(h) for h in history])]).astype(np.int32),
            "history_tokens": np.concatenate(history), "history_counts": np.concatenate(
                [rng.integers(0, 3, len(h)) for h in history]).astype(np.int32),
            "bias_offsets": np.concatenate([[0], np.cumsum([len(x) for x in bias])]).astype(np.int32),
            "bias_tokens": np.concatenate(bias), "bias_values": rng.normal(0.0, 2.0, 4 * B).astype(np.float32)}


CASES = {
    "standard": _case(1, 6, 300, 4, "standard"),
    "standard_one_hot": _case(2, 5, 97, 3, "standard", one_hot=True),
    "fsd_js": _case(3, 4, 500, 5, "fsd_js"),
    "coupled": _case(4, 5, 64, 4, "coupled"),
    "greedy": _case(5, 3, 40, 4, "greedy"),
    "logits_standard": _logits_case(6, 6, 700, 4, "standard"),
    "logits_float16_fsd_js": _logits_case(7, 5, 333, 3, "fsd_js", dtype=np.float16),
    "logits_coupled_one_hot": _logits_case(8, 4, 257, 3, "coupled", one_hot=True),
    "block": _case(9, 5, 200, 5, "block"),
    "logits_block": _logits_case(10, 4, 300, 4, "block"),
    "traversal": _case(11, 5, 200, 5, "traversal"),
    "logits_traversal": _logits_case(12, 4, 300, 4, "traversal"),
}


def bounds(V, ranks):
    """Uneven slices of [0, V), the second one empty where there are three ranks or more."""
    cuts = [0] + [min(V, (V * r * r) // (ranks * ranks)) for r in range(1, ranks)] + [V]
    if ranks >= 3:
        cuts[2] = cuts[1]
    return cuts


def rule_of(sv, name):
    return {"standard": sv.Standard(), "fsd_js": sv.Fsd(sv.Divergence.js, 0.4), "coupled": sv.Coupled(),
            "greedy": sv.Greedy(), "block": sv.Block(), "traversal": sv.Traversal()}[name]


def run(sv, case, lo, hi, rank, ranks, all_gather):
    """Verifies columns [lo, hi) of `case`'s rows (all of them with all_gather None, unsharded)."""
    B, K = case["B"], case["K"]
    tokens = np.full((B, K + 1), 777, np.int32)
    accepted = np.full(B, 777, np.int32)
    logprobs = np.full((B, K + 1), 0.5, np.float32)
    out = sv.ChainOutput(tokens=tokens, num_accepted=accepted, logprobs=logprobs)
    randomness = sv.Randomness(seed=99, offset=3, positions=np.arange(B, dtype=np.int64) * 7)
    kwargs = {}
    if all_gather is not None:
        kwargs = {"shard": sv.VocabShard(rank=rank, ranks=ranks, vocab_start=lo, local_vocab_size=hi - lo),
                  "vocab_size": case["V"]}
    def cols(rows):
        return None if rows is None else np.ascontiguousarray(rows[:, lo:hi])

    if case.get("logits"):
        batch = sv.LogitsChainBatch(
            draft_offsets=case["offsets"], draft_tokens=case["tokens"], target_logits=cols(case["target"]),
            draft_logits=cols(case["draft"]), target_params=sv.sampling_params(B, **case["params"]),
            allowed_tokens=case["allowed"], unconditional_logits=cols(case["unconditional"]),
            unconditional_first_row=case["first_row"], guidance_scale=case["guidance"],
            history_offsets=case["history_offsets"], history_tokens=case["history_tokens"],
            history_counts=case["history_counts"], bias_offsets=case["bias_offsets"],
            bias_tokens=case["bias_tokens"], bias_values=case["bias_values"], **kwargs)
    else:
        batch = sv.ChainBatch(draft_offsets=case["offsets"], draft_tokens=case["tokens"],
                              target_probs=cols(case["p"]), draft_probs=cols(case["q"]), **kwargs)
    rule = rule_of(sv, case["rule"])
    if all_gather is None:
        stats = sv.verify(rule, batch, randomness, out)
    else:
        stats = sv.verify(rule, batch, randomness, out, all_gather=all_gather)
    return {"tokens": tokens, "accepted": accepted, "logprobs": logprobs,
            "stats": np.array([stats.drafted, stats.accepted, stats.relaxed, stats.target_checked])}
